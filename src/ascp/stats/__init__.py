"""Statistics for the paper's tables: bootstraps, BH-FDR, random-effects pooling, elasticities, correlations.

Every function takes its inputs explicitly (random draws only from a passed `numpy.random.Generator`;
nothing seeds global state) and returns a frozen, tidy result (`Estimate`, or `MetaAnalysis` for
the Paule-Mandel fit). Tabular inputs are anything whose `data[name]` is a column (a pandas
DataFrame, a dict of arrays). Non-finite inputs raise `ValueError`: drop incomplete rows first.
Definitions and the paper table each function serves: docs/statistics.md.
"""

from ._common import Estimate
from .bootstrap import (
    bootstrap_p,
    cluster_bootstrap,
    cluster_replicates,
    crossed_bootstrap,
    paired_bootstrap,
    percentile_interval,
)
from .independence import IndependenceTest, consumption_independence, consumption_rows
from .meta import MetaAnalysis, paule_mandel, pooled_mean, prediction_interval
from .multiplicity import bh_by_family, bh_fdr
from .power import detectable_effect
from .regression import partial_correlation, width_elasticity, within_query_correlation
from .seeds import seed_means, seed_t_interval

__all__ = [
    "Estimate",
    "IndependenceTest",
    "MetaAnalysis",
    "bh_by_family",
    "bh_fdr",
    "bootstrap_p",
    "cluster_bootstrap",
    "cluster_replicates",
    "consumption_independence",
    "consumption_rows",
    "crossed_bootstrap",
    "detectable_effect",
    "paired_bootstrap",
    "partial_correlation",
    "percentile_interval",
    "paule_mandel",
    "pooled_mean",
    "prediction_interval",
    "seed_means",
    "seed_t_interval",
    "width_elasticity",
    "within_query_correlation",
]
