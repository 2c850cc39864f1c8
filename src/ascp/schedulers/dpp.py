"""`dpp`: greedy MAP over a quality-weighted determinantal kernel, varying across rounds."""

from __future__ import annotations

import numpy as np

from ascp.params import Param
from ascp.schedulers._common import selection
from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection

DPP_DECAY = 0.9
DPP_RIDGE = 1e-3


def dpp_greedy_map(quality: np.ndarray, similarity: np.ndarray, m: int, ridge: float = DPP_RIDGE) -> list[int]:
    """Greedy MAP of L = diag(q) (S + ridge I) diag(q) (Chen, Zhang & Zhou, 2018: incremental Cholesky).

    S: the (N, N) passage cosines. Each step adds the passage with the largest gain in log det L_S
    (O(N k) per step). Once no gain is left (rank exhausted) the rest follow by quality.
    Ties go to the better rank.
    """
    n = quality.shape[0]
    m = min(m, n)
    if m == 0:
        return []
    q = np.asarray(quality, dtype=np.float64)
    d2 = q * q * (1.0 + ridge)
    cis = np.zeros((m, n))
    chosen: list[int] = []
    j = int(np.argmax(d2))
    while True:
        chosen.append(j)
        if len(chosen) == m:
            return chosen
        i = len(chosen) - 1
        row = q[j] * q * similarity[j]
        row[j] += ridge * q[j] * q[j]
        e = (row - cis[:i, j] @ cis[:i]) / np.sqrt(d2[j])
        cis[i] = e
        d2 = d2 - e * e
        d2[chosen] = -np.inf
        j = int(np.argmax(d2))
        if d2[j] <= 1e-12:
            break
    rest = [int(x) for x in np.argsort(-q, kind="stable") if int(x) not in set(chosen)]
    return chosen + rest[: m - len(chosen)]


class DPP(Scheduler):
    """Quality q_t(d) = r(d) * decay^{o_t(d)}, o_t(d) = earlier rounds that offered d; S = cosine Gram.

    Open loop: o_t counts this policy's own earlier contexts (recomputed, not read from history),
    so every round is a pure function of t. decay = 0.9 (docs/schedulers.md); ridge 1e-3 keeps the
    kernel positive definite when dim < N. Prompt order = greedy order.
    """

    name = "dpp"
    reads_feedback = False
    params = (
        Param("decay", float, DPP_DECAY, "quality decay per earlier offer: r(d) * decay^offers(d)"),
        Param("ridge", float, DPP_RIDGE, "ridge added to the kernel's diagonal (keeps it positive definite)"),
    )

    def __init__(
        self,
        view: PoolView,
        k: int,
        T: int,
        rng: np.random.Generator,
        decay: float = DPP_DECAY,
        ridge: float = DPP_RIDGE,
        name: str | None = None,
    ) -> None:
        super().__init__(view, k, T, rng, name)
        self.decay = float(decay)
        self.ridge = float(ridge)
        self._rounds: list[list[int]] = []
        self._offers = np.zeros(view.n)

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        while len(self._rounds) < round:
            quality = self.view.relevance * self.decay**self._offers
            chosen = dpp_greedy_map(quality, self.view.similarity, self.k, self.ridge)
            self._rounds.append(chosen)
            self._offers[chosen] += 1
        return selection(self.view, self._rounds[round - 1])
