"""How well probe scores rank the passages that matter (Sec. 4.3): ROC AUC against necessity
labels and cover@m against answer-bearing passages. Pure functions; scipy loads inside `auc`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ascp.types import AnswerUnit


def cover_at_m(
    ranked_ids: Sequence[str],
    answer_bearing: Mapping[str, Collection[str]],
    m: int,
    units: Iterable[str | AnswerUnit],
) -> float:
    """cover@m (Sec. 4.3) = |U ∩ (∪_{d in top-m of ranked_ids} answer_bearing[d])| / |U|.

    U = the distinct unit ids of `units` (ids or `AnswerUnit`s); a document absent from
    `answer_bearing` attests nothing; m larger than the ranking takes all of it. Empty U: ValueError;
    m < 0: ValueError."""
    if m < 0:
        raise ValueError(f"m must be >= 0, got {m}")
    gold = {u.id if isinstance(u, AnswerUnit) else u for u in units}
    if not gold:
        raise ValueError("no gold answer units: cover@m is undefined")
    attested: set[str] = set()
    for d in ranked_ids[:m]:
        attested.update(answer_bearing.get(d, ()))
    return len(attested & gold) / len(gold)


def auc(scores: ArrayLike, labels: ArrayLike) -> float:
    """ROC AUC by Mann–Whitney: mean over (positive, negative) pairs of 1 if s_pos > s_neg, 0.5 if
    equal, 0 otherwise; computed from average ranks as (R_pos - P(P+1)/2) / (P N). Labels are
    0/1 or bool. No positive or no negative: nan. Non-finite score: ValueError."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and labels {y.shape} must be 1-d of equal length")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0/1 or bool")
    pos = y.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = rankdata(s)  # average ranks: a tie contributes 0.5 per pair
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))

