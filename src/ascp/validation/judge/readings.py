"""The readings the judge is compared with, per offered passage: the probe's (max normalised or raw
score over the rounds that showed it) and an embedding proxy's (max cos(d, y_t))."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ascp.types import Round
from ascp.validation.judge.portfolios import JudgedPortfolio

EmbedFn = Callable[[Sequence[str]], np.ndarray]


def probe_reading(rounds: Sequence[Round], pid: str, raw: bool = False) -> float:
    """Max over the rounds whose context held `pid` of its normalised (or raw) probe score."""
    values = [float((r.scores if raw else r.normalized).get(pid, 0.0)) for r in rounds if pid in r.context]
    return max(values) if values else math.nan


def proxy_readings(portfolio: JudgedPortfolio, embed_fn: EmbedFn) -> dict[str, float]:
    """The embedding proxy: max over the rounds whose context held d of cos(d, y_t); passages are
    embedded as "title: text" (as the yd-cosine estimator does)."""
    offered = portfolio.offered
    texts = [portfolio.passage(pid).full_text for pid in offered] + portfolio.responses
    vectors = np.asarray(embed_fn(texts), dtype=float)
    docs, answers = vectors[: len(offered)], vectors[len(offered):]
    cosines = docs @ answers.T
    return {pid: max(float(cosines[i, t]) for t, r in enumerate(portfolio.rounds) if pid in r.context)
            for i, pid in enumerate(offered)}
