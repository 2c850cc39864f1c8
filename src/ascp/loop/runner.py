"""One policy over a set of cases: the loop plus the per-case metrics (what `ascp run` does)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ascp.lm.protocol import LanguageModel
from ascp.loop.portfolios import LoopConfig, run_portfolios
from ascp.metrics.answers import Matcher
from ascp.metrics.nli import prefetch, require_matcher
from ascp.metrics.portfolio import case_metrics
from ascp.types import Case, Portfolio


def evaluate_portfolios(
    cases: Sequence[Case], portfolios: Sequence[Portfolio], embed_fn: Callable[[Sequence[str]], np.ndarray] | None,
    matcher: Matcher | None = None,
) -> list[dict[str, Any]]:
    """One row per case: its ranked pool and every metric of `ascp.metrics.portfolio.case_metrics`; claim
    units (ELI5) are decided by `matcher` (`ascp.metrics.nli`), its pairs scored in one batch per case."""
    rows = []
    for case, portfolio in zip(cases, portfolios, strict=True):
        responses = [r.response for r in portfolio.rounds]
        embeddings = embed_fn(responses) if embed_fn is not None and len(responses) > 1 else None
        if matcher is not None:  # responses (PR@T) and offered passages (the ceiling)
            prefetch(matcher, case.units, [*responses, *(case.passage(pid).full_text for pid in portfolio.offered)])
        metrics = case_metrics(case, portfolio, response_embeddings=embeddings, matcher=matcher)
        rows.append({"case_id": case.id, "policy": portfolio.policy, "pool": [p.id for p in case.pool], **metrics})
    return rows


def run_policy(
    lm: LanguageModel, cases: Sequence[Case], config: LoopConfig, embed_fn: Callable[[Sequence[str]], np.ndarray],
    progress: Callable[[int], None] | None = None, matcher: Matcher | None = None,
) -> tuple[list[Portfolio], list[dict[str, Any]]]:
    """The portfolios (each with its `metrics`) and one row per case (pool + metrics). Cases with
    claim units need `matcher` (`ascp.metrics.nli.load_nli_matcher`); without one this fails before generating."""
    require_matcher(cases, matcher is not None)
    portfolios = run_portfolios(lm, cases, config, embed_fn, progress=progress)
    rows = evaluate_portfolios(cases, portfolios, embed_fn, matcher)
    measured = [
        replace(p, metrics={k: v for k, v in row.items() if k not in ("case_id", "policy", "pool")})
        for p, row in zip(portfolios, rows, strict=True)
    ]
    return measured, rows
