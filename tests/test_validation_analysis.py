"""Fig. 3's p-values (`ascp.validation.analysis`) follow the one bootstrap rule of `ascp.stats.bootstrap`."""

from __future__ import annotations

import numpy as np
import pytest

from ascp.stats.bootstrap import bootstrap_p
from ascp.validation.analysis import clustered_mean


def test_bootstrap_p_is_the_plus_one_rule_on_a_hand_computed_case():
    # B = 4 replicates, null 0: 1 at or below, 3 at or above
    # p = 2 * min((1 + 1) / 5, (1 + 3) / 5) = 0.8
    assert bootstrap_p([-1.0, 1.0, 2.0, 3.0]) == pytest.approx(0.8)
    # no replicate at or below 0: p = 2 * (1 + 0) / (B + 1), the floor, never 0
    assert bootstrap_p([1.0, 2.0, 3.0]) == pytest.approx(2 * 1 / 4)


def test_cluster_bootstrap_p_is_the_floor_when_every_replicate_is_above_the_null():
    # every value exceeds the null, so every replicate mean does: p = 2 / (B + 1) (not 0)
    est = clustered_mean([0.9, 0.8, 0.7, 1.0], ["a", "b", "c", "d"], null=0.5, n_boot=9, seed=0)
    assert est["p"] == pytest.approx(2 / 10)


def test_cluster_bootstrap_p_equals_bootstrap_p_of_its_replicates():
    values, clusters = [0.2, -0.1, 0.4, 0.0, 0.3], ["a", "b", "c", "d", "e"]
    n_boot, seed = 50, 3
    rng = np.random.default_rng(seed)  # the draw of cluster_bootstrap: one value per cluster here
    draw = rng.integers(0, 5, size=(n_boot, 5))
    boot = np.asarray(values)[draw].mean(1)
    assert clustered_mean(values, clusters, 0.0, n_boot, seed)["p"] == pytest.approx(bootstrap_p(boot, 0.0))


def test_the_cluster_bootstrap_is_a_mean_over_values_of_whole_clusters():
    """Against a hand-written resampler: each replicate is the mean over every value of the drawn clusters."""
    from ascp.stats import cluster_bootstrap, cluster_replicates

    values = np.array([0.1, 0.3, 0.5, -0.2, 0.9, 0.4])
    clusters = np.array(["q1", "q1", "q2", "q3", "q3", "q3"])
    names = ["q1", "q2", "q3"]
    by_hand = []
    rng = np.random.default_rng(7)
    for _ in range(300):
        drawn = [names[i] for i in rng.integers(0, 3, size=3)]
        picked = np.concatenate([values[clusters == c] for c in drawn])
        by_hand.append(picked.mean())
    est = cluster_bootstrap(values, clusters, 0.0, 300, rng=np.random.default_rng(7))
    assert (est.lo, est.hi) == pytest.approx(tuple(np.quantile(by_hand, [0.025, 0.975])))
    assert est.p == pytest.approx(bootstrap_p(by_hand)) and est.n == 3 and est.mean == pytest.approx(values.mean())
    means = cluster_replicates(lambda idx: float(np.mean([values[clusters == names[i]].mean() for i in idx])), 3, 5,
                              rng=np.random.default_rng(1))
    assert len(means) == 5 and cluster_replicates(len, 0, 5, rng=np.random.default_rng(1)) == []
