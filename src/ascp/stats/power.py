"""Power of a paired contrast: the smallest effect a design detects, from its standard error.

For a paired mean difference estimated with standard error SE (SD of the paired differences over
sqrt(n), or a bootstrap's SE), a two-sided test at level alpha detects a true difference
delta with probability `power` when

    |delta| >= (z_{1 - alpha/2} + z_{power}) * SE        (normal approximation)

which at alpha = 0.05 and 80% power is 2.80 * SE. At another size n' the SE scales as
sqrt(n / n'), so the same design with n' queries detects (z_{1 - alpha/2} + z_{power}) * SE * sqrt(n / n').
"""

from __future__ import annotations

import math


def detectable_effect(se: float, alpha: float = 0.05, power: float = 0.8, n: int | None = None,
                      n_target: int | None = None) -> float:
    """The minimum detectable effect (MDE) of a paired contrast with standard error `se`; with `n` and
    `n_target`, the MDE of the same design grown (or cut) from n to n_target units. NaN for a
    non-finite or negative `se`."""
    from scipy import stats

    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha} and {power}")
    if not math.isfinite(se) or se < 0:
        return math.nan
    scale = 1.0
    if n is not None or n_target is not None:
        if n is None or n_target is None or n < 1 or n_target < 1:
            raise ValueError(f"n and n_target must both be positive, got {n} and {n_target}")
        scale = math.sqrt(n / n_target)
    return float((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * se * scale)
