"""The statistics of Fig. 7: Spearman rho with n (nan where undefined), top-1 agreement with an
exact McNemar test, and the three panels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, float | int]:
    """Spearman rho and its p-value over the pairs where both are finite, with n; rho and p are nan
    with fewer than 3 pairs or a constant side."""
    from scipy.stats import spearmanr

    pairs = np.array([(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)], dtype=float)
    n = len(pairs)
    if n < 3 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
        return {"rho": math.nan, "p": math.nan, "n": n}
    result = spearmanr(pairs[:, 0], pairs[:, 1])
    return {"rho": float(result.statistic), "p": float(result.pvalue), "n": n}


def top1_agreement(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per portfolio with at least 2 offered passages and a unique judge top: does the probe's
    (the proxy's) unique top passage equal the judge's? A tied reading disagrees. With an exact
    McNemar test (binomial over the portfolios where exactly one of the two agrees)."""
    from scipy.stats import binomtest

    eligible = [r for r in rows if r["offered"] >= 2 and r["top_judge"] is not None]
    probe = [r["top_probe"] == r["top_judge"] for r in eligible]
    proxy = [r["top_proxy"] == r["top_judge"] for r in eligible]
    n = len(eligible)
    only_probe = sum(a and not b for a, b in zip(probe, proxy, strict=True))
    only_proxy = sum(b and not a for a, b in zip(probe, proxy, strict=True))
    discordant = only_probe + only_proxy
    return {"n": n,
            "probe": {"agree": sum(probe), "share": sum(probe) / n if n else math.nan},
            "proxy": {"agree": sum(proxy), "share": sum(proxy) / n if n else math.nan},
            "mcnemar": {"probe_only": only_probe, "proxy_only": only_proxy,
                        "p": float(binomtest(only_probe, discordant, 0.5).pvalue) if discordant else math.nan}}


def judge_statistics(documents: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The three panels of Fig. 7 (every rho with its n)."""
    judged = [d["p_yes"] for d in documents]

    def per_portfolio(a: str, b: str) -> dict[str, float | int]:
        return spearman([r[a] for r in rows], [r[b] for r in rows])

    return {
        "panel_a": {"probe_vs_judge": spearman([d["probe"] for d in documents], judged),
                    "proxy_vs_judge": spearman([d["proxy"] for d in documents], judged),
                    "top1": top1_agreement(rows)},
        "panel_b": {"ecr_vs_judge_coverage": per_portfolio("ecr", "judge_coverage"),
                    "ecr_vs_judge_mean_p_yes": per_portfolio("ecr", "judge_mean_p_yes"),
                    "ecr_thresholded_vs_judge_coverage": per_portfolio("ecr_thresholded", "judge_coverage"),
                    "ecr_thresholded_vs_judge_mean_p_yes": per_portfolio("ecr_thresholded", "judge_mean_p_yes")},
        "panel_c": {"novelty_vs_distinct_2": per_portfolio("novelty", "distinct_2"),
                    "novelty_vs_ecr": per_portfolio("novelty", "ecr"),
                    "novelty_vs_ecr_thresholded": per_portfolio("novelty", "ecr_thresholded")},
    }
