"""Probe validation: controlled pools, the Fig. 3 statistics, the experiment plumbing and its CLI."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke_cli

from ascp.embed.embedders import embedded_minilm_dir
from ascp.errors import AscpError
from ascp.lm.hf import SamplingConfig
from ascp.metrics import unit_recovered
from ascp.types import AnswerUnit, Case, Passage
from ascp.validation.analysis import (
    Context,
    clustered_mean,
    context_auc,
    context_cover,
    random_cover,
    reversal,
    summarize,
    transfer,
)
from ascp.validation.experiment import ValidationConfig, run_validation
from ascp.validation.pools import ControlledPool, PoolBuilder, Skip, build_pools
from ascp.validation.report import build_summary, write_outputs

ASQA = Path(__file__).resolve().parents[2] / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"
COSINES = ("qd-cosine", "yd-cosine") if embedded_minilm_dir() is not None else ()


def make_case(cid: str, question: str, answers, texts) -> Case:
    pool = tuple(Passage(f"{cid}-{i}", text, title) for i, (title, text) in enumerate(texts))
    return Case(cid, question, pool, tuple(AnswerUnit(f"u{i}", tuple(a)) for i, a in enumerate(answers)))


CASES = [
    make_case("c1", "Who wrote the novel and when?", [["Mary Shelley"], ["1818"], ["Percy"]], [
        ("Poets", "Percy edited the novel."),                                  # u2
        ("Frankenstein", "The novel by Mary Shelley appeared in 1818."),       # u0, u1 (most coverage)
        ("River", "The small town near the river has a lighthouse."),
        ("Mary", "Mary Shelley was born in London."),                          # u0: a duplicate
        ("Harbour", "The harbour of the city was built in 1899."),
        ("Dog", "The quick brown fox jumps over the lazy dog."),
        ("Long", " ".join(["word"] * 300)),                                    # over the word limit
    ]),
    make_case("c2", "When was Canberra made the capital?", [["1913"], ["1927"]], [
        ("Canberra", "Canberra was named in 1913."),
        ("Parliament", "Parliament moved to Canberra in 1927."),
        ("City", "Canberra is a planned city."),
        ("Capital", "The capital city has many names."),
    ]),
    make_case("c3", "Which animal?", [["zebra"]], [("X", "nothing here"), ("Y", "the lighthouse at the harbour")]),
]
SOURCE_IDS = {p.id: p for c in CASES for p in c.pool}


# ----- controlled pools -------------------------------------------------------------------------
def check_invariants(pool: ControlledPool, case: Case, m: int = 2) -> None:
    assert len(pool.passages) == pool.width
    assert len({p.id for p in pool.passages}) == pool.width
    for p in pool.passages:  # ids (and text) unchanged
        assert SOURCE_IDS[p.id] == p.passage
        truth = {u.id for u in case.units if unit_recovered(u, f"{p.passage.title} {p.passage.text}")}
        assert set(p.answers) == truth
    necessary = [p for p in pool.passages if p.role == "necessary"]
    assert len(necessary) == m
    assert all(p.answers for p in necessary)
    for a, b in itertools.combinations(necessary, 2):
        assert not set(a.answers) & set(b.answers)  # disjoint answer sets
    for p in pool.passages:
        if p.role == "padding":
            assert p.answers == ()
        elif p.role == "duplicate":
            assert p.answers and set(p.answers) <= pool.designed_units
    if pool.padding in ("off-query",):
        assert all(p.id.split("-")[0] != case.id for p in pool.passages if p.role == "padding")
    if pool.padding in ("same-query", "duplicates"):
        assert all(p.id.split("-")[0] == case.id for p in pool.passages)


@pytest.mark.parametrize("padding", ["off-query", "same-query"])
def test_pools_hold_the_invariants_and_are_deterministic(padding):
    case = CASES[0]
    builder = PoolBuilder(CASES, m=2, seed=3)
    for width in (2, 3, 4):
        pool = builder.build(case, width, padding)
        assert isinstance(pool, ControlledPool)
        check_invariants(pool, case)
        again = PoolBuilder(CASES, m=2, seed=3).build(case, width, padding)
        assert again.to_json() == pool.to_json()
    # The necessary set is chosen by coverage: the two-unit passage first, then the disjoint one.
    assert {p.id for p in builder.necessary(case)} == {"c1-1", "c1-0"}
    # Padding is nested across widths.
    pads = [{p.id for p in builder.build(case, w, padding).passages if p.role == "padding"} for w in (3, 4)]
    assert pads[0] < pads[1]
    # Other seeds shuffle differently somewhere.
    orders = {tuple(p.id for p in PoolBuilder(CASES, seed=s).build(case, 4, padding).passages) for s in range(6)}
    assert len(orders) > 1


def test_duplicates_padding_and_the_word_limit():
    case = CASES[0]
    pool = PoolBuilder(CASES).build(case, 3, "duplicates")
    check_invariants(pool, case)
    assert [p.id for p in pool.passages if p.role == "duplicate"] == ["c1-3"]
    skip = PoolBuilder(CASES).build(case, 4, "duplicates")
    assert isinstance(skip, Skip) and "only 1 duplicates, width 4 needs 2" in skip.reason
    # The 300-word passage is never used; without the limit it becomes a same-query negative.
    ids = {p.id for p in PoolBuilder(CASES).build(case, 5, "same-query").passages}
    assert "c1-6" not in ids and "c1-2" in ids
    assert isinstance(PoolBuilder(CASES).build(case, 6, "same-query"), Skip)
    assert isinstance(PoolBuilder(CASES, max_words=None).build(case, 6, "same-query"), ControlledPool)


def test_cases_that_cannot_be_built_are_counted_with_a_reason():
    pools, skips = build_pools(CASES, 5, "same-query")
    assert [p.case_id for p in pools] == ["c1"]
    reasons = {s.case_id: s.reason for s in skips}
    assert set(reasons) == {"c2", "c3"}
    assert reasons["c2"] == "only 2 same-query negatives, width 5 needs 3"
    assert reasons["c3"].startswith("fewer than m=2 answer-bearing passages with disjoint answer sets")


@pytest.mark.real_data
@pytest.mark.skipif(not ASQA.is_file(), reason=f"real ASQA pools not found at {ASQA}")
def test_real_asqa_pools_hold_the_invariants():
    from ascp.data import load_cases

    cases = load_cases(ASQA, rank_by="bm25")
    by_id = {c.id: c for c in cases}
    builder = PoolBuilder(cases, m=2, seed=0)
    for padding, width in (("off-query", 12), ("same-query", 6)):
        built = [builder.build(c, width, padding) for c in cases]
        pools = [b for b in built if isinstance(b, ControlledPool)]
        assert 20 <= len(pools) < len(cases)  # about one case in five has two disjoint answer passages
        for pool in pools:
            case = by_id[pool.case_id]
            assert len(pool.passages) == width and len(pool.necessary_ids) == 2
            a, b = (set(p.answers) for p in pool.passages if p.role == "necessary")
            assert a and b and not a & b
            for p in pool.passages:
                hits = [u for u in case.units if unit_recovered(u, f"{p.passage.title} {p.passage.text}")]
                assert bool(hits) == (p.role == "necessary")
                if padding == "same-query":
                    assert case.passage(p.id) == p.passage


# ----- statistics against hand-computed values ---------------------------------------------------
def ctx(scores, roles, answers, normalized=None, case_id="c", padding="off-query") -> Context:
    k = len(scores)
    return Context("fixed", "est", case_id, k, padding, tuple(f"d{i}" for i in range(k)), tuple(roles),
                   tuple(frozenset(a) for a in answers), np.array(scores, float),
                   np.array(normalized if normalized is not None else scores, float))


def test_auc_and_cover_at_m_by_hand():
    c = ctx([0.9, 0.1, 0.5, 0.3], ["necessary", "padding", "padding", "necessary"], [["a"], [], [], ["b"]])
    # Necessary 0.9 beats both negatives; 0.3 beats 0.1 but not 0.5: 3 of 4 pairs.
    assert context_auc(c) == 0.75
    # Top-2 = d0 (a), d2 (nothing): covers 1 of {a, b}. Random: each unit attested by 1 of 4,
    # P(in a random pair) = 1 - C(3,2)/C(4,2) = 1/2.
    assert context_cover(c, 2) == (0.5, 0.5)
    tie = ctx([0.0, 0.0, 0.0], ["necessary", "padding", "necessary"], [["a"], [], ["b"]])
    assert context_auc(tie) == 0.5


def test_random_cover_is_the_exact_expectation():
    answers = [["a"], ["b"], ["b"], [], []]
    # a: 1 of 5 attests it -> 1 - C(4,2)/C(5,2) = 0.4; b: 2 of 5 -> 1 - C(3,2)/C(5,2) = 0.7.
    assert math.isclose(random_cover(answers, {"a", "b"}, 2), 0.55)
    brute = np.mean([len({"a", "b"} & set().union(*(answers[i] for i in pair))) / 2
                     for pair in itertools.combinations(range(5), 2)])
    assert math.isclose(random_cover(answers, {"a", "b"}, 2), brute)
    assert random_cover(answers, {"a", "b"}, 5) == 1.0


def test_cluster_bootstrap_and_transfer_by_hand():
    e = clustered_mean([1.0, 1.0, 0.0], ["a", "a", "b"], null=0.0, n_boot=500)
    assert math.isclose(e["mean"], 2 / 3) and e["n_cases"] == 2 and e["n"] == 3
    assert 0.0 <= e["lo"] <= e["mean"] <= e["hi"] <= 1.0
    same = clustered_mean([0.2, 0.2, 0.2], ["a", "b", "c"], null=0.0, n_boot=200)
    assert (same["lo"], same["hi"]) == pytest.approx((0.2, 0.2)) and same["p"] < 0.01
    assert clustered_mean([math.nan], ["a"])["n"] == 0
    # Off-query padding scores 0, 0.01, ..., 0.19 (20 values): p95 = 0.1805 (linear interpolation).
    off = [ctx(list(np.arange(10) / 100), ["padding"] * 10, [[]] * 10, case_id="x"),
           ctx(list(np.arange(10, 20) / 100), ["padding"] * 10, [[]] * 10, case_id="y")]
    near = [ctx([0.5, 0.1, 0.19, 0.0], ["padding"] * 4, [[]] * 4, case_id="x", padding="same-query")]
    t = transfer(off, near, n_boot=200)
    assert math.isclose(t["threshold"], 0.1805) and t["exceedance"] == 0.5 and t["n_near_misses"] == 4


def test_summarize_and_reversal_on_synthetic_rows():
    rows = []
    for case in ("a", "b", "c"):
        for padding in ("off-query", "same-query"):
            for est in ("loo", "bm25", "qd-cosine"):
                # loo always ranks the necessary passages first; the proxies only under off-query padding.
                perfect = est == "loo" or padding == "off-query"
                scores = [0.9, 0.8, 0.1, 0.2] if perfect else [0.1, 0.2, 0.9, 0.8]
                if est == "loo" and padding == "off-query":
                    scores = [0.9, 0.3, 0.8, 0.2]  # one pair wrong: AUC 0.75
                for j, s in enumerate(scores):
                    rows.append({"protocol": "fixed", "case_id": case, "width": 4, "padding": padding,
                                 "estimator": est, "position": j, "passage_id": f"{case}{j}",
                                 "role": "necessary" if j < 2 else "padding", "answers": [f"u{j}"] if j < 2 else [],
                                 "score": s, "normalized": s / sum(scores)})
    out = summarize(rows, m=2, n_boot=200)
    aucs = {(r["estimator"], r["padding"]): r["mean"] for r in out["auc"]}
    assert aucs[("loo", "off-query")] == 0.75 and aucs[("loo", "same-query")] == 1.0
    assert aucs[("bm25", "off-query")] == 1.0 and aucs[("bm25", "same-query")] == 0.0
    gains = {(r["estimator"], r["padding"]): r for r in out["cover"] if r["width"] == "all"}
    # Random cover@2 of two single-unit necessary passages among 4: 1 - C(3,2)/C(4,2) = 0.5.
    assert gains[("loo", "same-query")]["random"] == 0.5 and gains[("loo", "same-query")]["gain"] == 0.5
    assert gains[("bm25", "same-query")]["gain"] == -0.5
    (rev,) = out["reversal"]
    assert rev["reversal"] is True
    # Paired per-case differences LOO - proxy: off-query 0.75 - 1 for both proxies, same-query 1 - 0.
    assert [d["mean"] for d in rev["diff_off"]] == [-0.25, -0.25]
    assert [d["mean"] for d in rev["diff_same"]] == [1.0, 1.0] and rev["reversal_clear"] is True
    assert reversal([]) == []
    assert {r["estimator"] for r in out["transfer"]} == {"loo", "bm25", "qd-cosine"}


# ----- the experiment with the tiny random model ---------------------------------------------------
def test_experiment_plumbing_with_the_tiny_model(tiny_lm, tmp_path):
    estimators = ("loo", "replace", "contextcite", "bm25", *COSINES)
    config = ValidationConfig(widths=(3, 5), protocols=("fixed", "free"), estimators=estimators,
                              contextcite_ablations=4, sampling=SamplingConfig(max_new_tokens=6), seed=1)
    run = run_validation(tiny_lm, CASES, CASES, config)
    assert run.cases == ["c1", "c2"] and not run.stopped_early
    # c2 has two same-query negatives: its width-5 same-query pool is skipped and reported.
    assert [(s.case_id, s.width, s.padding) for s in run.skips] == [("c2", 5, "same-query")]
    contexts = {(c["protocol"], c["case_id"], c["width"], c["padding"]) for c in run.conditions}
    assert len(contexts) == len(run.conditions) == 2 * (2 * 4 - 1)
    widths = {(c["protocol"], c["case_id"], c["width"], c["padding"]): c["width"] for c in run.conditions}
    assert len(run.rows) == len(estimators) * sum(widths.values())
    # Fixed protocol: one target per case, the same in every context; free: generated per context.
    for case in ("c1", "c2"):
        fixed = {c["response"] for c in run.conditions if c["protocol"] == "fixed" and c["case_id"] == case}
        assert len(fixed) == 1
    for c in run.conditions:
        assert set(c["seconds"]) == set(estimators) and c["response_tokens"] >= 1
    for r in run.rows:
        assert math.isfinite(r["score"]) and r["normalized"] >= 0
    summary = build_summary(run, "inline", "tiny", n_boot=100)
    out = tmp_path / "out"
    write_outputs(out, run, summary)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["figure-fixed.png", "figure-free.png", "responses.jsonl", "results.md", "scores.jsonl",
                     "summary.json"]
    text = (out / "results.md").read_text()
    assert "AUC of the necessary passages, fixed protocol" in text and "Reversal check" in text
    assert "same-query negatives" in text  # the skipped pool is reported
    # Every number can be recomputed from scores.jsonl.
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    again = summarize(rows, m=2, n_boot=100, seed=1)
    assert json.dumps(again) == json.dumps(json.loads((out / "summary.json").read_text())["metrics"])


# ----- command line ---------------------------------------------------------------------------------
def jsonl_cases(path: Path) -> Path:
    rows = [{"id": c.id, "question": c.question, "pool": [{"id": p.id, "title": p.title, "text": p.text}
                                                          for p in c.pool],
             "answers": [{"id": u.id, "aliases": list(u.aliases)} for u in c.units]} for c in CASES]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_pools_command_writes_one_line_per_case(tmp_path):
    data = jsonl_cases(tmp_path / "cases.jsonl")
    out = tmp_path / "pools.jsonl"
    res = invoke_cli(["pools", "--data", str(data), "--width", "3", "--padding", "same-query",
                                   "--seed", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["case_id"] for x in lines] == ["c1", "c2"]
    assert set(lines[0]) == {"case_id", "question", "width", "padding", "passages", "units"}
    assert set(lines[0]["passages"][0]) == {"id", "title", "text", "role", "answers"}
    assert "skipped 1 of 3 cases" in res.output


@pytest.mark.parametrize("args, message", [
    (["pools", "--width", "1", "--padding", "off-query"], "smaller than m=2"),
    (["pools", "--width", "3", "--padding", "sideways"], "unknown padding 'sideways'"),
    (["pools", "--width", "9", "--padding", "duplicates"], "no eligible case"),
    (["validate-probe", "--widths", "2,3"], "every width must exceed m"),
    (["validate-probe", "--estimators", "loo,magic"], "unknown estimator 'magic'"),
    (["validate-probe", "--protocol", "sometimes"], "unknown protocol 'sometimes'"),
    (["validate-probe", "--paddings", "off-query,sideways"], "unknown padding 'sideways'"),
    (["validate-probe", "--widths", "4", "--paddings", "duplicates", "--m", "3"], "no eligible case"),
])
def test_bad_input_is_one_sentence_exit_2_and_nothing_written(tmp_path, args, message):
    data = jsonl_cases(tmp_path / "cases.jsonl")
    out = tmp_path / ("pools.jsonl" if args[0] == "pools" else "outdir")
    res = invoke_cli([*args, "--data", str(data), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert res.output.strip().startswith("error:") and res.output.count("\n") <= 3
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_validate_probe_command_end_to_end(tiny_model_dir, tmp_path):
    data = jsonl_cases(tmp_path / "cases.jsonl")
    out = tmp_path / "val"
    res = invoke_cli([
        "validate-probe", "--data", str(data), "--out", str(out), "--model", str(tiny_model_dir),
        "--widths", "3", "--estimators", "loo,bm25", "--protocol", "fixed", "--limit", "1",
        "--max-new-tokens", "4", "--bootstrap", "100", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "1 eligible cases selected" in res.output and "wrote" in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cases"] == ["c1"] and summary["command"].startswith("ascp validate-probe")
    assert {r["estimator"] for r in summary["metrics"]["auc"]} == {"loo", "bm25"}
    assert (out / "figure-fixed.png").stat().st_size > 10_000


def test_validation_runs_on_the_users_own_prompt(tiny_lm):
    template = "Context:\n{passages}Q: {question}"
    config = ValidationConfig(widths=(3,), protocols=("fixed",), estimators=("loo",), sampling=SamplingConfig(
        max_new_tokens=4), seed=1, template=template, system="Be brief.")
    config.check()
    run = run_validation(tiny_lm, CASES, CASES, config)
    assert run.rows and config.to_json()["template"] == template
    with pytest.raises(AscpError, match="needs one {passages} slot"):
        ValidationConfig(template="{question} only").check()
