"""The loop simulator: model-free consumers, the paper's toy-model theory (Eq. 4), App. A.2's
independence test, the embedding cache, and `ascp simulate` end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zlib

import numpy as np
import pytest

from ascp.embed.embedders import embedded_minilm_dir
from ascp.errors import AscpError
from ascp.loop.consumers import Consumption, Oracle, Replay, Toy, make_consumer
from ascp.loop.simulate import EmbeddingCache, compare, pool_views, simulate_portfolios, split_policies
from ascp.reading import Reading
from ascp.stats import consumption_independence
from ascp.types import AnswerUnit, Case, Passage, Portfolio, Round

OPEN_LOOP = ("vanilla", "rotate", "mmr", "xquad", "pm2", "dpp", "ascp-uniform", "ascp-nofeedback")


def fake_embed(texts):
    v = np.array([np.random.default_rng(zlib.crc32(t.encode())).normal(size=16) for t in texts])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def write_run_folder(folder, portfolios) -> None:
    """An `ascp run` folder of `portfolios`, by the run folder's own writer."""
    from ascp.loop.runfolder import write_run

    rows = [{"case_id": p.case_id, "policy": p.policy, **p.metrics} for p in portfolios]
    write_run(folder, [], portfolios, rows, {"policy": portfolios[0].policy, "data": "absent.jsonl"})


def write_store(folder, records) -> None:
    """An experiment store of unit `records` (key fields filled in), by the store's own writer."""
    from ascp.experiments.store import RunStore

    with RunStore(folder) as store:
        store.begin({"name": "test", "tasks": [], "units": len(records)}, "name: test\n")
        for rec in records:
            store.write({"task": "t", "model": "m", "seed": 0, **rec})


def make_cases(n_cases: int = 6, pool: int = 24) -> list[Case]:
    cases = []
    for c in range(n_cases):
        passages = tuple(Passage(id=f"c{c}p{i}", title=f"T{i % 5}",
                                 text=f"passage {i} of case {c}" + (f" answer{i % 3}" if i % 4 == 0 else ""))
                         for i in range(pool))
        units = tuple(AnswerUnit(id=str(j), aliases=(f"answer{j}",)) for j in range(3))
        cases.append(Case(id=f"c{c}", question=f"question {c}?", pool=passages, units=units))
    return cases


@pytest.fixture(scope="module")
def cases():
    return make_cases()


@pytest.fixture(scope="module")
def views(cases):
    return pool_views(cases, fake_embed)


def expected_used(portfolio, q: float) -> float:
    """E|U_T| under toy(q) for fixed contexts: sum over offered passages of 1 - (1 - q)^n_d."""
    counts: dict[str, int] = {}
    for r in portfolio.rounds:
        for d in r.context:
            counts[d] = counts.get(d, 0) + 1
    return sum(1 - (1 - q) ** n for n in counts.values())


@pytest.mark.parametrize("policy", OPEN_LOOP)
def test_eq4_bound_holds_exactly_for_open_loop_policies(cases, views, policy):
    k, T, q = 3, 4, 0.4
    portfolios = simulate_portfolios(cases, policy, k, T, Toy(q=q), views)
    for p in portfolios:
        exact = expected_used(p, q)
        assert exact <= q * k * T + 1e-12
        no_repeats = len(p.offered) == k * T
        assert math.isclose(exact, q * k * T) == no_repeats  # the bound is attained iff nothing repeats
    if policy == "rotate":  # pools of 24 >= kT = 12: rotation never repeats, so it attains the bound
        assert all(len(p.offered) == k * T for p in portfolios)


@pytest.mark.parametrize("policy", ["vanilla", "rotate", "ascp", "carriage"])
def test_eq4_by_simulation_with_a_derived_tolerance(cases, views, policy):
    # Mean |U_T| over independent seeds: each |U_T| lies in [0, kT], so its sd is at most kT/2 and
    # the mean of S seeds x C cases is within 4 sd / sqrt(S C) of its expectation (Chebyshev-safe).
    k, T, q, seeds = 3, 4, 0.3, 40
    used = [len({d for r in p.rounds for d in r.used})
            for s in range(seeds) for p in simulate_portfolios(cases, policy, k, T, Toy(q=q, seed=s), views)]
    tolerance = 4 * (k * T / 2) / math.sqrt(len(used))
    assert np.mean(used) <= q * k * T + tolerance
    if policy == "rotate":
        assert np.mean(used) == pytest.approx(q * k * T, abs=tolerance)


