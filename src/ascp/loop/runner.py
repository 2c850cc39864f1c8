"""One policy over a set of cases: the loop plus the per-case metrics (what `ascp run` does)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ascp.lm.protocol import LanguageModel
from ascp.loop.portfolios import LoopConfig, run_loop
from ascp.metrics.answers import Matcher
from ascp.metrics.nli import prefetch, require_matcher
from ascp.metrics.portfolio import case_metrics
from ascp.types import Case, Portfolio


def measure_portfolios(
    cases: Sequence[Case], portfolios: Sequence[Portfolio], embed_fn: Callable[[Sequence[str]], np.ndarray] | None,
    matcher: Matcher | None = None,
) -> list[Portfolio]:
    """Each portfolio with every metric of `ascp.metrics.portfolio.case_metrics`; claim units (ELI5) are
    decided by `matcher` (`ascp.metrics.nli`), its pairs scored in one batch per case."""
    measured = []
    for case, portfolio in zip(cases, portfolios, strict=True):
        responses = [r.response for r in portfolio.rounds]
        embeddings = embed_fn(responses) if embed_fn is not None and len(responses) > 1 else None
        if matcher is not None:  # responses (PR@T) and offered passages (the ceiling)
            prefetch(matcher, case.units, [*responses, *(case.passage(pid).full_text for pid in portfolio.offered)])
        metrics = case_metrics(case, portfolio, response_embeddings=embeddings, matcher=matcher)
        measured.append(replace(portfolio, metrics=metrics))
    return measured


def case_row(case: Case, portfolio: Portfolio) -> dict[str, Any]:
    """The per-case record of a run (`cases.jsonl`): case id, policy, the ranked pool's ids, the metrics."""
    return {"case_id": case.id, "policy": portfolio.policy, "pool": [p.id for p in case.pool], **portfolio.metrics}


def run_policy(
    lm: LanguageModel, cases: Sequence[Case], config: LoopConfig, embed_fn: Callable[[Sequence[str]], np.ndarray],
    progress: Callable[[int], None] | None = None, matcher: Matcher | None = None,
) -> list[Portfolio]:
    """The portfolios, each with its `metrics`. Cases with claim units need `matcher`
    (`ascp.metrics.nli.load_nli_matcher`): refused here, before any generation, whoever calls; the
    command line and the API also ask before they load a model."""
    require_matcher(cases, matcher is not None)
    return measure_portfolios(cases, run_loop(lm, cases, config, embed_fn, progress=progress), embed_fn, matcher)
