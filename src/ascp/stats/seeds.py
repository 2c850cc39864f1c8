"""Seed-level t intervals (Table 12: two-sided t over seed means)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from ._common import Estimate, Table, check_level, column, finite_vector, task_weight_vector


def seed_t_interval(seed_means: ArrayLike, level: float = 0.95) -> Estimate:
    """Mean of per-seed values with a t interval on n - 1 degrees of freedom and a two-sided t-test p.

    With seed means m_1..m_n (n >= 2; e.g. each the equal-task-weight mean paired difference of
    one decoding seed, see `seed_means`): mean = mbar, se = sd(m, ddof=1) / sqrt(n),
    interval mbar +- t_{n-1, (1+level)/2} * se, p = 2 * P(T_{n-1} >= |mbar / se|) (H0: mean 0).
    Table 12 uses five seeds, so df = 4. Seeds are the replicates: the interval reflects
    run-to-run (decoding-seed) variation only, with queries, tasks and models held fixed.
    If all seed means are equal (se = 0) the interval is the point and p is 1 if the mean is 0,
    else 0. `n` is the number of seeds.
    """
    level = check_level(level)
    m = finite_vector(seed_means, "seed_means", min_size=2)
    n = m.size
    mean = float(m.mean())
    se = float(m.std(ddof=1)) / math.sqrt(n)
    df = n - 1
    crit = float(stats.t.ppf((1.0 + level) / 2.0, df))
    p = float(2.0 * stats.t.sf(abs(mean / se), df)) if se > 0.0 else float(mean == 0.0)
    return Estimate(
        mean=mean,
        lo=mean - crit * se,
        hi=mean + crit * se,
        p=p,
        n=n,
        se=se,
        level=level,
        method=f"t over seed means, df={df}",
    )


def seed_means(
    data: Table,
    *,
    value: str = "diff",
    seed: str = "seed",
    task: str = "task",
    task_weights: str | Mapping[Any, float] = "equal",
) -> tuple[NDArray[Any], NDArray[np.float64]]:
    """Per-seed task-weighted means: (sorted seed labels, m_s), the input of `seed_t_interval`.

    m_s = sum_t w_t * mean{value : rows of task t and seed s}, with w_t = 1/T ("equal"), proportional
    to the task's number of rows under that seed ("size"), or a mapping task -> weight. Every task
    must have rows for every seed (`ValueError` otherwise); other columns (model, query) are
    averaged over within (task, seed), so a fixed model set enters with equal row weight.
    """
    values = finite_vector(column(data, value), f"column {value!r}")
    task_labels, t_idx = np.unique(column(data, task), return_inverse=True)
    seed_labels, s_idx = np.unique(column(data, seed), return_inverse=True)
    t_idx, s_idx = t_idx.reshape(-1), s_idx.reshape(-1)
    n_t, n_s = task_labels.size, seed_labels.size
    flat = t_idx * n_s + s_idx
    counts = np.bincount(flat, minlength=n_t * n_s).reshape(n_t, n_s)
    if np.any(counts == 0):
        raise ValueError("every task needs rows for every seed")
    cell = np.bincount(flat, weights=values, minlength=n_t * n_s).reshape(n_t, n_s) / counts
    means = np.empty(n_s)
    for s in range(n_s):
        w = task_weight_vector(task_labels, counts[:, s], task_weights)
        means[s] = float(w @ cell[:, s])
    return seed_labels, means
