"""`mmr`: Maximal Marginal Relevance (Carbonell & Goldstein, 1998), static across rounds."""

from __future__ import annotations

import numpy as np

from ascp.params import Param
from ascp.schedulers._common import selection
from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection

MMR_LAMBDA = 0.5


def mmr_order(
    relevance: np.ndarray,
    similarity: np.ndarray,
    m: int,
    lam: float = MMR_LAMBDA,
    penalty: np.ndarray | None = None,
) -> list[int]:
    """Greedy MMR: argmax_d lam * rel(d) - (1 - lam) * max(penalty(d), max_{s in S} cos(d, s)).

    `similarity`: the (N, N) passage cosines. `penalty`: a fixed per-passage redundancy floor
    (Carriage: similarity to earlier outputs); None: 0, the classic convention for an empty
    selected set. Ties go to the better rank.
    """
    n = relevance.shape[0]
    m = min(m, n)
    red = np.zeros(n) if penalty is None else np.asarray(penalty, dtype=np.float64).copy()
    avail = np.ones(n, dtype=bool)
    chosen: list[int] = []
    for _ in range(m):
        score = np.where(avail, lam * relevance - (1.0 - lam) * red, -np.inf)
        j = int(np.argmax(score))
        chosen.append(j)
        avail[j] = False
        np.maximum(red, similarity[j], out=red)
    return chosen


class MMR(Scheduler):
    """rel(d) = cos(query, d), sim = cos(d, d'), lam = 0.5 (the deployed MMR-RAG default).

    Static: the same k passages, in MMR order, every round (Section 7.2).
    """

    name = "mmr"
    reads_feedback = False
    params = (Param("lam", float, MMR_LAMBDA, "relevance weight: lam * rel(d) - (1 - lam) * max similarity"),)

    def __init__(self, view: PoolView, k: int, T: int, rng: np.random.Generator, lam: float = MMR_LAMBDA,
                 name: str | None = None) -> None:
        super().__init__(view, k, T, rng, name)
        self.lam = float(lam)
        self._chosen: list[int] | None = None

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        if self._chosen is None:
            rel = self.view.embeddings @ self.view.query_embedding
            self._chosen = mmr_order(rel, self.view.similarity, self.k, self.lam)
        return selection(self.view, self._chosen)
