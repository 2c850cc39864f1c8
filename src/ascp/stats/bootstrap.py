"""Every bootstrap of the project: paired and crossed bootstraps of mean differences (Tables 4, 5,
7-11; Sec. 7.4), the cluster (case) bootstrap of Fig. 3, 4 and the head-to-heads, and its draws for
statistics of one's own (`cluster_replicates`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._common import Estimate, Table, check_level, column, finite_vector, task_weight_vector

# Bootstrap draws are made in chunks of at most this many indices, so memory stays bounded.
_CHUNK_INDICES = 2_000_000


def bootstrap_p(replicates: ArrayLike, null: float = 0.0) -> float:
    """Two-sided percentile-bootstrap p-value of `null` (default 0) with the +1 correction.

        p = min(1, 2 * min((1 + #{b: d*_b <= null}) / (B + 1), (1 + #{b: d*_b >= null}) / (B + 1)))

    over the B replicates d*_b of the statistic. It is the smallest alpha at which the percentile
    (1 - alpha) interval excludes `null` (up to the +1 terms), so "p < 0.05" and "the 95% percentile
    interval excludes 0" agree up to that correction. The smallest attainable value (the "bootstrap
    floor") is 2 / (B + 1). A replicate within 1e-12 * (1 + max|d*|) of `null` counts on both sides,
    so a statistic that is exactly zero in every replicate (e.g. identical arms) gives p = 1 rather
    than depending on floating-point rounding.
    """
    boot = finite_vector(replicates, "replicates")
    tol = 1e-12 * (1.0 + float(np.max(np.abs(boot))))
    b = boot.size
    below = (1 + np.count_nonzero(boot <= null + tol)) / (b + 1)
    above = (1 + np.count_nonzero(boot >= null - tol)) / (b + 1)
    return float(min(1.0, 2.0 * min(below, above)))


T = TypeVar("T")


def cluster_replicates(statistic: Callable[[NDArray[np.int64]], T], n_clusters: int, n_boot: int, *,
                       rng: np.random.Generator) -> list[T]:
    """THE cluster bootstrap's draws: `n_boot` replicates of `statistic`, each given the indices of
    `n_clusters` clusters drawn uniformly with replacement (a drawn cluster enters whole, with all its
    rows; one `rng.integers` call per replicate). No replicate without clusters."""
    return [statistic(rng.integers(0, n_clusters, size=n_clusters)) for _ in range(n_boot if n_clusters else 0)]


def cluster_bootstrap(values: ArrayLike, clusters: Sequence[Any], null: float = 0.0, n_boot: int = 2000, *,
                      rng: np.random.Generator, ci: float = 0.95) -> Estimate:
    """Mean of `values` with a percentile cluster-bootstrap interval and the p-value of `null`.

    Each replicate draws as many clusters as there are, with replacement, and takes the mean over all
    values of the drawn clusters (clusters enter whole, so values of one cluster, e.g. the contexts of
    one query, are never split). Interval: the (1-ci)/2 and (1+ci)/2 quantiles of the replicates; p:
    `bootstrap_p(replicates, null)`; `n`: the number of clusters. Values must be finite (drop the
    others first), at least one."""
    v = finite_vector(values, "values")
    cl = np.asarray(clusters)
    if cl.shape != v.shape:
        raise ValueError(f"values and clusters must have the same length, got {v.size} and {cl.size}")
    n_boot = _check_n_boot(n_boot)
    ci = check_level(ci, "ci")
    names, inverse = np.unique(cl, return_inverse=True)
    sums = np.bincount(inverse, weights=v)
    counts = np.bincount(inverse).astype(float)
    draw = rng.integers(0, len(names), size=(n_boot, len(names)))
    boot = sums[draw].sum(1) / counts[draw].sum(1)
    tail = round((1.0 - ci) / 2.0, 12)  # 0.025 exactly at ci = 0.95
    lo, hi = np.quantile(boot, [tail, 1.0 - tail])
    se = float(np.std(boot, ddof=1)) if boot.size > 1 else math.nan
    return Estimate(mean=float(v.mean()), lo=float(lo), hi=float(hi), p=bootstrap_p(boot, null), n=len(names), se=se,
                    level=ci, method="cluster bootstrap over clusters, percentile")


def percentile_interval(replicates: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates, non-finite ones left out ((nan, nan) when none
    is finite)."""
    v = np.array([x for x in replicates if math.isfinite(x)])
    if not v.size:
        return math.nan, math.nan
    tail = round((1.0 - check_level(level)) / 2.0, 12)
    lo, hi = np.quantile(v, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _check_n_boot(n_boot: int) -> int:
    if int(n_boot) != n_boot or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot}")
    return int(n_boot)


def _summarise(point: float, boot: NDArray[np.float64], n: int, ci: float, method: str) -> Estimate:
    alpha = 1.0 - ci
    lo, hi = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    se = float(np.std(boot, ddof=1)) if boot.size > 1 else float("nan")
    return Estimate(
        mean=float(point), lo=float(lo), hi=float(hi), p=bootstrap_p(boot), n=n, se=se, level=ci, method=method
    )


def _counts(rng: np.random.Generator, n_rows: int, n_items: int) -> NDArray[np.float64]:
    """(n_rows x n_items) multiplicities of n_items draws with replacement from n_items, per row."""
    idx = rng.integers(0, n_items, size=(n_rows, n_items))
    idx += np.arange(n_rows)[:, None] * n_items
    return np.bincount(idx.ravel(), minlength=n_rows * n_items).reshape(n_rows, n_items).astype(float)


def paired_bootstrap(
    a: ArrayLike, b: ArrayLike, n_boot: int = 10_000, *, rng: np.random.Generator, ci: float = 0.95
) -> Estimate:
    """Mean paired difference mean(a - b) with a percentile bootstrap interval and p-value.

    Definition. With pairs (a_i, b_i), i = 1..n (one per query, paired within task/model/seed/query),
    d_i = a_i - b_i and the estimate is dbar = mean(d). Each of `n_boot` replicates draws n pair
    indices uniformly with replacement (pairs are resampled whole, so the pairing is kept) and
    records d*_b = mean(d[idx]). Interval: the (1-ci)/2 and (1+ci)/2 quantiles of d* (numpy's
    default linear interpolation). p: `bootstrap_p(d*)`, i.e.
    2 * min((1 + #{d* <= 0}) / (B + 1), (1 + #{d* >= 0}) / (B + 1)), capped at 1.
    `se` is the standard deviation of d*. `n` is the number of pairs.

    Assumptions: the pairs are exchangeable, independent units (queries); a and b are aligned
    element by element. Non-finite values raise `ValueError` (drop incomplete pairs first); at least
    2 pairs are required. Draws use only `rng` (chunked, so memory stays bounded; the result is a
    deterministic function of the data, `n_boot` and the generator state).
    """
    av = finite_vector(a, "a", min_size=2)
    bv = finite_vector(b, "b", min_size=2)
    if av.shape != bv.shape:
        raise ValueError(f"a and b must have the same length, got {av.size} and {bv.size}")
    n_boot = _check_n_boot(n_boot)
    ci = check_level(ci, "ci")
    d = av - bv
    n = d.size
    boot = np.empty(n_boot)
    chunk = max(1, _CHUNK_INDICES // n)
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        boot[start : start + m] = d[rng.integers(0, n, size=(m, n))].mean(axis=1)
    return _summarise(float(d.mean()), boot, n, ci, "paired bootstrap over pairs, percentile")


def crossed_bootstrap(
    data: Table,
    n_boot: int = 10_000,
    *,
    rng: np.random.Generator,
    ci: float = 0.95,
    task_weights: str | Mapping[Any, float] = "equal",
    value: str = "diff",
    task: str = "task",
    seed: str = "seed",
    query: str = "query",
) -> Estimate:
    """Task-weighted mean paired difference with a crossed seeds x queries bootstrap (Tables 10, 11).

    Data: one row per (task, seed, query) holding the paired difference `value` (e.g. Ascp PR@T
    minus baseline PR@T, paired within task, model, seed and query). Several rows with the same
    (task, seed, query), e.g. one per model of a fixed model set, are first averaged into one cell
    value D[t, s, q]. Queries are identified within their task; seeds are global labels (decoding
    seed s is the same factor level in every task). The design must be complete: every task has
    every seed for every one of its queries (`ValueError` otherwise).

    Estimand: theta = sum_t w_t * mean_{s, q in Q_t} D[t, s, q], with w_t = 1/T for
    task_weights="equal" (the paper's equal-task-weight mean of per-task mean differences),
    w_t proportional to |Q_t| for "size", or a mapping task -> weight (normalised to sum 1).

    Scheme (crossed / two-way bootstrap; seeds and queries are both random factors, tasks and
    models fixed). Each replicate b
      1. draws S seeds with replacement from the S seed labels, one draw shared by all tasks
         (multiplicities c_s);
      2. independently, for each task t, draws |Q_t| queries with replacement from Q_t
         (multiplicities m_q);
      3. computes theta*_b = sum_t w_t * sum_{s, q} c_s m_q D[t, s, q] / (S |Q_t|), i.e. the mean over
         all (drawn seed, drawn query) combinations, so each drawn query enters with every drawn seed.
    Interval: percentile of theta*; p: `bootstrap_p(theta*)` (two-sided, +1 correction); `se`: the
    standard deviation of theta*; `n`: the number of (task, seed, query) cells.
    With only S = 2 seeds the seed draw takes just 3 distinct values, so the seed component of the
    interval is coarse; that is inherent to the design, not to the resampler.
    Random draws: per chunk of replicates, the seed multiplicities first, then each task's query
    multiplicities in sorted task order; only `rng` is used.
    """
    n_boot = _check_n_boot(n_boot)
    ci = check_level(ci, "ci")
    values = finite_vector(column(data, value), f"column {value!r}")
    task_labels, task_idx = np.unique(column(data, task), return_inverse=True)
    seed_labels, seed_idx = np.unique(column(data, seed), return_inverse=True)
    task_idx, seed_idx = task_idx.reshape(-1), seed_idx.reshape(-1)
    if not (values.size == task_idx.size == seed_idx.size):
        raise ValueError("columns have different lengths")
    if values.size == 0:
        raise ValueError("no rows")
    query_col = column(data, query)
    if query_col.size != values.size:
        raise ValueError("columns have different lengths")
    n_seeds = seed_labels.size
    matrices: list[NDArray[np.float64]] = []
    for t in range(task_labels.size):
        rows = np.flatnonzero(task_idx == t)
        q_labels, q_idx = np.unique(query_col[rows], return_inverse=True)
        q_idx = q_idx.reshape(-1)
        flat = seed_idx[rows] * q_labels.size + q_idx
        size = n_seeds * q_labels.size
        counts = np.bincount(flat, minlength=size)
        if np.any(counts == 0):
            raise ValueError(
                f"incomplete design: task {task_labels[t]!r} lacks {int(np.sum(counts == 0))} of its "
                f"{size} (seed, query) cells; every query needs every seed"
            )
        sums = np.bincount(flat, weights=values[rows], minlength=size)
        matrices.append((sums / counts).reshape(n_seeds, q_labels.size))
    sizes = np.array([m.shape[1] for m in matrices], dtype=np.intp)
    w = task_weight_vector(task_labels, sizes, task_weights)
    point = float(sum(w_t * m.mean() for w_t, m in zip(w, matrices, strict=True)))

    boot = np.empty(n_boot)
    chunk = max(1, _CHUNK_INDICES // int(max(sizes.max(), n_seeds)))
    for start in range(0, n_boot, chunk):
        nb = min(chunk, n_boot - start)
        seed_counts = _counts(rng, nb, n_seeds) / n_seeds  # (nb, S)
        total = np.zeros(nb)
        for w_t, mat in zip(w, matrices, strict=True):
            query_counts = _counts(rng, nb, mat.shape[1]) / mat.shape[1]  # (nb, Q_t)
            total += w_t * np.einsum("bq,bq->b", seed_counts @ mat, query_counts)
        boot[start : start + nb] = total
    n_cells = int(n_seeds * sizes.sum())
    return _summarise(point, boot, n_cells, ci, "crossed bootstrap (seeds x queries within task), percentile")

