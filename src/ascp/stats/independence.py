"""App. A.2: is consumption the idealised independent one of Sec. 5.1?

Under the toy model every shown passage is used independently with one probability q, whatever
the policy, the context or the round. Each row is one round of one portfolio: `shown` = |C_t|
passages, `used` = |U_t| of them used. The test is the likelihood-ratio form of the paper's
mixed-effects check: a binomial GLM with one q for all rows (H0) against one q per level of `by`
(a policy, or a condition; H1); chi2 = 2 (llf_1 - llf_0) on (levels - 1) degrees of freedom.
`overdispersion` is H1's Pearson chi2 / residual df: about 1 when used counts are binomial
given the level, above 1 when uses cluster within rounds (the paper reports 1.39).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ._common import Table, column, float_column


@dataclass(frozen=True)
class IndependenceTest:
    chi2: float
    df: int
    p: float
    overdispersion: float
    rows: int
    levels: int
    q: float  # the pooled use probability under H0

    def to_dict(self) -> dict[str, float]:
        return {"chi2": self.chi2, "df": self.df, "p": self.p, "overdispersion": self.overdispersion,
                "rows": self.rows, "levels": self.levels, "q": self.q}


def consumption_independence(data: Table, by: str = "policy", shown: str = "shown",
                             used: str = "used") -> IndependenceTest:
    """The LRT of one use probability for every level of `by` against one per level, with the
    overdispersion of the per-level model (see the module docstring). Needs >= 2 levels, rounds
    with at least one shown passage, and 0 <= used <= shown (`ValueError` otherwise)."""
    import statsmodels.api as sm
    from scipy import stats

    n = float_column(data, shown)
    y = float_column(data, used)
    if n.size == 0 or np.any(n < 1) or np.any(y < 0) or np.any(y > n):
        raise ValueError("every row needs shown >= 1 and 0 <= used <= shown")
    labels = column(data, by)
    levels, codes = np.unique(labels, return_inverse=True)
    if levels.size < 2:
        raise ValueError(f"the test compares levels of {by!r}; got {levels.size}")
    df = int(levels.size - 1)
    q = float(y.sum() / n.sum())
    if q in (0.0, 1.0):  # nothing or everything used: no variation to test
        return IndependenceTest(chi2=0.0, df=df, p=1.0, overdispersion=float("nan"), rows=int(n.size),
                                levels=int(levels.size), q=q)
    endog = np.column_stack([y, n - y])
    family = sm.families.Binomial()
    design = np.zeros((n.size, levels.size))
    design[np.arange(n.size), codes] = 1.0
    with warnings.catch_warnings():  # a level that uses all or none of its passages separates perfectly
        warnings.simplefilter("ignore")
        null = sm.GLM(endog, np.ones((n.size, 1)), family=family).fit()
        full = sm.GLM(endog, design, family=family).fit()
    chi2 = max(0.0, 2.0 * float(full.llf - null.llf))
    dispersion = float(full.pearson_chi2 / full.df_resid) if full.df_resid > 0 else float("nan")
    return IndependenceTest(chi2=chi2, df=df, p=float(stats.chi2.sf(chi2, df)), overdispersion=dispersion,
                            rows=int(n.size), levels=int(levels.size), q=q)


def consumption_rows(records, by: str = "condition") -> dict[str, np.ndarray]:
    """The test's rows from run records (experiment-store units or `Portfolio.to_json()`-like
    dicts with `rounds`): one per round with a non-empty context, the level taken from `by`."""
    levels, shown, used = [], [], []
    for record in records:
        for rnd in record.get("rounds", []):
            if rnd.get("context"):
                levels.append(str(record[by]))
                shown.append(len(rnd["context"]))
                used.append(len(rnd["used"]))
    return {by: np.array(levels), "shown": np.array(shown, dtype=float), "used": np.array(used, dtype=float)}
