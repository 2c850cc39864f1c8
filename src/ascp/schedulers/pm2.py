"""`pm2`: proportionality-based diversification PM-2 (Dang & Croft, 2012) over the induced facets."""

from __future__ import annotations

import numpy as np

from ascp.params import Param
from ascp.schedulers._common import StaticFacetOrder

PM2_LAMBDA = 0.5


def pm2_order(relevance: np.ndarray, W: np.ndarray, pi: np.ndarray, m: int, lam: float = PM2_LAMBDA) -> list[int]:
    """PM-2 with votes v_z = pi(z), aspect relevance P(d|z) = W[d, z] r(d) and seats s_z.

    Each position: quotient qt[z] = v_z / (2 s_z + 1) (Sainte-Lague); z* = argmax qt;
    d* = argmax_d lam qt[z*] P(d|z*) + (1 - lam) sum_{z != z*} qt[z] P(d|z); then each facet
    takes its share of the seat, s_z += P(d*|z) / sum_z' P(d*|z'). Ties go to the better rank.
    """
    n, z = W.shape
    m = min(m, n)
    p = W * relevance[:, None]
    seats = np.zeros(z)
    avail = np.ones(n, dtype=bool)
    chosen: list[int] = []
    for _ in range(m):
        if z:
            qt = pi / (2.0 * seats + 1.0)
            top = int(np.argmax(qt))
            weights = (1.0 - lam) * qt
            weights[top] = lam * qt[top]
            score = p @ weights
        else:
            score = relevance.copy()
        j = int(np.argmax(np.where(avail, score, -np.inf)))
        chosen.append(j)
        avail[j] = False
        total = p[j].sum()
        if total > 0:
            seats += p[j] / total
    return chosen


class PM2(StaticFacetOrder):
    """PM-2 over the same facets as ascp, lam = 0.5; static across rounds."""

    name = "pm2"
    order = staticmethod(pm2_order)
    default_lam = PM2_LAMBDA
    params = (Param("lam", float, PM2_LAMBDA, "weight of the quotient's facet against the others"),)
