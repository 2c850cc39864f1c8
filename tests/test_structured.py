"""The structured single response (Appendix D.2, Table 17): the `budget` condition field, the
structured instructions, the decode budget end to end on the tiny model, and `table17_structured`
with known gaps on hand-built records."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from ascp.errors import AscpError
from ascp.experiments import Condition, load_spec, make_plan, run_experiment
from ascp.experiments.execute import loop_config
from ascp.experiments.spec import Settings
from ascp.lm.prompts import INSTRUCTIONS, STRUCTURED, PromptTemplate, base_instruction, is_structured
from ascp.report import write_report
from ascp.report.build import build_tables
from ascp.report.frame import unit_frame
from ascp.report.replication import instruction_table, structured_table
from ascp.types import Passage

STRUCT = "rotate(k=2,T=1,instruction=integrate+structured,budget=4)"
STRUCT_NAME = "rotate(k=2,T=1,arm=rotation,estimator=loo,instruction=integrate+structured,budget=4)"


# ----- the condition ------------------------------------------------------------------------------

def test_names_round_trip_with_and_without_budget():
    structured = Condition.parse(STRUCT)
    assert structured.name == STRUCT_NAME and structured.budget == 4
    assert Condition.parse(structured.name) == structured
    assert structured.fields()["budget"] == 4 and structured.fields()["condition"] == STRUCT_NAME
    plain = Condition.parse("rotate(k=2,T=12)")
    assert plain.budget is None and plain.name == "rotate(k=2,T=12,arm=rotation,estimator=loo,instruction=commit)"
    assert "budget" not in plain.fields()  # records of every earlier condition are unchanged
    assert Condition.parse("rotate(k=2,T=12,budget=none)") == plain
    steered = Condition.parse("vanilla(k=5,T=1,steer=0.5,budget=12,instruction=commit+structured)")
    assert steered.name == ("vanilla(k=5,T=1,arm=fixed,estimator=loo,instruction=commit+structured,budget=12,"
                            "steer=0.5,eta=0.1)")
    assert Condition.parse(steered.name) == steered
    # a structured instruction without a budget is one round's tokens, and stays out of the name
    assert "budget" not in Condition.parse("rotate(k=2,T=1,instruction=commit+structured)").name


@pytest.mark.parametrize(("text", "message"), [
    ("rotate(k=2,T=5,instruction=integrate+structured,budget=5)", "is one generation, got T=5"),
    ("rotate(k=2,T=1,instruction=integrate+structured,budget=0)", "at least 1, got 0"),
    ("rotate(k=2,T=1,instruction=integrate+structured,budget=two)", "at least 1, got 'two'"),
    ("rotate(k=2,T=1,instruction=commit,budget=4)", "applies to a structured instruction"),
])
def test_bad_budget_is_one_sentence_naming_the_field(text, message):
    with pytest.raises(AscpError) as info:
        Condition.parse(text)
    assert str(info.value).startswith("condition field budget: ") and message in str(info.value)
    assert "\n" not in str(info.value) and str(info.value).endswith(".")


# ----- specs and the decode budget on the tiny model ---------------------------------------------

def write_spec(folder: Path, model_dir: Path, conditions: list, max_new_tokens: int = 3) -> Path:
    """Four cases of six passages each (as in test_experiments), hashing embedder."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = [{"id": f"c{i}", "question": f"when was author c{i} born?",
              "pool": [{"id": f"d{j}", "title": "T", "text": f"born in {1850 + j} near the river c{i}"}
                       for j in range(6)],
              "answers": [["1850"], ["1853"]]} for i in range(4)]
    (folder / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    spec = {"name": "structured", "tasks": [{"name": "toy", "data": "cases.jsonl", "format": "jsonl"}],
            "models": [str(model_dir)], "seeds": [0], "conditions": conditions,
            "sampling": {"max_new_tokens": max_new_tokens, "temperature": 1.0}, "embedder": "hashing",
            "batch_cases": 2}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(("condition", "message"), [
    ({"policy": "rotate", "k": 2, "T": 5, "instruction": "integrate+structured", "budget": 5},
     "spec field conditions[0].budget: a budgeted structured response is one generation, got T=5"),
    ({"policy": "rotate", "k": 2, "T": 1, "instruction": "integrate+structured", "budget": 0},
     "spec field conditions[0].budget: expected an integer of at least 1, got 0"),
    ("rotate(k=2,T=5,instruction=commit+structured,budget=5)", "spec field conditions[0]: condition field budget"),
])
def test_spec_errors(tmp_path, tiny_model_dir, condition, message):
    with pytest.raises(AscpError, match=re.escape(message)):
        load_spec(write_spec(tmp_path, tiny_model_dir, [condition]))


def test_spec_grid_budget_axis(tmp_path, tiny_model_dir):
    path = write_spec(tmp_path, tiny_model_dir, [])
    raw = yaml.safe_load(path.read_text())
    del raw["conditions"]
    raw["grid"] = {"policy": "rotate", "k": [2, 3], "T": 1, "instruction": "commit+structured", "budget": [4, None]}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    names = [c.name for c in load_spec(path).conditions]
    assert names == [f"rotate(k={k},T=1,arm=rotation,estimator=loo,instruction=commit+structured{b})"
                     for k in (2, 3) for b in (",budget=4", "")]
    raw["grid"]["T"] = [1, 2]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(AscpError, match=r"^spec field grid.budget: .* got T=2; set T=1 or drop budget\.$"):
        load_spec(path)


def test_the_generation_budget_is_max_new_tokens_times_budget(tmp_path, tiny_model_dir, monkeypatch):
    import ascp.loop.portfolios

    settings = Settings(max_new_tokens=3)
    assert loop_config(Condition.parse(STRUCT), 0, settings).sampling.max_new_tokens == 12
    assert loop_config(Condition.parse("rotate(k=2,T=4)"), 0, settings).sampling.max_new_tokens == 3
    path = write_spec(tmp_path, tiny_model_dir, [STRUCT, "rotate(k=2,T=4,instruction=integrate)"])
    plan = make_plan(load_spec(path))
    assert plan.manifest()["conditions"] == [STRUCT_NAME, "rotate(k=2,T=4,arm=rotation,estimator=loo,"
                                                          "instruction=integrate)"]
    plain = make_plan(load_spec(write_spec(tmp_path / "plain", tiny_model_dir, ["rotate(k=2,T=4)"])))
    manifest = plain.manifest()  # plans (and so stores) of earlier specs are unchanged: they still resume
    assert manifest["conditions"] == ["rotate(k=2,T=4,arm=rotation,estimator=loo,instruction=commit)"]
    assert "budget" not in json.dumps(manifest["settings"])
    calls: list[tuple[int, int]] = []  # (max_new_tokens, longest generation) per generation batch
    real = ascp.loop.portfolios.generate_steered

    def spy(lm, items, sampling, *args):
        gens = real(lm, items, sampling, *args)
        calls.append((sampling.max_new_tokens, max(len(g.token_ids) for g in gens)))
        return gens

    monkeypatch.setattr(ascp.loop.portfolios, "generate_steered", spy)
    out = tmp_path / "run"
    run_experiment(plan.spec, out, plan=plan)
    records = [json.loads(line) for line in (out / "units.jsonl").read_text().splitlines()]
    structured = [r for r in records if r["condition"] == STRUCT_NAME]
    portfolio = [r for r in records if r["condition"] != STRUCT_NAME]
    assert len(structured) == len(portfolio) == 4
    assert all(r["budget"] == 4 and len(r["rounds"]) == 1 for r in structured)
    assert all("budget" not in r for r in portfolio)
    # two chunks of two cases each: the structured response's 2 batches at 12, then the portfolio's at 3
    assert sorted({limit for limit, _ in calls}) == [3, 12] and calls[0][0] == calls[1][0] == 12
    assert all(longest <= limit for limit, longest in calls)
    assert max(longest for limit, longest in calls if limit == 12) > 3  # the random model runs past one round
    report = write_report(out, n_boot=200)
    assert "table17_structured" in report.tables
    table = json.loads((report.out / "tables" / "tables.json").read_text())["table17_structured"]
    assert [(d["instruction"], d["portfolio_instruction"], d["k"], d["T"], d["gap_n"]) for d in table["data"]] == [
        ("integrate", "integrate", 2, 4, 4)]


def test_the_budget_counts_in_the_context_window_check(tmp_path, tiny_model_dir):
    """The loop's existing check_fits sees prompt + budget x max_new_tokens (the tiny window is 4096)."""
    path = write_spec(tmp_path, tiny_model_dir, ["rotate(k=2,T=1,instruction=commit+structured,budget=1000)"],
                      max_new_tokens=5)
    with pytest.raises(AscpError, match=r"the response \(5000 tokens\) exceed the model's context window of 4096"):
        run_experiment(path, tmp_path / "run")


# ----- the prompt ---------------------------------------------------------------------------------

def test_structured_prompt_contains_the_instruction_and_the_control(tiny_lm):
    for base in ("commit", "integrate"):
        name = f"{base}+structured"
        assert is_structured(name) and base_instruction(name) == base and not is_structured(base)
        assert INSTRUCTIONS[name] == INSTRUCTIONS[base] + " " + STRUCTURED
        template = loop_config(Condition.parse(f"rotate(k=2,T=1,instruction={name},budget=3)"), 0,
                               Settings()).template
        assert template == PromptTemplate.named(name)
        passages = (Passage(id="wiki:7", title="A", text="Born in 1850."), Passage(id="p2", title="", text="x"))
        text = tiny_lm.encode_prompt("When was A born?", passages, template).text
        assert INSTRUCTIONS[base] in text and STRUCTURED in text
        assert "stop" in STRUCTURED.lower() and "pad" in STRUCTURED and "passage id" in STRUCTURED


# ----- Table 17 on hand-built records -------------------------------------------------------------

def unit(text: str, query: str, pr: float, seed: int = 0) -> dict:
    """A unit record with the fields the report reads (rounds carry no probe scores)."""
    cond = Condition.parse(text)
    rounds = [{"round": t + 1, "context": [f"{query}-d{t * cond.k + j}" for j in range(cond.k)], "response": "w",
               "response_tokens": 1, "scores": {}, "normalized": {}, "used": [], "steered": False, "overused": 0,
               "seconds": 0.1, "prompt_tokens": 10, "generation_seconds": 0.05} for t in range(cond.T)]
    return {"task": "toy", "model": "m", "seed": seed, "case_id": query, **cond.fields(), "pr": pr,
            "best_single": pr, "ecr": 0.5, "offered": float(cond.k * cond.T), "used": 1.0, "groundedness": 0.5,
            "distinct_1": 0.5, "distinct_2": 0.5, "distinct_3": 0.5, "self_bleu": 0.1, "semantic_diversity": math.nan,
            "concentration": 0.2, "pool": [], "seconds": 1.0, "rounds": rounds}


# condition -> PR offset over the query's base: gaps are exact differences of these
OFFSETS = {
    "rotate(k=2,T=4)": 0.20, "rotate(k=2,T=4,instruction=integrate)": 0.25,
    "rotate(k=2,T=1,instruction=commit+structured,budget=4)": 0.0,
    "rotate(k=2,T=1,instruction=integrate+structured,budget=4)": 0.05,
    "vanilla(k=2,T=1,instruction=integrate+structured,budget=4)": 0.05,  # the same top k: no second row
    "rotate(k=5,T=4)": 0.30, "rotate(k=5,T=1,instruction=commit+structured,budget=4)": 0.22,
    "rotate(k=2,T=1)": -0.10,  # unbudgeted: not a structured response
    "rotate(k=2,T=5)": 0.40,  # T differs from every budget: unmatched
    "vanilla(k=2,T=4)": 0.10,  # the fixed arm is no portfolio here
    "rotate(k=2,T=4,estimator=bm25)": 0.50,  # another probe: unmatched
}


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(3)
    records = []
    for seed in (0, 1):
        for i in range(10):
            base = float(rng.uniform(0.1, 0.4))
            records += [unit(text, f"q{i}", base + offset, seed) for text, offset in OFFSETS.items()]
    return unit_frame(records)


def test_table17_gives_the_exact_gaps(frame):
    table = structured_table(frame, np.random.default_rng(0), 300)
    assert table is not None and table.key == "table17_structured"
    got = [(d["instruction"], d["portfolio_instruction"], d["k"], d["T"], d["gap_n"], round(d["gap_mean"], 10))
           for d in table.data]
    assert got == [("commit", "commit", 2, 4, 20, 0.2), ("commit", "integrate", 2, 4, 20, 0.25),
                   ("commit", "commit", 5, 4, 20, 0.08),
                   ("integrate", "commit", 2, 4, 20, 0.15), ("integrate", "integrate", 2, 4, 20, 0.2)]
    for d in table.data:  # a constant paired difference: the interval is the point, p at the floor
        assert d["gap_lo"] == pytest.approx(d["gap_mean"]) and d["gap_hi"] == pytest.approx(d["gap_mean"])
        assert d["pr_portfolio"] - d["pr_structured"] == pytest.approx(d["gap_mean"])
        assert d["structured"].startswith("rotate(")  # rotation's S is kept when both arms ran
    assert table.header == ["instruction", "portfolio instruction", "k", "T", "n", "portfolio PR@T",
                            "structured PR", "gap", "95% CI"]
    assert table.rows[0][:5] == ["commit", "commit", "2", "4", "20"] and table.rows[0][7] == "+0.200†"
    assert table.rows[0][8] == "[+0.200, +0.200]"


def test_table17_registered_after_table16_and_absent_without_a_pair(frame):
    keys = [t.key for t in build_tables(frame, np.random.default_rng(0), 200)]
    assert keys.index("table17_structured") == keys.index("table16_instruction") + 1
    plain = frame[frame["budget"].isna()].drop(columns="budget")
    assert structured_table(plain, np.random.default_rng(0), 200) is None  # no budget column at all
    unmatched = frame[~frame["condition"].str.startswith("rotate(k=2,T=4,")]
    unmatched = unmatched[~unmatched["condition"].str.startswith("rotate(k=5,")]
    assert structured_table(unmatched, np.random.default_rng(0), 200) is None


def test_table16_pairs_unsteered_cells_and_leaves_structured_out(frame):
    """Table 16's keys hold steer/eta = NaN for ordinary decoding; they must still match each other."""
    table = instruction_table(frame, np.random.default_rng(0), 200)
    assert table is not None
    assert [(d["k"], d["T"], round(d["delta_mean"], 10)) for d in table.data] == [(2, 4, 0.05)]