def test_toy_draws_are_common_random_numbers(cases):
    toy = Toy(q=0.5, seed=3)
    a = toy.consume(cases[0], 2, ("c0p1", "c0p2", "c0p3"), [])
    b = toy.consume(cases[0], 2, ("c0p3", "c0p1"), [])
    assert ("c0p1" in a.used) == ("c0p1" in b.used) and ("c0p3" in a.used) == ("c0p3" in b.used)
    assert sum(a.normalized.values()) == pytest.approx(1.0) or not a.used


def test_oracle_uses_exactly_the_answer_bearing_passages(cases, views):
    (p,) = simulate_portfolios(cases[:1], "rotate", 4, 3, Oracle(), views)
    bearing = {d.id for d in cases[0].pool if "answer" in d.text}
    for r in p.rounds:
        assert set(r.used) == set(r.context) & bearing
    assert p.metrics["ceiling"] == p.metrics["used_ceiling"] > 0
    assert p.metrics["offered"] == 12.0


def test_replay_reproduces_a_recorded_run_and_documents_unseen_passages(tmp_path, cases, views):
    recorded = simulate_portfolios(cases, "rotate", 3, 3, Toy(q=0.5, seed=7), views)
    path = tmp_path / "run"
    write_run_folder(path, recorded)
    replay = Replay(str(path))
    replay.check(cases, 3)
    again = simulate_portfolios(cases, "rotate", 3, 3, replay, views)
    assert [[r.used for r in p.rounds] for p in again] == [[r.used for r in p.rounds] for p in recorded]
    # A passage shown only in round 1 keeps its round-1 reading when offered in round 3; a passage
    # never shown for the case is not used.
    first = recorded[0].rounds[0]
    d = first.context[0]
    reading = replay.consume(cases[0], 3, (d, "c0p23"), [])
    assert reading.normalized[d] == first.normalized[d] and (d in reading.used) == (d in first.used)
    assert reading.normalized["c0p23"] == 0.0 and "c0p23" not in reading.used
    with pytest.raises(AscpError, match="lacks some of rounds 1..5"):
        replay.check(cases, 5)
    with pytest.raises(AscpError, match="no rounds for case 'other'"):
        replay.check([Case(id="other", question="q", pool=cases[0].pool, units=cases[0].units)], 3)


def test_replay_folder_names_are_taken_whole(tmp_path, cases, views):
    folder = tmp_path / "ascp_kappa=1,b"
    write_run_folder(folder, simulate_portfolios(cases[:1], "rotate", 3, 1, Toy(q=0.5), views))
    assert make_consumer(f"replay({folder})").name == f"replay({folder})"
    assert make_consumer(f"replay(run={folder})").name == f"replay({folder})"


def test_replay_reads_one_condition_of_an_experiment_store(tmp_path, cases, views):
    recorded = {name: simulate_portfolios(cases, name, 3, 2, Toy(q=0.5, seed=2), views)
                for name in ("vanilla", "rotate")}
    write_store(tmp_path, [{"case_id": p.case_id, "condition": f"{name}(k=3,T=2)",
                             "rounds": [r.to_json() for r in p.rounds]}
                            for name, portfolios in recorded.items() for p in portfolios])
    with pytest.raises(AscpError, match="give one of the store's conditions"):
        make_consumer(f"replay({tmp_path})")
    replay = make_consumer(f"replay(run={tmp_path},condition=rotate(k=3,T=2))")
    again = simulate_portfolios(cases, "rotate", 3, 2, replay, views)
    assert [[r.used for r in p.rounds] for p in again] == [[r.used for r in p.rounds] for p in recorded["rotate"]]
    p = recorded["rotate"][0]
    unit = {"case_id": p.case_id, "condition": "rotate(k=3,T=2)", "rounds": [r.to_json() for r in p.rounds]}
    write_store(tmp_path / "two-seeds", [{**unit, "seed": 0}, {**unit, "seed": 1}])
    with pytest.raises(AscpError, match="repeats round 1 of case"):
        make_consumer(f"replay({tmp_path / 'two-seeds'})")
    # the same unit twice (a concatenated file) is one unit: the first record counts, as in the store
    twice = tmp_path / "twice"
    write_store(twice, [unit])
    (twice / "units.jsonl").write_bytes((twice / "units.jsonl").read_bytes() * 2)
    again = simulate_portfolios(cases, "rotate", 3, 2, make_consumer(f"replay({twice})"), views)
    assert [r.used for r in again[0].rounds] == [r.used for r in p.rounds]


