"""Judging portfolios: every coverage and novelty judgement of a portfolio with its row of
per-portfolio measures, and a whole run's judgements with their statistics."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ascp.lm.protocol import LanguageModel
from ascp.validation.judge.portfolios import JudgedPortfolio
from ascp.validation.judge.prompts import coverage_prompts, novelty_prompts
from ascp.validation.judge.readings import EmbedFn, probe_reading, proxy_readings
from ascp.validation.judge.scoring import USED_AT, p_yes
from ascp.validation.judge.statistics import judge_statistics


@dataclass(frozen=True)
class PortfolioJudgement:
    """A portfolio's judge records (`documents`, `novelty`) and its row of per-portfolio measures."""

    documents: list[dict[str, Any]]
    novelty: list[dict[str, Any]]
    row: dict[str, Any]


def judge_portfolio(lm: LanguageModel, portfolio: JudgedPortfolio, embed_fn: EmbedFn) -> PortfolioJudgement:
    """Every judgement of one portfolio: one per offered passage, one per round t >= 2."""
    offered = portfolio.offered
    responses = portfolio.shown_responses()
    covered = p_yes(lm, coverage_prompts(lm, responses, [portfolio.passage(pid) for pid in offered]))
    proxy = proxy_readings(portfolio, embed_fn) if offered else {}
    documents = [{"kind": "coverage", **portfolio.key, "passage_id": pid,
                  "rounds": [r.round for r in portfolio.rounds if pid in r.context],
                  "probe": probe_reading(portfolio.rounds, pid),
                  "probe_raw": probe_reading(portfolio.rounds, pid, raw=True),
                  "proxy": proxy[pid], "p_yes": float(p), "used": bool(p >= USED_AT)}
                 for pid, p in zip(offered, covered, strict=True)]
    novel = p_yes(lm, novelty_prompts(lm, responses))
    novelty = [{"kind": "novelty", **portfolio.key, "round": portfolio.rounds[t + 1].round, "p_yes": float(p)}
               for t, p in enumerate(novel)]
    row = {**portfolio.key, "offered": len(offered), "rounds": len(portfolio.rounds), "ecr": portfolio.ecr,
           "ecr_thresholded": portfolio.ecr_thresholded, "distinct_2": portfolio.distinct_2,
           "judge_coverage": float(np.mean(covered >= USED_AT)) if offered else math.nan,
           "judge_mean_p_yes": float(np.mean(covered)) if offered else math.nan,
           "novelty": float(np.mean(novel)) if novel.size else math.nan,
           "top_judge": _unique_top(offered, list(covered)),
           "top_probe": _unique_top(offered, [d["probe"] for d in documents]),
           "top_proxy": _unique_top(offered, [d["proxy"] for d in documents])}
    return PortfolioJudgement(documents, novelty, row)


def _unique_top(ids: Sequence[str], values: Sequence[float]) -> str | None:
    """The id of the single largest value; None when the top is tied (or there is nothing)."""
    if not ids:
        return None
    top = max(values)
    tied = [i for i, v in zip(ids, values, strict=True) if math.isclose(v, top, rel_tol=1e-9, abs_tol=1e-12)]
    return tied[0] if len(tied) == 1 else None


@dataclass(frozen=True)
class JudgeResult:
    """Every judgement (coverage lines, then novelty lines, per portfolio), the per-portfolio rows
    and the statistics."""

    judgements: list[dict[str, Any]]
    portfolios: list[dict[str, Any]]
    statistics: dict[str, Any]


def judge_portfolios(lm: LanguageModel, portfolios: Sequence[JudgedPortfolio], embed_fn: EmbedFn,
                     progress: Callable[[int], None] | None = None) -> JudgeResult:
    """Judge every portfolio (deterministic: the same model and run give the same result)."""
    judgements: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    for portfolio in portfolios:
        done = judge_portfolio(lm, portfolio, embed_fn)
        judgements += done.documents + done.novelty
        documents += done.documents
        rows.append(done.row)
        if progress is not None:
            progress(1)
    return JudgeResult(judgements, rows, judge_statistics(documents, rows))
