"""The `budget` condition field (Appendix D.2, Table 17): canonical names with and without it,
one-sentence errors, the spec's budget axis, the decode budget end to end on the tiny model and in
the context-window check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ascp.errors import AscpError
from ascp.experiments import Condition, load_spec, make_plan, run_experiment
from ascp.experiments.plan import loop_config
from ascp.experiments.spec import Settings
from ascp.report import write_report

STRUCT = "rotate(k=2,T=1,instruction=integrate+structured,budget=4)"


STRUCT_NAME = "rotate(k=2,T=1,arm=rotation,estimator=loo,instruction=integrate+structured,budget=4)"


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
    # two blocks of two cases each, every condition of a block before the next block: the structured
    # response's batch at 12, then the portfolio's at 3, in each block
    assert sorted({limit for limit, _ in calls}) == [3, 12] and calls[0][0] == 12
    assert [limit for limit, _ in calls].count(12) == 2
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


