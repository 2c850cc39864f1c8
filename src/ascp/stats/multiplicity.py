"""Benjamini-Hochberg false-discovery-rate q-values (Tables 2, 10-12; Appendix B.2)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._common import Table, column, finite_vector


def bh_fdr(pvalues: ArrayLike) -> NDArray[np.float64]:
    """Benjamini-Hochberg q-values (step-up adjusted p-values), in the input order.

    With m p-values sorted ascending, p_(1) <= ... <= p_(m),

        q_(i) = min(1, min_{j >= i} m * p_(j) / j),

    i.e. the raw BH ratios m p_(j) / j made monotone from the largest p downwards and capped at 1.
    Rejecting every hypothesis with q <= alpha is the BH procedure at FDR level alpha (valid under
    independence or positive regression dependence). Ties get equal q. Identical to statsmodels'
    `multipletests(p, method="fdr_bh")[1]`. Empty input gives an empty array; p-values must be
    finite and in [0, 1] (`ValueError` otherwise).
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"pvalues must be one-dimensional, got shape {p.shape}")
    if p.size == 0:
        return np.empty(0)
    p = finite_vector(p, "pvalues")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    ratios = p[order] * m / np.arange(1, m + 1)
    q_sorted = np.minimum(np.minimum.accumulate(ratios[::-1])[::-1], 1.0)
    q = np.empty(m)
    q[order] = q_sorted
    return q


def bh_by_family(data: Table, family_col: str, p_col: str = "p", q_col: str = "q") -> Any:
    """BH q-values computed separately within each declared testing family.

    `data` has one row per test with its family label in `family_col` and its raw two-sided p-value
    in `p_col`. Within each family F (all rows with the same label), q = `bh_fdr` of that family's
    p-values (m = |F|), so the correction never borrows from other families (the paper pre-declares
    eight families, Appendix B.2). Returns a copy of `data` with the raw p kept and the q-values in
    `q_col`: a pandas DataFrame gets `.assign(q_col=...)`, anything else is returned as a dict of
    numpy columns (every column of a mapping input is kept).
    """
    p = column(data, p_col)
    families = column(data, family_col)
    if p.size != families.size:
        raise ValueError("family and p columns have different lengths")
    q = np.empty(p.size)
    _, codes = np.unique(families, return_inverse=True)
    codes = codes.reshape(-1)
    for code in np.unique(codes):
        rows = np.flatnonzero(codes == code)
        q[rows] = bh_fdr(p[rows].astype(float))
    if hasattr(data, "assign"):
        return data.assign(**{q_col: q})
    names = data.dtype.names if hasattr(data, "dtype") and data.dtype.names else list(data.keys())
    out = {name: np.asarray(data[name]) for name in names}
    out[q_col] = q
    return out
