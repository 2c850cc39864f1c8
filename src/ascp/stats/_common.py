"""The shared result type and small input helpers of `ascp.stats`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Anything whose `data[name]` is a 1-D column: a pandas DataFrame, a dict of arrays or lists, a
#: numpy structured array.
Table = Any


@dataclass(frozen=True)
class Estimate:
    """One estimate with its interval and two-sided p-value.

    Attributes:
        mean: the point estimate (a mean difference, a slope, a correlation, ...).
        lo, hi: the interval at `level` (percentile bootstrap, t, normal: see `method`).
        p: two-sided p-value for the null "the estimand is 0" (`nan` where not defined).
        n: the number of units the estimate was computed from (pairs, cells, rows, seeds; each
            function's docstring says which).
        se: standard error where one is defined (the bootstrap standard deviation for bootstraps),
            else `nan`.
        level: the interval's nominal coverage.
        method: a short label of how `lo`, `hi` and `p` were computed.
    """

    mean: float
    lo: float
    hi: float
    p: float
    n: int
    se: float = math.nan
    level: float = 0.95
    method: str = ""

    def to_dict(self) -> dict[str, float | int | str]:
        """The fields as a flat dict (for tidy result tables)."""
        return asdict(self)


def check_level(level: float, name: str = "level") -> float:
    """`level` as a float in (0, 1), else `ValueError`."""
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {level}")
    return level


def finite_vector(values: ArrayLike, name: str, min_size: int = 1) -> NDArray[np.float64]:
    """`values` as a 1-D float array of finite numbers with at least `min_size` entries."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size < min_size:
        raise ValueError(f"{name} needs at least {min_size} values, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (nan/inf); drop those rows first")
    return arr


def column(data: Table, name: str) -> NDArray[Any]:
    """Column `name` of `data` as a 1-D numpy array."""
    try:
        col = data[name]
    except (KeyError, ValueError, IndexError) as exc:
        raise KeyError(f"no column {name!r} in the data") from exc
    arr = np.asarray(col)
    if arr.ndim != 1:
        raise ValueError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    return arr


def float_column(data: Table, name: str) -> NDArray[np.float64]:
    """Column `name` as finite floats (`ValueError` on nan/inf)."""
    return finite_vector(column(data, name), f"column {name!r}")


def as_names(cols: str | Sequence[str]) -> list[str]:
    """A column name or a sequence of names as a list."""
    return [cols] if isinstance(cols, str) else list(cols)


def group_codes(data: Table, cols: str | Sequence[str]) -> tuple[NDArray[np.intp], int]:
    """Integer codes 0..G-1 of the distinct combinations of `cols` per row, and G.

    Codes follow the sorted order of the combinations (each column sorted by its own values).
    """
    names = as_names(cols)
    if not names:
        raise ValueError("at least one grouping column is needed")
    parts = []
    for name in names:
        _, inverse = np.unique(column(data, name), return_inverse=True)
        parts.append(inverse.reshape(-1))
    sizes = {p.size for p in parts}
    if len(sizes) != 1:
        raise ValueError(f"grouping columns {names} have different lengths")
    _, codes = np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)
    codes = codes.reshape(-1).astype(np.intp)
    return codes, int(codes.max()) + 1 if codes.size else 0


def demean_within(values: NDArray[np.float64], codes: NDArray[np.intp], n_groups: int) -> NDArray[np.float64]:
    """`values` minus the mean of its group (codes from `group_codes`)."""
    sums = np.bincount(codes, weights=values, minlength=n_groups)
    counts = np.bincount(codes, minlength=n_groups)
    return values - (sums / counts)[codes]



def task_weight_vector(
    labels: NDArray[Any], sizes: NDArray[np.intp], task_weights: str | Mapping[Any, float]
) -> NDArray[np.float64]:
    """Normalised weights, one per task label (sorted labels, `sizes` = units per task).

    "equal": 1/T each; "size": proportional to `sizes`; a mapping label -> weight (>= 0, not all 0,
    every task present): normalised to sum 1.
    """
    if isinstance(task_weights, str):
        if task_weights == "equal":
            w = np.ones(labels.size)
        elif task_weights == "size":
            w = sizes.astype(float)
        else:
            raise ValueError(f"task_weights must be 'equal', 'size' or a mapping, got {task_weights!r}")
    else:
        missing = [lab for lab in labels.tolist() if lab not in task_weights]
        if missing:
            raise ValueError(f"task_weights lacks tasks {missing}")
        w = np.array([float(task_weights[lab]) for lab in labels.tolist()])
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("task weights must be finite, non-negative and not all zero")
    return w / w.sum()
