"""ascp.stats against known answers, statsmodels/scipy references and hand computations."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.meta_analysis import combine_effects
from statsmodels.stats.multitest import multipletests

from ascp.stats import (
    Estimate,
    bh_by_family,
    bh_fdr,
    bootstrap_p,
    crossed_bootstrap,
    paired_bootstrap,
    partial_correlation,
    paule_mandel,
    prediction_interval,
    seed_means,
    seed_t_interval,
    width_elasticity,
    within_query_correlation,
)

# --------------------------------------------------------------------------- result type


def test_estimate_is_frozen_and_tidy() -> None:
    est = Estimate(mean=0.1, lo=0.0, hi=0.2, p=0.03, n=10)
    assert est.to_dict() == {
        "mean": 0.1, "lo": 0.0, "hi": 0.2, "p": 0.03, "n": 10, "se": est.se, "level": 0.95, "method": "",
    }
    assert math.isnan(est.se)
    with pytest.raises(dataclasses.FrozenInstanceError):
        est.mean = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------- paired bootstrap


def test_bootstrap_p_hand_computed() -> None:
    # below: (1 + 1) / 5 = 0.4; above: (1 + 3) / 5 = 0.8; p = 2 * 0.4
    assert bootstrap_p([-1.0, 1.0, 2.0, 3.0]) == pytest.approx(0.8)
    assert bootstrap_p(np.ones(999)) == pytest.approx(2 / 1000)  # the bootstrap floor
    assert bootstrap_p(np.zeros(50)) == 1.0


def test_paired_bootstrap_known_effect() -> None:
    gen = np.random.default_rng(11)
    n, effect = 300, 0.10
    b = gen.uniform(0.1, 0.6, n)
    a = b + effect + gen.normal(0.0, 0.3, n)
    est = paired_bootstrap(a, b, 4000, rng=np.random.default_rng(0))
    d = a - b
    assert est.mean == pytest.approx(d.mean())
    assert est.n == n
    assert est.lo < effect < est.hi
    assert est.lo < est.mean < est.hi
    assert est.p == pytest.approx(2 / 4001)  # every replicate is positive: the floor
    # percentile interval close to the normal-theory interval for a mean
    se = d.std(ddof=1) / math.sqrt(n)
    assert est.se == pytest.approx(se, rel=0.1)
    assert est.lo == pytest.approx(d.mean() - 1.96 * se, abs=0.2 * se)
    assert est.hi == pytest.approx(d.mean() + 1.96 * se, abs=0.2 * se)


def test_paired_bootstrap_null_is_rarely_significant() -> None:
    gen = np.random.default_rng(5)
    rng = np.random.default_rng(6)
    ps = []
    for _ in range(20):
        a, b = gen.normal(0, 1, 60), gen.normal(0, 1, 60)
        ps.append(paired_bootstrap(a, b, 1000, rng=rng).p)
    ps_arr = np.array(ps)
    assert np.all((ps_arr > 0) & (ps_arr <= 1))
    assert np.sum(ps_arr > 0.05) >= 16  # expected 19 of 20
    assert np.ptp(ps_arr) > 0.5  # spread over (0, 1], not piled up at one end


def test_paired_bootstrap_identical_arms() -> None:
    x = np.linspace(0, 1, 40)
    est = paired_bootstrap(x, x, 500, rng=np.random.default_rng(0))
    assert (est.mean, est.lo, est.hi, est.p) == (0.0, 0.0, 0.0, 1.0)


def test_paired_bootstrap_is_deterministic_under_a_seeded_generator() -> None:
    gen = np.random.default_rng(2)
    a, b = gen.normal(0.05, 1, 80), gen.normal(0, 1, 80)
    one = paired_bootstrap(a, b, 2000, rng=np.random.default_rng(42))
    two = paired_bootstrap(a, b, 2000, rng=np.random.default_rng(42))
    other = paired_bootstrap(a, b, 2000, rng=np.random.default_rng(43))
    assert one == two
    assert one.mean == other.mean and (one.lo, one.hi) != (other.lo, other.hi)


def test_paired_bootstrap_rejects_bad_input() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        paired_bootstrap([1.0, np.nan, 2.0], [0.0, 0.0, 0.0], 10, rng=rng)
    with pytest.raises(ValueError):
        paired_bootstrap([1.0, 2.0], [0.0, 0.0, 0.0], 10, rng=rng)
    with pytest.raises(ValueError):
        paired_bootstrap([1.0, 2.0], [0.0, 0.0], 0, rng=rng)


# --------------------------------------------------------------------------- crossed bootstrap


def _crossed_frame(gen: np.random.Generator, queries: dict[str, int], n_seeds: int, effect: dict[str, float],
                   seed_sd: float = 0.01, query_sd: float = 0.1, noise_sd: float = 0.05) -> pd.DataFrame:
    rows = []
    seed_fx = gen.normal(0, seed_sd, n_seeds)
    for task, nq in queries.items():
        q_fx = gen.normal(0, query_sd, nq)
        for s in range(n_seeds):
            for q in range(nq):
                value = effect[task] + seed_fx[s] + q_fx[q] + gen.normal(0, noise_sd)
                rows.append({"task": task, "seed": s, "query": f"q{q}", "diff": value})
    return pd.DataFrame(rows)


def test_crossed_bootstrap_point_estimate_weights_tasks_equally() -> None:
    gen = np.random.default_rng(3)
    df = _crossed_frame(gen, {"asqa": 30, "eli5": 10}, 2, {"asqa": 0.1, "eli5": -0.1})
    est = crossed_bootstrap(df, 500, rng=np.random.default_rng(0))
    per_task = df.groupby("task")["diff"].mean()
    assert est.mean == pytest.approx(per_task.mean())
    assert est.n == 2 * 40
    size = crossed_bootstrap(df, 200, rng=np.random.default_rng(0), task_weights="size")
    assert size.mean == pytest.approx(df["diff"].mean())
    custom = crossed_bootstrap(df, 200, rng=np.random.default_rng(0), task_weights={"asqa": 3, "eli5": 1})
    assert custom.mean == pytest.approx(0.75 * per_task["asqa"] + 0.25 * per_task["eli5"])


def test_crossed_bootstrap_averages_rows_within_a_cell() -> None:
    # two models per (task, seed, query): the cell value is their mean
    base = {"task": ["a"] * 8, "seed": [0, 0, 1, 1] * 2, "query": ["x"] * 4 + ["y"] * 4,
            "diff": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]}
    est = crossed_bootstrap(base, 100, rng=np.random.default_rng(0))
    assert est.mean == pytest.approx(3.5)
    assert est.n == 4


def test_crossed_bootstrap_known_effect_and_null() -> None:
    gen = np.random.default_rng(4)
    queries = {"asqa": 40, "qampari": 40, "eli5": 40, "recipes": 40}
    df = _crossed_frame(gen, queries, 2, dict.fromkeys(queries, 0.05))
    est = crossed_bootstrap(df, 2000, rng=np.random.default_rng(1))
    assert est.lo < 0.05 < est.hi
    assert est.p < 0.01
    null = _crossed_frame(gen, queries, 2, dict.fromkeys(queries, 0.0))
    assert crossed_bootstrap(null, 2000, rng=np.random.default_rng(1)).p > 0.05


def test_crossed_bootstrap_resamples_seeds_once_for_all_tasks() -> None:
    # A pure seed effect (seed 0 -> 0, seed 1 -> 1 in every task and query). Drawing two seeds
    # with replacement gives means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4: sd = sqrt(1/8).
    # (Independent seed draws per task would give sd = sqrt(1/8) / sqrt(2) with two tasks.)
    rows = [{"task": t, "seed": s, "query": q, "diff": float(s)} for t in "ab" for s in (0, 1) for q in range(5)]
    est = crossed_bootstrap(rows_to_columns(rows), 4000, rng=np.random.default_rng(7))
    assert est.mean == pytest.approx(0.5)
    assert est.se == pytest.approx(math.sqrt(1 / 8), rel=0.05)
    assert (est.lo, est.hi) == (0.0, 1.0)
    # A pure query effect with one seed: the query resampling is a plain bootstrap of the task means.
    gen = np.random.default_rng(8)
    vals = gen.normal(0, 1, 50)
    single = {"task": ["a"] * 50, "seed": [0] * 50, "query": np.arange(50), "diff": vals}
    crossed = crossed_bootstrap(single, 4000, rng=np.random.default_rng(9))
    paired = paired_bootstrap(vals, np.zeros(50), 4000, rng=np.random.default_rng(9))
    assert crossed.se == pytest.approx(paired.se, rel=0.08)


def rows_to_columns(rows: list[dict]) -> dict[str, list]:
    return {key: [r[key] for r in rows] for key in rows[0]}


def test_crossed_bootstrap_rejects_incomplete_designs() -> None:
    data = {"task": ["a", "a", "a"], "seed": [0, 1, 0], "query": ["x", "x", "y"], "diff": [0.1, 0.2, 0.3]}
    with pytest.raises(ValueError, match="incomplete"):
        crossed_bootstrap(data, 10, rng=np.random.default_rng(0))


def test_crossed_bootstrap_is_deterministic() -> None:
    df = _crossed_frame(np.random.default_rng(1), {"a": 12, "b": 9}, 3, {"a": 0.0, "b": 0.1})
    one = crossed_bootstrap(df, 1000, rng=np.random.default_rng(5))
    two = crossed_bootstrap(df, 1000, rng=np.random.default_rng(5))
    assert one == two


# --------------------------------------------------------------------------- BH-FDR


@pytest.mark.parametrize("m", [1, 2, 7, 50, 123])
def test_bh_fdr_matches_statsmodels(m: int) -> None:
    gen = np.random.default_rng(m)
    p = np.concatenate([gen.uniform(0, 1, m - m // 3), gen.uniform(0, 0.01, m // 3)])
    gen.shuffle(p)
    if m > 5:
        p[:3] = p[3]  # ties
    ours = bh_fdr(p)
    ref = multipletests(p, method="fdr_bh")[1]
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-15)
    assert np.all(ours >= p) and np.all(ours <= 1)
    order = np.argsort(p)
    assert np.all(np.diff(ours[order]) >= 0)  # monotone in p


def test_bh_fdr_edge_cases() -> None:
    assert bh_fdr([]).size == 0
    np.testing.assert_allclose(bh_fdr([0.01, 0.04, 0.03]), [0.03, 0.04, 0.04])
    with pytest.raises(ValueError):
        bh_fdr([0.2, 1.5])
    with pytest.raises(ValueError):
        bh_fdr([0.2, np.nan])


def test_bh_by_family_corrects_within_each_family() -> None:
    gen = np.random.default_rng(0)
    fam = np.repeat(["PR", "ECR", "ground"], [8, 5, 3])
    p = gen.uniform(0, 0.2, fam.size)
    df = pd.DataFrame({"family": fam, "p": p, "contrast": np.arange(fam.size)})
    out = bh_by_family(df, "family", "p")
    assert list(out.columns) == ["family", "p", "contrast", "q"]
    np.testing.assert_array_equal(out["p"], p)
    for name in ("PR", "ECR", "ground"):
        rows = fam == name
        np.testing.assert_allclose(out["q"][rows], multipletests(p[rows], method="fdr_bh")[1])
    as_dict = bh_by_family({"family": fam, "p": p}, "family", "p", q_col="bh_q")
    np.testing.assert_allclose(as_dict["bh_q"], out["q"])


# --------------------------------------------------------------------------- Paule-Mandel


META_CASES = [
    ([0.036, -0.033, 0.134, 0.057], [0.0002, 0.0003, 0.0004, 0.0002]),  # heterogeneous, K = 4
    ([0.30, 0.10, 0.25, 0.42, 0.05, 0.18], [0.01, 0.02, 0.015, 0.03, 0.01, 0.02]),
    ([0.051, 0.049, 0.050], [0.01, 0.02, 0.015]),  # homogeneous: tau^2 = 0
    ([1.2, -0.4, 0.3, 2.0, 0.9, -1.1, 0.0, 0.5], [0.5, 0.1, 0.9, 0.3, 0.2, 0.6, 0.05, 0.4]),
]


@pytest.mark.parametrize(("effects", "variances"), META_CASES)
def test_paule_mandel_matches_statsmodels(effects: list[float], variances: list[float]) -> None:
    y, v = np.array(effects), np.array(variances)
    fit = paule_mandel(y, v)

    def q(tau2: float) -> float:
        w = 1 / (v + tau2)
        return float(w @ (y - w @ y / w.sum()) ** 2)

    # The mathematics, whatever a library release does: Q is strictly decreasing in tau^2, so
    # tau^2 is 0 exactly when Q(0) <= K - 1 and otherwise the unique root of Q(tau^2) = K - 1.
    assert fit.q_stat == pytest.approx(q(0.0), rel=1e-12)
    if q(0.0) <= y.size - 1:
        assert fit.tau2 == 0.0
    else:
        assert fit.tau2 > 0
        assert q(fit.tau2) == pytest.approx(y.size - 1, rel=1e-9)
    # statsmodels' default call iterates the same equation to |Q - (K - 1)| < 1e-5 (its own
    # tolerance), so it agrees to that precision; exotic tolerances are not compared, since
    # releases differ there (0.15.0 returns tau^2 = 0 for the last case at atol=1e-12).
    ref = combine_effects(y, v, method_re="pm")
    assert fit.tau2 == pytest.approx(ref.tau2, rel=1e-6, abs=1e-12)
    assert fit.mean == pytest.approx(ref.mean_effect_re, rel=1e-6)
    assert fit.se == pytest.approx(ref.sd_eff_w_re, rel=1e-6)
    assert fit.q_stat == pytest.approx(ref.q, rel=1e-10)
    # BLUPs: shrink each effect toward the pooled mean by tau^2 / (tau^2 + v_i)
    lam = fit.tau2 / (fit.tau2 + v)
    np.testing.assert_allclose(fit.blup, fit.mean + lam * (y - fit.mean), rtol=1e-12)


def test_paule_mandel_homogeneous_pools_completely() -> None:
    fit = paule_mandel([0.051, 0.049, 0.050], [0.01, 0.02, 0.015])
    assert fit.tau2 == 0.0
    np.testing.assert_allclose(fit.blup, fit.mean)
    assert fit.to_dict()["k"] == 3


def test_prediction_interval_uses_t_with_k_minus_2_df() -> None:
    fit = paule_mandel(*META_CASES[0])  # K = 4 -> df = 2
    assert fit.k == 4 and fit.tau2 > 0
    half = math.sqrt(fit.tau2 + fit.se**2)
    t_2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # closed form of t_{2, p}: (2p - 1) / sqrt(2 p (1 - p))
    lo, hi = prediction_interval(fit, level=0.95)
    assert (lo, hi) == pytest.approx((fit.mean - t_2 * half, fit.mean + t_2 * half), rel=1e-12)
    nlo, nhi = fit.prediction_interval(dist="normal")
    assert (nlo, nhi) == pytest.approx((fit.mean - 1.959963984540054 * half, fit.mean + 1.959963984540054 * half))
    assert hi - lo > 2 * (nhi - nlo)  # Table 6: the t_{K-2} interval is much wider than the normal one
    with pytest.raises(ValueError):
        prediction_interval(paule_mandel([0.1, 0.2], [0.01, 0.01]))


def test_pooled_mean_estimate() -> None:
    fit = paule_mandel(*META_CASES[1])
    est = fit.pooled()
    assert est.mean == fit.mean and est.se == fit.se and est.n == 6
    assert est.p == pytest.approx(2 * stats.norm.sf(abs(fit.mean / fit.se)))


# --------------------------------------------------------------------------- seed t interval


def test_seed_t_interval_matches_scipy() -> None:
    m = np.array([0.012, 0.009, 0.014, 0.008, 0.011])
    est = seed_t_interval(m)
    lo, hi = stats.t.interval(0.95, df=4, loc=m.mean(), scale=stats.sem(m))
    assert (est.lo, est.hi) == pytest.approx((lo, hi), rel=1e-12)
    assert est.p == pytest.approx(stats.ttest_1samp(m, 0.0).pvalue, rel=1e-10)
    assert est.n == 5 and est.se == pytest.approx(stats.sem(m))
    assert seed_t_interval([0.0, 0.0]).p == 1.0
    with pytest.raises(ValueError):
        seed_t_interval([0.1])


def test_seed_means_weight_tasks_equally() -> None:
    data = {
        "task": ["a", "a", "a", "b", "a", "b"],
        "seed": [0, 0, 0, 0, 1, 1],
        "diff": [0.1, 0.2, 0.3, 1.0, 0.0, 2.0],
    }
    labels, means = seed_means(data)
    np.testing.assert_array_equal(labels, [0, 1])
    np.testing.assert_allclose(means, [(0.2 + 1.0) / 2, (0.0 + 2.0) / 2])


# --------------------------------------------------------------------------- width elasticity


def _elasticity_frame(gen: np.random.Generator, n_queries: int = 150) -> pd.DataFrame:
    ks = np.array([2, 3, 5, 8, 12, 24])
    query = np.repeat(np.arange(n_queries), ks.size)
    k = np.tile(ks, n_queries)
    q_fx = gen.normal(0, 0.3, n_queries)[query]
    u = 0.6 * k**-0.68 * np.exp(q_fx + gen.normal(0, 0.2, k.size))
    return pd.DataFrame({"query": query, "k": k, "used_fraction": u})


def test_width_elasticity_recovers_known_slope() -> None:
    df = _elasticity_frame(np.random.default_rng(0))
    est = width_elasticity(df)
    assert est.mean == pytest.approx(-0.68, abs=0.03)
    assert est.lo < -0.68 < est.hi
    assert 0 < est.se < 0.03 and est.p < 1e-10 and est.n == len(df)
    assert est.mean == pytest.approx(np.polyfit(np.log(df["k"]), np.log(df["used_fraction"]), 1)[0])


def test_width_elasticity_cluster_se_by_hand() -> None:
    df = _elasticity_frame(np.random.default_rng(1), n_queries=40)
    est = width_elasticity(df)
    x = np.column_stack([np.ones(len(df)), np.log(df["k"])])
    y = np.log(df["used_fraction"].to_numpy())
    bread = np.linalg.inv(x.T @ x)
    beta = bread @ x.T @ y
    e = y - x @ beta
    meat = np.zeros((2, 2))
    for g in np.unique(df["query"]):
        s = x[df["query"] == g].T @ e[df["query"] == g]
        meat += np.outer(s, s)
    n, g_count = len(df), 40
    cov = bread @ meat @ bread * g_count / (g_count - 1) * (n - 1) / (n - 2)
    assert est.se == pytest.approx(math.sqrt(cov[1, 1]), rel=1e-8)
    crit = stats.t.ppf(0.975, g_count - 1)
    assert est.hi - est.lo == pytest.approx(2 * crit * est.se, rel=1e-8)


def test_width_elasticity_zero_handling() -> None:
    df = _elasticity_frame(np.random.default_rng(2), n_queries=30)
    with_zeros = pd.concat([df, pd.DataFrame({"query": [0, 1], "k": [24, 24], "used_fraction": [0.0, 0.0]})])
    dropped = width_elasticity(with_zeros)
    assert dropped == width_elasticity(df)
    assert dropped.n == len(with_zeros) - 2
    with pytest.raises(ValueError, match="used fraction 0"):
        width_elasticity(with_zeros, zero="raise")
    eps = width_elasticity(with_zeros, zero=1e-3)
    assert eps.n == len(with_zeros) and eps.mean < dropped.mean


# --------------------------------------------------------------------------- correlations


def _grouped_frame(gen: np.random.Generator, n_groups: int = 60, per: int = 8) -> pd.DataFrame:
    g = np.repeat(np.arange(n_groups), per)
    z = gen.normal(0, 1, g.size)
    x = 0.5 * z + gen.normal(0, 1, g.size)
    y = 0.3 * x + 0.4 * z + gen.normal(0, 1, g.size)
    task = np.where(g % 2 == 0, "asqa", "qampari")
    return pd.DataFrame({"task": task, "query": g // 2, "x": x, "y": y, "z": z})


def test_within_query_correlation_ignores_group_fixed_effects() -> None:
    gen = np.random.default_rng(0)
    df = _grouped_frame(gen)
    groups = ["task", "query"]
    base = within_query_correlation(df, groups, "x", "y")
    shifted = df.copy()
    codes = df.groupby(groups).ngroup().to_numpy()
    shifted["x"] += gen.normal(0, 10, codes.max() + 1)[codes]
    shifted["y"] += gen.normal(0, 10, codes.max() + 1)[codes]
    moved = within_query_correlation(shifted, groups, "x", "y")
    assert moved.mean == pytest.approx(base.mean, abs=1e-10)
    # naive pooled correlation is wrecked by the fixed effects; the within one is not
    assert abs(stats.pearsonr(shifted["x"], shifted["y"])[0] - base.mean) > 0.1
    # against scipy on hand-centered columns
    cx = df["x"] - df.groupby(groups)["x"].transform("mean")
    cy = df["y"] - df.groupby(groups)["y"].transform("mean")
    ref = stats.pearsonr(cx, cy)
    assert base.mean == pytest.approx(ref[0], rel=1e-10)
    assert within_query_correlation(df, groups, "x", "y", dof="pooled").p == pytest.approx(ref[1], rel=1e-6)
    n, g = len(df), codes.max() + 1
    t = base.mean * math.sqrt((n - g - 1) / (1 - base.mean**2))
    assert base.p == pytest.approx(2 * stats.t.sf(abs(t), n - g - 1), rel=1e-10)
    assert base.n == n and base.lo < base.mean < base.hi


def test_partial_correlation_matches_residual_regression() -> None:
    df = _grouped_frame(np.random.default_rng(3))
    groups = ["task", "query"]
    est = partial_correlation(df, groups, "x", "y", "z")
    c = df[["x", "y", "z"]] - df.groupby(groups)[["x", "y", "z"]].transform("mean")
    rx = c["x"] - np.polyfit(c["z"], c["x"], 1)[0] * c["z"]
    ry = c["y"] - np.polyfit(c["z"], c["y"], 1)[0] * c["z"]
    assert est.mean == pytest.approx(stats.pearsonr(rx, ry)[0], rel=1e-8)
    r = np.corrcoef(c.T.to_numpy())
    formula = (r[0, 1] - r[0, 2] * r[1, 2]) / math.sqrt((1 - r[0, 2] ** 2) * (1 - r[1, 2] ** 2))
    assert est.mean == pytest.approx(formula, rel=1e-8)
    n, g = len(df), df.groupby(groups).ngroups
    t = est.mean * math.sqrt((n - g - 2) / (1 - est.mean**2))
    assert est.p == pytest.approx(2 * stats.t.sf(abs(t), n - g - 2), rel=1e-8)


def test_correlation_rejects_nan_and_constant_columns() -> None:
    df = _grouped_frame(np.random.default_rng(4))
    bad = df.copy()
    bad.loc[0, "x"] = np.nan
    with pytest.raises(ValueError):
        within_query_correlation(bad, "query", "x", "y")
    const = df.assign(x=1.0)
    with pytest.raises(ValueError, match="no variation"):
        within_query_correlation(const, "query", "x", "y")
