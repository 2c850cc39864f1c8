"""Width elasticity (Sec. 4.4/5.3, Fig. 4, App. B.2) and within-group correlations (Table 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from ._common import Estimate, Table, as_names, check_level, demean_within, float_column, group_codes

Dof = Literal["within", "pooled"]


def width_elasticity(
    data: Table,
    *,
    k: str = "k",
    used_fraction: str = "used_fraction",
    cluster: str | Sequence[str] = "query",
    zero: Literal["drop", "raise"] | float = "drop",
    level: float = 0.95,
) -> Estimate:
    """Width elasticity: the OLS slope b of log(used fraction) on log(k), cluster-robust by query.

    Model, one row per (query, width k, ...) observation: log u = a + b log k + e, fitted by OLS
    (natural logs; the slope does not depend on the base). b is the elasticity d log u / d log k
    (the paper's -0.68 (0.02)). SE: statsmodels' cluster-robust sandwich
    (`cov_type="cluster"`, groups = the distinct values of `cluster`, default small-sample
    correction G/(G-1) * (N-1)/(N-2)); interval and p use t with G - 1 degrees of freedom
    (`use_t=True`), G = number of clusters. `cluster` may name several columns (e.g.
    ("task", "query")) when query ids repeat across tasks.

    Zero used fractions (log undefined), by `zero`:
      "drop" (default): rows with u == 0 are dropped before fitting; `n` counts only the rows used,
          so len(data) - n is the number dropped. The estimand is then the elasticity among
          observations with some usage; if zeros are frequent at large k this makes b less
          negative, so report the number dropped.
      "raise": `ValueError` if any u == 0.
      a float eps > 0: zeros are replaced by eps (a sensitivity check; the slope depends on eps).
    Negative or non-finite u, and k <= 0, raise `ValueError`. Needs >= 2 distinct widths and >= 2
    clusters among the rows used.
    """
    import statsmodels.api as sm  # imported here: statsmodels is slow to import

    level = check_level(level)
    kk = float_column(data, k)
    u = float_column(data, used_fraction)
    codes, _ = group_codes(data, cluster)
    if not (kk.size == u.size == codes.size):
        raise ValueError("columns have different lengths")
    if np.any(kk <= 0):
        raise ValueError("widths k must be > 0")
    if np.any(u < 0):
        raise ValueError("used fractions must be >= 0")
    zeros = u == 0
    if np.any(zeros):
        if zero == "drop":
            keep = ~zeros
            kk, u, codes = kk[keep], u[keep], codes[keep]
        elif zero == "raise":
            raise ValueError(f"{int(zeros.sum())} rows have used fraction 0 (pass zero='drop' or an epsilon)")
        elif isinstance(zero, (int, float)) and not isinstance(zero, bool) and zero > 0:
            u = np.where(zeros, float(zero), u)
        else:
            raise ValueError(f"zero must be 'drop', 'raise' or a positive float, got {zero!r}")
    if np.unique(kk).size < 2:
        raise ValueError("need at least two distinct widths")
    n_clusters = np.unique(codes).size
    if n_clusters < 2:
        raise ValueError("need at least two clusters")
    exog = sm.add_constant(np.log(kk), has_constant="add")
    fit = sm.OLS(np.log(u), exog).fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
    lo, hi = fit.conf_int(alpha=1.0 - level)[1]
    return Estimate(
        mean=float(fit.params[1]),
        lo=float(lo),
        hi=float(hi),
        p=float(fit.pvalues[1]),
        n=int(kk.size),
        se=float(fit.bse[1]),
        level=level,
        method=f"OLS log u on log k, cluster-robust ({n_clusters} clusters), t(df={n_clusters - 1})",
    )


def _correlation_estimate(
    ex: NDArray[np.float64], ey: NDArray[np.float64], absorbed: int, level: float, label: str
) -> Estimate:
    """r of two mean-zero vectors; t-test with n - 2 - absorbed df; Fisher-z interval with n - 3 - absorbed."""
    n = ex.size
    sxx, syy = float(ex @ ex), float(ey @ ey)
    if sxx == 0.0 or syy == 0.0:
        raise ValueError("a variable has no variation left after centering/residualising; r is undefined")
    r = float(np.clip((ex @ ey) / math.sqrt(sxx * syy), -1.0, 1.0))
    df = n - 2 - absorbed
    if df < 1:
        raise ValueError(f"too few observations: {n} rows leave {df} residual degrees of freedom")
    p = 0.0 if abs(r) == 1.0 else float(2.0 * stats.t.sf(abs(r) * math.sqrt(df / (1.0 - r * r)), df))
    n_fisher = n - 3 - absorbed
    if n_fisher >= 1 and abs(r) < 1.0:
        crit = float(stats.norm.ppf((1.0 + level) / 2.0))
        z = math.atanh(r)
        lo, hi = math.tanh(z - crit / math.sqrt(n_fisher)), math.tanh(z + crit / math.sqrt(n_fisher))
    else:
        lo = hi = math.nan if abs(r) < 1.0 else r
    return Estimate(mean=r, lo=lo, hi=hi, p=p, n=n, level=level, method=f"{label}, t(df={df}), Fisher-z interval")


def _prepare(data: Table, group_cols: str | Sequence[str], names: list[str], dof: Dof):
    if dof not in ("within", "pooled"):
        raise ValueError(f"dof must be 'within' or 'pooled', got {dof!r}")
    cols = [float_column(data, name) for name in names]
    codes, n_groups = group_codes(data, group_cols)
    if any(c.size != codes.size for c in cols):
        raise ValueError("columns have different lengths")
    centered = [demean_within(c, codes, n_groups) for c in cols]
    absorbed = n_groups - 1 if dof == "within" else 0
    return centered, n_groups, absorbed


def within_query_correlation(
    data: Table, group_cols: str | Sequence[str], x: str, y: str, *, dof: Dof = "within", level: float = 0.95
) -> Estimate:
    """Pearson r of x and y after centering both within groups (Table 1, upper panel).

    Groups are the distinct combinations of `group_cols` (Table 1: task, model, query).
    With x~ = x - mean_g(x) and y~ = y - mean_g(y), r = sum x~ y~ / sqrt(sum x~^2 * sum y~^2), i.e.
    the fixed-effects (within) correlation: adding any per-group constant to x or y leaves r
    unchanged. `n` = number of rows. p: two-sided t-test of r = 0, t = r sqrt(df / (1 - r^2)):
      dof="within" (default): df = n - G - 1, counting the G group means the centering estimated
          (the correct fixed-effects test);
      dof="pooled": df = n - 2, treating the centered rows as a plain sample (what
          `scipy.stats.pearsonr` on centered columns gives; Table 1's printed p-values match this).
    Interval: Fisher z, tanh(atanh r +- z_{(1+level)/2} / sqrt(df - 1)). Rows must be finite
    (drop nan rows first); groups of one row contribute nothing but count in n (and in G).
    """
    level = check_level(level)
    (cx, cy), n_groups, absorbed = _prepare(data, group_cols, [x, y], dof)
    return _correlation_estimate(cx, cy, absorbed, level, f"within-group Pearson ({n_groups} groups, dof={dof})")


def partial_correlation(
    data: Table,
    group_cols: str | Sequence[str],
    x: str,
    y: str,
    control: str | Sequence[str],
    *,
    dof: Dof = "within",
    level: float = 0.95,
) -> Estimate:
    """Partial correlation of x and y given `control`, within groups (Table 1, lower panel).

    x, y and every control are centered within groups (as in `within_query_correlation`); the
    centered x and y are each residualised on the centered controls by least squares (no intercept
    needed: everything has mean 0 within each group); r = the correlation of the two residual
    vectors. With one control this equals (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)) of
    the centered variables. p: two-sided t-test with df = n - G - 1 - c (dof="within") or
    n - 2 - c (dof="pooled"), c = number of controls; Fisher-z interval with df - 1.
    """
    level = check_level(level)
    controls = as_names(control)
    if not controls:
        raise ValueError("at least one control variable is needed")
    centered, n_groups, absorbed = _prepare(data, group_cols, [x, y, *controls], dof)
    cx, cy, z = centered[0], centered[1], np.column_stack(centered[2:])
    rx = cx - z @ np.linalg.lstsq(z, cx, rcond=None)[0]
    ry = cy - z @ np.linalg.lstsq(z, cy, rcond=None)[0]
    label = f"within-group partial Pearson ({n_groups} groups, {len(controls)} control(s), dof={dof})"
    return _correlation_estimate(rx, ry, absorbed + len(controls), level, label)
