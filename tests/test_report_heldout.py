"""The held-out frame (issue 38): task positions in file order, the heldout-small preset and its
development split (disjoint, written down, the decoder chosen once by the one-standard-error rule
and frozen), Tables 10/11 with the paper's numbers, verdicts and the power statement."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from test_report import ASQA_ROOT, unit, write_store

from ascp.caching.files import describe_file
from ascp.errors import AscpError
from ascp.experiments import Condition, make_plan
from ascp.experiments.spec import parse_spec
from ascp.report import write_report
from ascp.report.tables import comparison_verdict
from ascp.reproduce import (
    DECODER,
    TABLE10,
    Development,
    choose_decoder,
    development_spec,
    frozen_spec,
    load_preset,
    preset_report,
    write_splits,
)
from ascp.stats import Estimate, detectable_effect


def cases_file(folder: Path, pools: list[int]) -> Path:
    """One JSONL case per entry, `pools[i]` passages in case i (its id names its file position)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cases.jsonl"
    lines = [json.dumps({"id": f"p{i}", "question": f"when was {i} born?", "answers": [["1850"]],
                         "pool": [{"id": f"d{j}", "text": f"born in {1850 + j}"} for j in range(n)]})
             for i, n in enumerate(pools)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def spec_with(folder: Path, **task) -> dict:
    return {"name": "pos", "tasks": [{"name": "toy", "data": str(cases_file(folder, [6, 2, 6, 6, 6, 2, 6])),
                                      "format": "jsonl", "rank_by": "given", **task}],
            "models": ["default"], "conditions": ["rotate(k=2,T=2)"], "embedder": "hashing"}


# ----- positions ------------------------------------------------------------------------------------

def test_positions_select_by_file_order_then_filter(tmp_path, monkeypatch):
    monkeypatch.setattr("ascp.lm.resolve.embedded_gguf", lambda: "x.gguf")  # `default` resolves without the wheel
    plan = make_plan(parse_spec(spec_with(tmp_path, positions="1-5", min_pool=4)))
    assert [c.id for c in plan.cases["toy"]] == ["p2", "p3", "p4"]  # 1-5 selected, then the 2-passage pools dropped
    task = plan.manifest()["tasks"][0]
    assert task["positions"] == "1-5" and task["cases"] == ["p2", "p3", "p4"]
    limited = make_plan(parse_spec(spec_with(tmp_path, positions="2-6", limit=2)))
    assert [c.id for c in limited.cases["toy"]] == ["p2", "p3"]
    single = make_plan(parse_spec(spec_with(tmp_path, positions=6)))
    assert [c.id for c in single.cases["toy"]] == ["p6"]
    assert "positions" not in make_plan(parse_spec(spec_with(tmp_path))).manifest()["tasks"][0]


def test_chunks_run_every_condition_of_a_block_before_the_next_block(tmp_path, monkeypatch):
    monkeypatch.setattr("ascp.lm.resolve.embedded_gguf", lambda: "x.gguf")
    raw = spec_with(tmp_path, positions="0-6", min_pool=4)  # p0, p2, p3, p4, p6
    raw.update(conditions=["rotate(k=2,T=2)", "vanilla(k=2,T=2)"], batch_cases=2)
    order = [(chunk.condition.policy, [c.id for c in chunk.cases]) for chunk in make_plan(parse_spec(raw)).chunks()]
    assert order == [("rotate", ["p0", "p2"]), ("vanilla", ["p0", "p2"]), ("rotate", ["p3", "p4"]),
                     ("vanilla", ["p3", "p4"]), ("rotate", ["p6"]), ("vanilla", ["p6"])]


def test_chunks_run_every_task_at_the_first_seed_before_the_second_seed(tmp_path, monkeypatch):
    monkeypatch.setattr("ascp.lm.resolve.embedded_gguf", lambda: "x.gguf")
    raw = spec_with(tmp_path, positions="0-2", min_pool=4)  # p0, p2
    raw["tasks"].append({**raw["tasks"][0], "name": "other"})
    raw.update(seeds=[0, 1], batch_cases=2)
    order = [(chunk.seed, chunk.task) for chunk in make_plan(parse_spec(raw)).chunks()]
    assert order == [(0, "toy"), (0, "other"), (1, "toy"), (1, "other")]


@pytest.mark.parametrize("value", ["5-1", "a-b", "1-", -1, [1, 2]])
def test_bad_positions_are_one_sentence_naming_the_field(tmp_path, value):
    with pytest.raises(AscpError, match=r"^spec field tasks\[0\]\.positions: expected FIRST-LAST"):
        parse_spec(spec_with(tmp_path, positions=value))


def test_positions_past_the_end_of_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr("ascp.lm.resolve.embedded_gguf", lambda: "x.gguf")
    with pytest.raises(AscpError, match=r"positions 3-9 go past the end of .* 7 items \(positions 0-6\)"):
        make_plan(parse_spec(spec_with(tmp_path, positions="3-9")))


# ----- the preset and its development split ----------------------------------------------------------

def test_table_11_by_task_shows_each_task_beside_the_equal_weight_pool(tmp_path):
    # ASQA on 10 queries with Ascp +0.10 over vanilla; HotpotQA on 3 queries with no effect. The pooled row gives
    # the two tasks equal weight; the by-task rows must recover each task's own paired mean.
    records = (frame_records({"ascp(k=5,T=5)": 0.10, "vanilla(k=5,T=5)": 0.0}, n=10, tasks=("asqa",))
               + frame_records({"ascp(k=5,T=5)": 0.0, "vanilla(k=5,T=5)": 0.0}, n=3, tasks=("hotpotqa",)))
    report = write_report(write_store(tmp_path / "run", records), n_boot=300)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    rows = {r["task"]: r for r in data["table11_ascp_k5_T5_by_task"]["data"]}
    pr = {(r["task"], r["seed"], r["case_id"], r["condition"].split("(")[0]): r["pr"] for r in records}
    for task, n in (("asqa", 10), ("hotpotqa", 3)):
        diffs = [v - pr[(t, s, q, "vanilla")] for (t, s, q, cond), v in pr.items() if t == task and cond == "ascp"]
        assert rows[task]["delta_pr_mean"] == pytest.approx(np.mean(diffs))
        assert rows[task]["queries"] == n and rows[task]["label"] == "vanilla RAG"
    assert rows["asqa"]["delta_pr_mean"] == pytest.approx(0.10, abs=0.01)
    pooled = data["table11_ascp_k5_T5"]["data"][0]
    equal_weights = (rows["asqa"]["delta_pr_mean"] + rows["hotpotqa"]["delta_pr_mean"]) / 2
    assert pooled["delta_pr_mean"] == pytest.approx(equal_weights)
    md = (report.out / "tables" / "table11_ascp_k5_T5_by_task.md").read_text(encoding="utf-8")
    assert "| hotpotqa | vanilla RAG |" in md
    one_task = write_report(write_store(tmp_path / "one", records[: 2 * 2 * 10]), n_boot=100)
    assert "table11_ascp_k5_T5" in one_task.tables and "table11_ascp_k5_T5_by_task" not in one_task.tables


@pytest.mark.skipif(not (ASQA_ROOT / "hotpotqa" / "hotpotqa_dev_distractor_ircot.jsonl").is_file(),
                    reason="the shared ASQA and HotpotQA files (../shared/data) are absent")
def test_heldout_preset_is_the_frame_of_tables_10_and_11():
    spec, development = load_preset("heldout-small", ASQA_ROOT)
    assert [(t.name, t.positions) for t in spec.tasks] == [("asqa", (145, 244)), ("hotpotqa", (292, 391))]
    assert spec.seeds == (0, 1) and {c.k for c in spec.conditions} == {5} and {c.T for c in spec.conditions} == {5}
    assert [c.policy for c in spec.conditions] == ["ascp", "ascp-exposure", "vanilla", "mmr", "rotate"]
    assert all(c.steer is None and c.estimator == "loo" for c in spec.conditions)
    assert "development:" not in spec.text  # the stored spec.yaml is a spec `ascp experiment run` reads
    # ... under the data root (--data-root), which its data paths are relative to: no folder of this machine
    assert [t["data"] for t in yaml.safe_load(spec.text)["tasks"]] == [
        "asqa/asqa_wikidpr_pools.json", "hotpotqa/hotpotqa_dev_distractor_ircot.jsonl"]
    assert parse_spec(yaml.safe_load(spec.text), data_root=ASQA_ROOT).conditions == spec.conditions
    assert development is not None and development.positions == {"asqa": "123-144", "hotpotqa": "250-291"}
    dev = development_spec(spec, development)
    assert [t.positions for t in dev.tasks] == [(123, 144), (250, 291)]
    assert [(c.steer, c.eta) for c in dev.conditions] == [(0.25, 0.1), (0.5, 0.1), (1.0, 0.1)]
    assert parse_spec(yaml.safe_load(dev.text), data_root=ASQA_ROOT).conditions == dev.conditions
    frozen = frozen_spec(spec, dev.conditions[1].name)
    assert [c.name for c in frozen.conditions] == [dev.conditions[1].name] and frozen.tasks == spec.tasks


def test_splits_are_written_and_must_be_disjoint(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.json").write_text("[]\n", encoding="utf-8")

    def plan(positions: tuple[int, int], ids: list[str]):
        data = tmp_path / "data" / "x.json"
        task = SimpleNamespace(name="asqa", data=data, positions=positions,
                               positions_text=f"{positions[0]}-{positions[1]}",
                               data_record=describe_file(data, tmp_path / "data"))
        return SimpleNamespace(spec=SimpleNamespace(tasks=(task,)), cases={"asqa": [SimpleNamespace(id=i)
                                                                                   for i in ids]})

    splits = write_splits(tmp_path, plan((145, 244), ["a", "b"]), plan((123, 144), ["c"]))
    stored = json.loads((tmp_path / "splits.json").read_text(encoding="utf-8"))
    assert stored == splits and stored["disjoint"] is True
    assert stored["tasks"]["asqa"]["test"] == {"positions": "145-244", "eligible": 2, "cases": ["a", "b"]}
    assert stored["tasks"]["asqa"]["development"]["positions"] == "123-144"
    assert stored["tasks"]["asqa"]["data"] == {"path": "x.json", "bytes": 3,
                                               "sha256": hashlib.sha256(b"[]\n").hexdigest()}
    with pytest.raises(AscpError, match="development positions 140-150 overlap the test positions 145-244"):
        write_splits(tmp_path, plan((145, 244), ["a"]), plan((140, 150), ["c"]))


DEV = Development({"toy": "0-9"}, (0.25, 0.5, 1.0), 0.1, "ascp(k=2,T=2)")


def dev_store(folder: Path, shift: dict[float, float], noise: float) -> Path:
    rng = np.random.default_rng(3)
    records = []
    for seed in (0, 1):
        for i in range(20):
            base = rng.uniform(0.2, 0.5)
            for alpha in DEV.candidates:
                records.append(unit(Condition.parse(DEV.condition(alpha)), f"q{i}", seed,
                                    base + shift[alpha] + rng.normal(0, noise)))
    return write_store(folder, records)


def test_decoder_choice_is_the_smallest_alpha_within_one_standard_error(tmp_path):
    close = choose_decoder(dev_store(tmp_path / "close", {0.25: 0.0, 0.5: 0.005, 1.0: 0.004}, 0.05), DEV, 500)
    assert close["best"] == 0.5 and close["chosen"] == 0.25  # within one SE of the best: the gentlest wins
    assert close["condition"] == DEV.condition(0.25) and all(r["within_one_se"] for r in close["candidates"])
    clear = choose_decoder(dev_store(tmp_path / "clear", {0.25: 0.0, 0.5: 0.03, 1.0: 0.10}, 0.01), DEV, 500)
    assert clear["best"] == 1.0 and clear["chosen"] == 1.0
    assert [r["within_one_se"] for r in clear["candidates"]] == [False, False, True]


def test_decoder_choice_waits_for_every_candidate(tmp_path):
    records = [unit(Condition.parse(DEV.condition(0.25)), f"q{i}", 0, 0.3) for i in range(4)]
    with pytest.raises(AscpError, match="lacks a candidate's units"):
        choose_decoder(write_store(tmp_path / "s", records), DEV, 200)


# ----- Tables 10 and 11 ---------------------------------------------------------------------------

def test_power_is_the_normal_minimum_detectable_effect():
    assert detectable_effect(0.01) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)
    assert detectable_effect(0.02, n=50, n_target=200) == pytest.approx(detectable_effect(0.01))
    assert np.isnan(detectable_effect(float("nan")))
    with pytest.raises(ValueError):
        detectable_effect(0.01, n=10)


@pytest.mark.parametrize(("mean", "q", "paper", "expected"), [
    (0.05, 0.01, (0.063, 0.0), "reproduced"),
    (0.05, 0.20, (0.063, 0.0), "same sign, n.s."),
    (-0.05, 0.01, (0.063, 0.0), "opposite sign, significant"),
    (-0.05, 0.20, (0.063, 0.0), "opposite sign"),
    (0.01, 0.50, (-0.003, 0.717), "consistent (n.s.)"),
    (-0.10, 0.001, (-0.003, 0.717), "differs"),
])
def test_comparison_verdict(mean, q, paper, expected):
    assert comparison_verdict(Estimate(mean, mean - 0.01, mean + 0.01, q, 20), q, paper) == expected


def frame_records(condition_prs: dict[str, float], n: int = 10, tasks: tuple[str, ...] = ("asqa", "hotpotqa")):
    rng = np.random.default_rng(5)
    records = []
    for task in tasks:
        for seed in (0, 1):
            for i in range(n):
                base = rng.uniform(0.1, 0.4)
                for text, shift in condition_prs.items():
                    records.append(unit(Condition.parse(text), f"q{i}", seed, base + shift + rng.normal(0, 0.01),
                                        task=task))
    return records


def test_tables_10_and_11_carry_the_paper_verdict_and_power(tmp_path):
    table11 = {"ascp(k=5,T=5)": 0.10, "ascp-exposure(k=5,T=5)": 0.09, "vanilla(k=5,T=5)": 0.0,
               "mmr(k=5,T=5)": 0.12, "rotate(k=5,T=5)": 0.10}
    steered = "ascp(k=5,T=5,steer=0.5,eta=0.1)"
    out = write_store(tmp_path / "run", frame_records(table11))
    write_store(out / TABLE10, frame_records({steered: 0.11}))
    (out / DECODER).write_text(json.dumps({"chosen": 0.5, "eta": 0.1, "condition": Condition.parse(steered).name}),
                               encoding="utf-8")
    report = preset_report("heldout-small", out, n_boot=400)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    t11 = {r["label"]: r for r in data["table11_ascp_k5_T5"]["data"]}
    assert set(t11) == {"vanilla RAG", "MMR", "deep rotation", "ascp-exposure"}
    assert t11["vanilla RAG"]["verdict"] == "reproduced" and t11["vanilla RAG"]["paper_delta_pr"] == 0.063
    assert t11["MMR"]["verdict"] == "opposite sign, significant"
    assert t11["deep rotation"]["verdict"] == "consistent (n.s.)" and t11["deep rotation"]["paper_q"] == 0.717
    assert t11["ascp-exposure"]["verdict"] == "-"  # not a row of the paper
    row = t11["vanilla RAG"]
    assert row["mde80"] == pytest.approx(2.8016 * row["delta_pr_se"], rel=1e-3)
    assert row["queries"] == 20 and row["frame_queries"] == 200
    assert row["mde80_frame"] == pytest.approx(row["mde80"] * np.sqrt(20 / 200))
    t10 = {r["label"]: r for r in data["table10_ascp_k5_T5"]["data"]}
    assert t10["Ascp without steering"]["paper_delta_pr"] == 0.009  # the frozen store joined the frame
    md = (report.out / "tables" / "table11_ascp_k5_T5.md").read_text(encoding="utf-8")
    assert "+0.063 (q <.001)" in md and "2.80 x SE" in md
    claims = {r["claim"] for r in data["claims"]["data"]}
    assert "steered Ascp beats vanilla RAG" in claims and "Ascp beats MMR (scheduler only)" in claims
    assert report.total == len(frame_records(table11)) + len(frame_records({steered: 0.11}))


def test_a_seed_run_in_parts_enters_the_tables_when_complete(tmp_path):
    """Seed 0 complete and seed 1 a third done (the frame resumed in parts): the tables read seed 0 alone,
    number for number as a store of seed 0 alone, and the page says what seed 1 holds; complete, it joins."""
    records = frame_records({"ascp(k=5,T=5)": 0.10, "vanilla(k=5,T=5)": 0.0}, n=6)
    seed0 = [r for r in records if r["seed"] == 0]
    partial = seed0 + [r for r in records if r["seed"] == 1][:8]
    store = write_store(tmp_path / "parts", partial)
    plan = json.loads((store / "plan.json").read_text(encoding="utf-8"))
    (store / "plan.json").write_text(json.dumps({**plan, "units": len(records)}), encoding="utf-8")
    report = write_report(store, n_boot=300)
    alone = write_report(write_store(tmp_path / "seed0", seed0), n_boot=300)

    def table11(folder):
        return json.loads((folder / "tables" / "tables.json").read_text(encoding="utf-8"))["table11_ascp_k5_T5"]

    assert table11(report.out)["data"] == table11(alone.out)["data"]
    page = (report.out / "index.html").read_text(encoding="utf-8")
    assert "seed 1: 8 of 24 units finished, left out until complete" in page and report.units == 32
    whole = write_report(write_store(tmp_path / "whole", records), n_boot=300)
    assert table11(whole.out)["data"] != table11(alone.out)["data"]
    assert "left out until complete" not in (whole.out / "index.html").read_text(encoding="utf-8")


def test_report_without_the_frozen_store_has_table_11_only(tmp_path):
    out = write_store(tmp_path / "run", frame_records({"ascp(k=5,T=5)": 0.1, "vanilla(k=5,T=5)": 0.0}, n=4))
    report = write_report(out, n_boot=200)
    assert "table11_ascp_k5_T5" in report.tables and "table10_ascp_k5_T5" not in report.tables


@pytest.mark.skipif(not (ASQA_ROOT / "hotpotqa" / "hotpotqa_dev_distractor_ircot.jsonl").is_file(),
                    reason="the shared ASQA and HotpotQA files (../shared/data) are absent")
def test_gpu_preset_is_the_same_frame_through_vllm():
    small, _ = load_preset("heldout-small", ASQA_ROOT)
    gpu, development = load_preset("heldout-gpu", ASQA_ROOT)
    assert development is None  # an engine decodes no lockstep streams: Table 10 runs in transformers
    assert gpu.tasks == small.tasks and gpu.seeds == small.seeds and gpu.conditions == small.conditions
    assert [s.__dict__[k] for s in (gpu.settings, small.settings) for k in ("temperature", "top_p", "top_k")] == \
        [0.7, 1.0, 0] * 2
    assert gpu.models[0].source.startswith("vllm:http://127.0.0.1:8000")


@pytest.mark.skipif(not (ASQA_ROOT / "hotpotqa" / "hotpotqa_dev_distractor_ircot.jsonl").is_file(),
                    reason="the shared ASQA and HotpotQA files (../shared/data) are absent")
def test_reproduce_checks_the_executor_before_any_work(tmp_path):
    from conftest import invoke_cli

    result = invoke_cli(["reproduce", "--preset", "heldout-small", "--out", str(tmp_path / "o"), "--data-root",
                         str(ASQA_ROOT), "--executor", "slurm"])
    assert result.exit_code == 2 and "unknown executor 'slurm'; choose one of local, ray." in result.output
    assert not (tmp_path / "o").exists()


def test_report_command_with_the_preset_joins_the_frozen_store(tmp_path):
    from conftest import invoke_cli

    steered = Condition.parse("ascp(k=5,T=5,steer=0.25,eta=0.1)").name
    out = write_store(tmp_path / "run", frame_records({"ascp(k=5,T=5)": 0.1, "vanilla(k=5,T=5)": 0.0}, n=4))
    write_store(out / TABLE10, frame_records({steered: 0.1}, n=4))
    (out / DECODER).write_text(json.dumps({"chosen": 0.25, "eta": 0.1, "condition": steered}), encoding="utf-8")
    result = invoke_cli(["report", str(out), "--preset", "heldout-small", "--n-boot", "200"])
    assert result.exit_code == 0, result.output
    assert "table10_ascp_k5_T5" in result.output and "table11_ascp_k5_T5" in result.output
    assert "alpha = 0.25" in (out / "report" / "report.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_frame_runs_development_choice_and_frozen_test_on_the_tiny_model(tmp_path, tiny_model_dir):
    """Test positions 0-3, development 4-7 of one file; the decoder is chosen on 4-7 and frozen on 0-3."""
    from ascp.reproduce import run_frame

    data = cases_file(tmp_path / "data", [6] * 8)
    spec = parse_spec({"name": "frame", "tasks": [{"name": "toy", "data": str(data), "format": "jsonl",
                                                   "rank_by": "given", "positions": "0-3"}],
                       "models": [str(tiny_model_dir)], "seeds": [0], "conditions": ["ascp(k=2,T=2)",
                                                                                     "vanilla(k=2,T=2)"],
                       "sampling": {"max_new_tokens": 4}, "embedder": "hashing", "batch_cases": 2})
    development = Development({"toy": "4-7"}, (0.5, 1.0), 0.1, "ascp(k=2,T=2)")
    out = tmp_path / "out"
    results = run_frame(spec, development, out, n_boot=200, request_cache=out / "requests.sqlite")
    assert [r.done for r in results] == [8, 8, 4]
    splits = json.loads((out / "splits.json").read_text(encoding="utf-8"))["tasks"]["toy"]
    assert splits["test"]["cases"] == ["p0", "p1", "p2", "p3"]
    assert splits["development"]["cases"] == ["p4", "p5", "p6", "p7"]
    dev_cases = {r["case_id"] for r in map(json.loads, (out / "development" / "units.jsonl").read_text().splitlines())}
    assert dev_cases == {"p4", "p5", "p6", "p7"}  # the choice never sees a test query
    choice = json.loads((out / DECODER).read_text(encoding="utf-8"))
    frozen = [json.loads(line) for line in (out / TABLE10 / "units.jsonl").read_text().splitlines()]
    assert {r["condition"] for r in frozen} == {choice["condition"]} and choice["chosen"] in (0.5, 1.0)
    assert {r["case_id"] for r in frozen} == {"p0", "p1", "p2", "p3"}
    again = run_frame(spec, development, out, n_boot=200, request_cache=out / "requests.sqlite")
    assert [r.written for r in again] == [0, 0, 0]  # every step resumes: nothing redone
    report = preset_report("heldout-small", out, n_boot=200)
    assert "table10_ascp_k2_T2" in report.tables and "table11_ascp_k2_T2" in report.tables


def test_table_11_under_other_answer_rules(tmp_path):
    """The report rescores the same portfolios from the data file: without yes/no questions, with no credit
    for a yes/no question whose portfolio says both words, and under ALCE's substring STR-EM. Three yes/no
    questions (Ascp says "yes", vanilla says "yes" and "no") and three others (Ascp "1850", vanilla "18501")."""
    data = tmp_path / "cases.jsonl"
    lines = []
    for i in range(6):
        answer = "yes" if i < 3 else "1850"
        pool = [{"id": f"q{i}-d{j}", "text": f"passage {j} of q{i}"} for j in range(4)]
        lines.append(json.dumps({"id": f"q{i}", "question": f"question {i}?", "pool": pool, "answers": [[answer]]}))
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    said = {"ascp": {True: ["Yes.", "It is so."], False: ["Born in 1850.", "A town."]},
            "vanilla": {True: ["Yes, it is.", "No."], False: ["In 18501.", "A town."]}}
    records = []
    for cond in ("ascp(k=2,T=2)", "vanilla(k=2,T=2)"):
        policy = cond.split("(")[0]
        for i in range(6):
            yes_no = i < 3
            rec = unit(Condition.parse(cond), f"q{i}", 0, 1.0 if policy == "ascp" or yes_no else 0.0, task="toy")
            for rnd, text in zip(rec["rounds"], said[policy][yes_no], strict=True):
                rnd["response"] = text
            records.append(rec)
    out = write_store(tmp_path / "run", records)
    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    plan["tasks"][0].update(data=str(data), format="jsonl")
    (out / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    report = write_report(out, n_boot=200)
    tables = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    rows = {(r["scope"], r["reading"]): r for r in tables["table11_ascp_k2_T2_answer_rules"]["data"]}
    expected = {"PR@T (the paper's rule)": (0.5, 6), "without yes/no questions": (1.0, 3),
                "yes/no: no credit when both are said": (1.0, 6), "ALCE STR-EM (substring)": (0.0, 6)}
    for scope in ("all tasks (equal weights)", "toy"):
        for reading, (delta, n) in expected.items():
            row = rows[(scope, reading)]
            assert row["delta_pr_mean"] == pytest.approx(delta) and row["queries"] == n, (scope, reading)
    md = (report.out / "tables" / "table11_ascp_k2_T2_answer_rules.md").read_text(encoding="utf-8")
    assert "ALCE's STR-EM" in md and "| toy | without yes/no questions | vanilla RAG |" in md


def test_table_11_adjusts_the_papers_rows_as_its_family_and_the_others_apart(tmp_path):
    from ascp.stats import bh_fdr

    table11 = {"ascp(k=5,T=5)": 0.10, "ascp-exposure(k=5,T=5)": 0.02, "vanilla(k=5,T=5)": 0.0,
               "mmr(k=5,T=5)": 0.08, "rotate(k=5,T=5)": 0.11}
    report = write_report(write_store(tmp_path / "run", frame_records(table11, n=12)), n_boot=400)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    t11 = {r["label"]: r for r in data["table11_ascp_k5_T5"]["data"]}
    paper_rows = ["vanilla RAG", "MMR", "deep rotation"]
    q = bh_fdr([t11[label]["delta_pr_p"] for label in paper_rows])
    for label, expected in zip(paper_rows, q, strict=True):
        assert t11[label]["q"] == pytest.approx(expected)
    assert t11["ascp-exposure"]["q"] == pytest.approx(t11["ascp-exposure"]["delta_pr_p"])  # a family of one
    caption = data["table11_ascp_k5_T5"]["caption"]
    assert "3 of the 8 of its family" in caption and "(ascp-exposure) are a family of their own" in caption