def test_make_consumer_parses_and_refuses_bad_specs(tmp_path):
    assert isinstance(make_consumer("toy"), Toy) and make_consumer("toy(q=0.25)").q == 0.25
    assert make_consumer("toy(q=0.25)", seed=4).seed == 4 and make_consumer("toy(q=0.2,seed=9)").seed == 9
    assert isinstance(make_consumer("oracle"), Oracle)
    for spec, message in [("nope", "unknown consumer"), ("toy(q=1.5)", r"q must lie in \[0, 1\]"),
                          ("toy(q=x)", "bad option value"), ("toy(r=1)", "unknown option"),
                          ("toy(q=0.5", "malformed consumer"), ("replay", "give the run folder"),
                          (f"replay({tmp_path})", "holds neither rounds.jsonl")]:
        with pytest.raises(AscpError, match=message):
            make_consumer(spec)


def test_a_user_consumer_plugs_in(cases, views):
    class FirstOnly:
        name = "first-only"

        def consume(self, case, round, context, history):
            return Consumption({d: float(i == 0) for i, d in enumerate(context)}, tuple(context[:1]))

    (p,) = simulate_portfolios(cases[:1], "vanilla", 3, 2, FirstOnly(), views)
    assert [r.used for r in p.rounds] == [(p.rounds[0].context[0],)] * 2


# ----- App. A.2 --------------------------------------------------------------------------------
def lrt_by_hand(policy, shown, used) -> float:
    """2 (llf_1 - llf_0) of binomials with one q per policy against one q overall."""
    q = used.sum() / shown.sum()
    total = 0.0
    for name in np.unique(policy):
        y, n = used[policy == name].sum(), shown[policy == name].sum()
        qg = y / n
        total += y * math.log(qg / q) + (n - y) * math.log((1 - qg) / (1 - q))
    return 2 * total


def test_independence_is_near_null_under_the_toy_model(cases, views):
    results = {name: simulate_portfolios(cases * 5, name, 4, 5, Toy(q=0.4, seed=1), views)
               for name in ("vanilla", "rotate", "dpp")}
    test = compare(results, n_boot=200)["independence"]
    assert test["df"] == 2 and test["p"] > 0.001
    assert 0.7 < test["overdispersion"] < 1.3


def test_independence_detects_policy_dependence_and_clustering():
    rng = np.random.default_rng(0)
    policy = np.repeat(["a", "b"], 400)
    shown = np.full(800, 5)
    used = np.concatenate([rng.binomial(5, 0.3, 400), rng.binomial(5, 0.5, 400)])
    test = consumption_independence({"policy": policy, "shown": shown, "used": used})
    assert test.chi2 == pytest.approx(lrt_by_hand(policy, shown, used), rel=1e-6)
    assert test.p < 1e-6 and test.df == 1
    clustered = 5 * rng.binomial(1, 0.4, 800)  # a round uses all of its context or nothing
    over = consumption_independence({"policy": policy, "shown": shown, "used": clustered})
    assert over.overdispersion > 3
    with pytest.raises(ValueError):
        consumption_independence({"policy": policy, "shown": shown, "used": shown + 1})
    nothing = consumption_independence({"policy": policy, "shown": shown, "used": 0 * shown})
    assert nothing.p == 1.0 and math.isnan(nothing.overdispersion)


