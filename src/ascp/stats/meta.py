"""Random-effects pooling of per-condition contrasts: Paule-Mandel, BLUPs, prediction intervals (Table 6)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, stats

from ._common import Estimate, check_level, finite_vector


@dataclass(frozen=True)
class MetaAnalysis:
    """A Paule-Mandel random-effects fit of K condition effects y_i with known variances v_i.

    Attributes:
        effects, variances: the inputs y_i and v_i.
        tau2: between-condition variance tau^2 (Paule-Mandel); `tau` is its square root (Table 6's
            "between-condition SD").
        mean: pooled mean mu = sum w_i y_i / sum w_i with w_i = 1 / (v_i + tau^2) (Table 6's "grand
            mean").
        se: its standard error sqrt(1 / sum w_i).
        q_stat: Cochran's Q = sum (y_i - mu_FE)^2 / v_i at tau^2 = 0 (fixed-effect weights).
        blup: partially pooled (shrunken, empirical-Bayes / BLUP) condition effects
            mu + lambda_i (y_i - mu), lambda_i = tau^2 / (tau^2 + v_i) (Table 6's condition rows).
    """

    effects: tuple[float, ...]
    variances: tuple[float, ...]
    tau2: float
    mean: float
    se: float
    q_stat: float
    blup: tuple[float, ...]

    @property
    def k(self) -> int:
        """The number of conditions K."""
        return len(self.effects)

    @property
    def tau(self) -> float:
        """sqrt(tau^2)."""
        return math.sqrt(self.tau2)

    @property
    def shrinkage(self) -> tuple[float, ...]:
        """lambda_i = tau^2 / (tau^2 + v_i): the weight of condition i's own estimate in its BLUP."""
        return tuple(self.tau2 / (self.tau2 + v) for v in self.variances)

    def pooled(self, level: float = 0.95) -> Estimate:
        """The pooled mean with the normal (Wald) interval mu +- z SE and its two-sided z-test p."""
        return pooled_mean(self, level)

    def prediction_interval(self, level: float = 0.95, dist: Literal["t", "normal"] = "t") -> tuple[float, float]:
        """See `prediction_interval`."""
        return prediction_interval(self, level=level, dist=dist)

    def to_dict(self) -> dict[str, object]:
        """Scalars plus per-condition lists, for tidy tables."""
        return {
            "k": self.k,
            "tau2": self.tau2,
            "tau": self.tau,
            "mean": self.mean,
            "se": self.se,
            "q_stat": self.q_stat,
            "effects": list(self.effects),
            "variances": list(self.variances),
            "blup": list(self.blup),
        }


def paule_mandel(effects: ArrayLike, variances: ArrayLike) -> MetaAnalysis:
    """Paule-Mandel random-effects meta-analysis of K >= 2 condition effects.

    Model: y_i = mu + u_i + e_i, u_i ~ N(0, tau^2), e_i ~ N(0, v_i) with v_i known (e.g. the squared
    paired-bootstrap SE of each task-generator contrast). tau^2 solves the generalised Q equation

        Q(tau^2) = sum_i w_i (y_i - mu(tau^2))^2 = K - 1,  w_i = 1 / (v_i + tau^2),
        mu(tau^2) = sum_i w_i y_i / sum_i w_i,

    truncated at 0: tau^2 = 0 if Q(0) <= K - 1. Q is strictly decreasing in tau^2 and
    Q(s^2) < K - 1 at s^2 = sample variance of the y_i, so the root is bracketed in [0, s^2] and
    found by Brent's method to ~machine precision (statsmodels' `combine_effects(method_re="pm")`
    iterates the same equation to |Q - (K - 1)| < 1e-5). mean, SE and BLUPs: see `MetaAnalysis`.
    Variances must be > 0 and everything finite (`ValueError` otherwise).
    """
    y = finite_vector(effects, "effects", min_size=2)
    v = finite_vector(variances, "variances", min_size=2)
    if y.shape != v.shape:
        raise ValueError(f"effects and variances must have the same length, got {y.size} and {v.size}")
    if np.any(v <= 0):
        raise ValueError("variances must be > 0")
    k = y.size

    def excess(tau2: float) -> float:
        w = 1.0 / (v + tau2)
        mu = float(w @ y / w.sum())
        return float(w @ (y - mu) ** 2) - (k - 1)

    q0 = excess(0.0) + (k - 1)
    upper = float(np.var(y, ddof=1))
    if q0 <= k - 1 or upper <= 0:
        tau2 = 0.0
    else:
        tau2 = float(optimize.brentq(excess, 0.0, upper, xtol=1e-15 * upper, rtol=1e-14, maxiter=500))
    w = 1.0 / (v + tau2)
    mu = float(w @ y / w.sum())
    se = math.sqrt(1.0 / float(w.sum()))
    lam = tau2 / (tau2 + v)
    blup = mu + lam * (y - mu)
    return MetaAnalysis(
        effects=tuple(y.tolist()),
        variances=tuple(v.tolist()),
        tau2=tau2,
        mean=mu,
        se=se,
        q_stat=q0,
        blup=tuple(blup.tolist()),
    )


def prediction_interval(
    meta: MetaAnalysis, level: float = 0.95, dist: Literal["t", "normal"] = "t"
) -> tuple[float, float]:
    """Interval for the effect of a new condition drawn from the random-effects distribution.

    dist="t" (Higgins, Thompson and Spiegelhalter 2009; the interval Table 6 reports):
        mu +- t_{K-2, (1+level)/2} * sqrt(tau^2 + SE^2), which needs K >= 3 (K = 4 gives df = 2).
    dist="normal" (Table 6's "normal quantile, for comparison" row):
        mu +- z_{(1+level)/2} * sqrt(tau^2 + SE^2).
    The t form accounts for tau^2 being estimated from only K conditions; with small K it is much
    wider than the normal one.
    """
    level = check_level(level)
    half_width = math.sqrt(meta.tau2 + meta.se**2)
    if dist == "t":
        if meta.k < 3:
            raise ValueError(f"the t_(K-2) prediction interval needs K >= 3 conditions, got K = {meta.k}")
        crit = float(stats.t.ppf((1.0 + level) / 2.0, meta.k - 2))
    elif dist == "normal":
        crit = float(stats.norm.ppf((1.0 + level) / 2.0))
    else:
        raise ValueError(f"dist must be 't' or 'normal', got {dist!r}")
    return meta.mean - crit * half_width, meta.mean + crit * half_width


def pooled_mean(meta: MetaAnalysis, level: float = 0.95) -> Estimate:
    """The random-effects mean as an `Estimate`: mu +- z SE, p = 2 Phi(-|mu| / SE), n = K."""
    level = check_level(level)
    crit = float(stats.norm.ppf((1.0 + level) / 2.0))
    z = meta.mean / meta.se
    return Estimate(
        mean=meta.mean,
        lo=meta.mean - crit * meta.se,
        hi=meta.mean + crit * meta.se,
        p=float(2.0 * stats.norm.sf(abs(z))),
        n=meta.k,
        se=meta.se,
        level=level,
        method="random effects (Paule-Mandel), normal",
    )
