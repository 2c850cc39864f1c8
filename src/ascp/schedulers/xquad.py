"""`xquad`: explicit query-aspect diversification (Santos et al., 2010) over the induced facets."""

from __future__ import annotations

import numpy as np

from ascp.params import Param
from ascp.schedulers._common import StaticFacetOrder

XQUAD_LAMBDA = 0.5


def xquad_order(relevance: np.ndarray, W: np.ndarray, pi: np.ndarray, m: int, lam: float = XQUAD_LAMBDA) -> list[int]:
    """Greedy: argmax_d (1 - lam) r(d) + lam * sum_z pi(z) W[d, z] prod_{s in S} (1 - W[s, z])."""
    n = relevance.shape[0]
    m = min(m, n)
    remaining = np.ones(W.shape[1])
    avail = np.ones(n, dtype=bool)
    chosen: list[int] = []
    for _ in range(m):
        score = (1.0 - lam) * relevance + lam * (W @ (pi * remaining))
        j = int(np.argmax(np.where(avail, score, -np.inf)))
        chosen.append(j)
        avail[j] = False
        remaining *= 1.0 - W[j]
    return chosen


class XQuAD(StaticFacetOrder):
    """P(z|q) = pi(z), P(d|q,z) = W[d, z], P(d|q) = r(d) (facets.py), lam = 0.5; static across rounds."""

    name = "xquad"
    order = staticmethod(xquad_order)
    default_lam = XQUAD_LAMBDA
    params = (Param("lam", float, XQUAD_LAMBDA, "relevance weight against facet coverage"),)