def test_independence_on_the_committed_real_run_store():
    # The cpu-small reproduction (embedded model, 8 ASQA queries): the four k = 5 conditions.
    from pathlib import Path

    from ascp.stats import consumption_rows

    store = Path(__file__).resolve().parents[1] / "docs" / "results" / "cpu-small" / "units.jsonl"
    records = [json.loads(line) for line in store.read_text().splitlines() if line]
    loo = [r for r in records if r["estimator"] == "loo" and r["k"] == 5]
    rows = consumption_rows(loo)
    assert rows["shown"].size == 160 and set(rows["shown"]) == {5.0}
    test = consumption_independence(rows, by="condition")
    assert test.df == 3 and test.rows == 160 and test.q == pytest.approx(0.29875)
    assert 0 <= test.chi2 < 5 and test.overdispersion < 1  # used counts far less variable than binomial


# ----- the embedding cache and the command -------------------------------------------------------
def test_embedding_cache_embeds_each_text_once_and_persists(tmp_path):
    calls = []

    def counting(texts):
        calls.append(list(texts))
        return fake_embed(texts)

    cache = EmbeddingCache(counting, tmp_path / "e.npz")
    first = cache(["a", "b", "a"])
    np.testing.assert_allclose(cache(["b", "a"]), first[[1, 0]], atol=1e-6)
    assert calls == [["a", "b"]]
    cache.save()
    again = EmbeddingCache(counting, tmp_path / "e.npz")
    np.testing.assert_allclose(again(["a"]), first[:1], atol=1e-6)
    assert len(calls) == 1


def test_split_policies_keeps_options_together():
    assert split_policies("vanilla, ascp(kappa=1,lam=0.5),rotate") == ["vanilla", "ascp(kappa=1,lam=0.5)", "rotate"]


def _cli(*args, home):
    import os

    env = {**os.environ, "ASCP_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "ascp.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.mark.skipif(embedded_minilm_dir() is None, reason="`ascp simulate` embeds pools with the embedded MiniLM")
def test_simulate_command_writes_run_folders_and_refuses_bad_input(tmp_path):
    data = tmp_path / "cases.jsonl"
    with data.open("w") as handle:
        for case in make_cases(4, 12):
            handle.write(json.dumps({"id": case.id, "question": case.question,
                                     "pool": [{"id": p.id, "title": p.title, "text": p.text} for p in case.pool],
                                     "answers": [list(u.aliases) for u in case.units]}) + "\n")
    out = tmp_path / "sim"
    base = ["simulate", "--data", str(data), "--k", "3", "--T", "3", "--out", str(out)]
    proc = _cli(*base, "--policy", "vanilla,rotate,ascp(kappa=1)", "--consumer", "toy(q=0.5)", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    comparison = json.loads((out / "comparison.json").read_text())
    assert list(comparison["policies"]) == ["vanilla", "rotate", "ascp(kappa=1)"]
    assert comparison["policies"]["rotate"]["offered"] == 9.0
    assert "offered_vs_vanilla" in comparison["policies"]["rotate"] and comparison["independence"]["df"] == 2
    report = _cli("report", str(out), home=tmp_path)
    assert report.returncode == 0, report.stderr
    table = (out / "report" / "tables" / "simulation.md").read_text()
    assert "ascp(kappa=1)" in table and "[" in table and "overdispersion" in table
    assert (out / "report" / "tables" / "simulation.tex").is_file() and (out / "report" / "index.html").is_file()
    rounds = [json.loads(x) for x in (out / "rotate" / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 12 and {"case_id", "context", "normalized", "used"} <= set(rounds[0])
    cases_rows = [json.loads(x) for x in (out / "ascp_kappa=1" / "cases.jsonl").read_text().splitlines()]
    assert {"offered", "used", "ecr", "ceiling", "used_ceiling"} <= set(cases_rows[0])
    # Replay the rotate run under another policy: runs; from another data file: one sentence, exit 2.
    replayed = tmp_path / "replayed"
    ok = _cli(*base[:-1], str(replayed), "--policy", "vanilla", "--consumer", f"replay({out / 'rotate'})",
              home=tmp_path)
    assert ok.returncode == 0, ok.stderr
    other = tmp_path / "other.jsonl"
    other.write_text(data.read_text().replace('"c0"', '"x0"'))
    for extra, message in [(["--consumer", "nope", "--policy", "vanilla"], "unknown consumer"),
                           (["--consumer", "toy(q=2)", "--policy", "vanilla"], "q must lie in [0, 1]"),
                           (["--consumer", f"replay({out / 'rotate'})", "--policy", "vanilla", "--T", "5"],
                            "lacks some of rounds 1..5"),
                           (["--consumer", "oracle", "--policy", "vanilla,fixed"], "names a policy twice"),
                           (["--consumer", "oracle", "--policy", "mmr(lambda=0.3)"], "unknown option"),
                           (["--consumer", "oracle", "--policy", "vanilla,rotate", "--n-boot", "0"],
                            "--n-boot must be at least 100"),
                           (["--consumer", "oracle", "--policy", "vanilla", "--min-pool", "99"], "no case of"),
                           (["--consumer", "oracle", "--policy", "vanilla"], "already holds")]:
        target = out if message == "already holds" else tmp_path / "bad"
        bad = _cli("simulate", "--data", str(data), "--k", "3", "--T", "3", "--out", str(target), *extra,
                   home=tmp_path)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert not (tmp_path / "bad").exists()
    # A folder of other files is never replaced as a whole.
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious.txt").write_text("data")
    refused = _cli("simulate", "--data", str(data), "--k", "3", "--T", "3", "--out", str(keep), "--policy",
                   "vanilla,rotate", "--consumer", "oracle", home=tmp_path)
    assert refused.returncode == 2 and "holds other files" in refused.stderr
    assert (keep / "precious.txt").read_text() == "data"
    inplace = _cli("report", str(out), "--out", str(out), home=tmp_path)
    assert inplace.returncode == 2 and "holds other files" in inplace.stderr and (out / "comparison.json").exists()
    wrong = _cli("simulate", "--data", str(other), "--k", "3", "--T", "3", "--out", str(tmp_path / "bad"),
                 "--policy", "vanilla", "--consumer", f"replay({out / 'rotate'})", home=tmp_path)
    assert wrong.returncode == 2 and "no rounds for case 'x0'" in wrong.stderr
    # fit(run=...): the rotate run's readings fitted, simulated under another policy and T; a run of
    # other cases is one sentence before anything is embedded.
    fitted = _cli(*base[:-1], str(tmp_path / "fitted"), "--policy", "ascp-exposure", "--T", "4", "--consumer",
                  f"fit(run={out / 'rotate'})", home=tmp_path)
    assert fitted.returncode == 0, fitted.stderr
    assert json.loads((tmp_path / "fitted" / "comparison.json").read_text())["config"]["T"] == 4
    elsewhere = tmp_path / "elsewhere.jsonl"  # no case of the recorded run
    elsewhere.write_text(data.read_text().replace('"id": "c', '"id": "z'))
    wrong_fit = _cli("simulate", "--data", str(elsewhere), "--k", "3", "--T", "3", "--out", str(tmp_path / "bad"),
                     "--policy", "vanilla", "--consumer", f"fit(run={out / 'rotate'})", home=tmp_path)
    assert wrong_fit.returncode == 2 and "no rounds for any" in wrong_fit.stderr, wrong_fit.stderr


# ----------------------------------------------------------------------------------------------
# fit(run=...): use probabilities fitted to a run's readings
# ----------------------------------------------------------------------------------------------

FIT_TRUTH = np.array([-0.5, -0.6, 1.5, -0.8])  # intercept, log rank, answer-bearing, log(1 + times shown)


def synthetic_run(tmp_path, cases, T: int = 5, k: int = 5, seed: int = 0):
    """A run folder whose probe used each shown passage with the logistic probability of FIT_TRUTH;
    contexts are random draws from the pool, so ranks, answer-bearing passages and repeats all vary.
    Returns the folder and the design matrix of its readings (with their true probabilities)."""
    from ascp.loop.consumers import answer_bearing, fit_features

    rng = np.random.default_rng(seed)
    portfolios, X = [], []
    for case in cases:
        bearing = answer_bearing(case)
        shown: dict[str, int] = {}
        rounds = []
        for t in range(1, T + 1):
            context = [case.pool[i].id for i in rng.choice(len(case.pool), k, replace=False)]
            x = fit_features(np.array([int(d.split("p")[-1]) + 1 for d in context]),
                             np.array([d in bearing for d in context]), np.array([shown.get(d, 0) for d in context]))
            p = 1 / (1 + np.exp(-(x @ FIT_TRUTH)))
            used = [d for d, pd in zip(context, p, strict=True) if rng.random() < pd]
            normalized = {d: (1 / len(used) if d in used else 0.0) for d in context}
            rounds.append(Round(round=t, context=tuple(context), response="", response_tokens=0,
                                reading=Reading(normalized, normalized, tuple(used), None), seconds=0.0))
            X.append(x)
            for d in context:
                shown[d] = shown.get(d, 0) + 1
        portfolios.append(Portfolio(case_id=case.id, policy="random", rounds=tuple(rounds)))
    folder = tmp_path / "synthetic-run"
    write_run_folder(folder, portfolios)
    return folder, np.vstack(X)


def test_fit_recovers_the_generating_probabilities(tmp_path):
    many = make_cases(200, 24)
    folder, X = synthetic_run(tmp_path, many)
    fit = make_consumer(f"fit(run={folder})")
    fit.prepare(many)
    assert fit.n_readings == len(X) == 200 * 5 * 5
    # Tolerance from the model itself: the MLE's standard errors are the square roots of the diagonal of
    # the inverse Fisher information, X' diag(p (1 - p)) X at the truth; each coefficient must lie within
    # 4 of them (a miss has probability ~6e-5 per coefficient under the asymptotic normal), and the
    # fitted probability of every observed feature combination within 0.05 of the true one (the
    # delta-method sd of a fitted probability here is below 0.02).
    p = 1 / (1 + np.exp(-(X @ FIT_TRUTH)))
    se = np.sqrt(np.diag(np.linalg.inv(X.T @ (X * (p * (1 - p))[:, None]))))
    assert np.all(np.abs(fit.coef - FIT_TRUTH) <= 4 * se), (fit.coef, se)
    grid = np.unique(X, axis=0)
    p_fit = 1 / (1 + np.exp(-(grid @ fit.coef)))
    assert np.max(np.abs(p_fit - 1 / (1 + np.exp(-(grid @ FIT_TRUTH))))) <= 0.05
    # Simulating with it: the probabilities of a context follow its ranks, bearing and showings.
    case = many[0]
    prob = fit.probability(case, [case.pool[0].id, case.pool[1].id], [])
    assert prob[0] > prob[1]  # rank 1 is answer-bearing in make_cases, rank 2 is not
    views = pool_views(many[:5], fake_embed)
    portfolios = simulate_portfolios(many[:5], "ascp-exposure", 5, 4, fit, views)
    assert all(len(p.rounds) == 4 for p in portfolios)


def test_fit_specs_and_bad_runs(tmp_path, cases):
    folder, _ = synthetic_run(tmp_path, cases)
    spec = make_consumer(f"fit(run={folder},estimator=loo,seed=3,condition=rotate(k=5,T=5,arm=rotation))", seed=1)
    assert spec.name == f"fit(run={folder},condition=rotate(k=5,T=5,arm=rotation),estimator=loo)" and spec.seed == 3
    assert make_consumer(f"fit(run={folder})", seed=4).seed == 4
    fit = make_consumer(f"fit(run={folder})")
    with pytest.raises(AscpError, match="not fitted"):
        fit.consume(cases[0], 1, [cases[0].pool[0].id], [])
    with pytest.raises(AscpError, match="no rounds for any"):
        fit.prepare([Case(id="other", question="q", pool=cases[0].pool, units=cases[0].units)])
    store = tmp_path / "store"
    write_store(store, [{"case_id": "c0", "condition": "a", "estimator": "loo", "rounds": []}])
    with pytest.raises(AscpError, match="holds no unit"):
        make_consumer(f"fit(run={store},estimator=bm25)")
    for spec_text, message in [("fit", "give the run folder"), (f"fit({tmp_path})", "holds neither"),
                               (f"fit(run={folder},seed=x)", "bad option value")]:
        with pytest.raises(AscpError, match=message):
            make_consumer(spec_text)
