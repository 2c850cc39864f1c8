"""`ascp.records.read_results`: one reader over a run folder, an experiment store and a validate-probe
folder, each written by its own command; one duplicate rule for all; a damaged or unknown folder is
one sentence; `ascp view`, `ascp export` and `ascp report` through it."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import invoke_cli

from ascp.errors import AscpError
from ascp.records import KINDS, read_results
from ascp.types import Portfolio, Round

CASES = [
    {"id": "c1", "question": "When was Canberra made the capital?",
     "pool": [{"id": "c1-0", "title": "Canberra", "text": "Canberra was named in 1913."},
              {"id": "c1-1", "title": "Parliament", "text": "Parliament moved to Canberra in 1927."},
              {"id": "c1-2", "title": "City", "text": "Canberra is a planned city."},
              {"id": "c1-3", "title": "Capital", "text": "The capital city has many names."}],
     "answers": [{"id": "u0", "aliases": ["1913"]}, {"id": "u1", "aliases": ["1927"]}]},
    {"id": "c2", "question": "Who wrote the novel and when?",
     "pool": [{"id": "c2-0", "title": "Poets", "text": "Percy edited the novel."},
              {"id": "c2-1", "title": "Frankenstein", "text": "The novel by Mary Shelley appeared in 1818."},
              {"id": "c2-2", "title": "River", "text": "The small town near the river has a lighthouse."},
              {"id": "c2-3", "title": "Harbour", "text": "The harbour of the city was built in 1899."}],
     "answers": [{"id": "u0", "aliases": ["Mary Shelley"]}, {"id": "u1", "aliases": ["1818"]}]},
]


def _ok(result) -> None:
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def folders(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """One folder of each kind, written by `ascp run`, `ascp experiment run` and `ascp validate-probe`."""
    root = tmp_path_factory.mktemp("results")
    data = root / "cases.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    _ok(invoke_cli(["run", "--data", data, "--policy", "rotate", "--k", "2", "--T", "2", "--out", root / "run",
                    "--model", tiny_model_dir, "--max-new-tokens", "4", "--embedder", "hashing"]))
    spec = {"name": "tiny", "tasks": [{"name": "toy", "data": str(data), "format": "jsonl"}],
            "models": [str(tiny_model_dir)], "seeds": [0],
            "grid": {"policy": ["rotate", "vanilla"], "k": [2], "T": [2]},
            "sampling": {"max_new_tokens": 4}, "embedder": "hashing"}
    (root / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    _ok(invoke_cli(["experiment", "run", root / "spec.yaml", "--out", root / "store"]))
    _ok(invoke_cli(["validate-probe", "--data", data, "--out", root / "vp", "--model", tiny_model_dir,
                    "--widths", "3", "--estimators", "loo,bm25", "--protocol", "fixed", "--limit", "1",
                    "--max-new-tokens", "4", "--bootstrap", "100", "--device", "cpu"]))
    return {"run": root / "run", "store": root / "store", "validate-probe": root / "vp", "data": data}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_one_reader_gives_the_units_of_a_run_folder_and_a_store_and_the_scores_of_a_validation(folders):
    run = read_results(folders["run"])
    summary = json.loads((folders["run"] / "summary.json").read_text())
    assert run.kind == "run" and run.summary == summary and run.config == summary["config"]
    assert [u.case_id for u in run.units] == ["c1", "c2"] and run.conditions == (summary["config"]["policy"],)
    recorded = _lines(folders["run"] / "rounds.jsonl")
    assert [r for u in run.units for r in u.rounds] == [Round.from_json(r) for r in recorded]
    assert run.sources == {"": (str(folders["data"]), "auto")}
    first = run.units[0].portfolio()
    assert isinstance(first, Portfolio) and first.policy == run.conditions[0] and "ecr" in first.metrics

    store = read_results(folders["store"])
    plan = json.loads((folders["store"] / "plan.json").read_text())
    units = _lines(folders["store"] / "units.jsonl")
    assert store.kind == "store" and store.config == plan and store.summary == {}
    assert [tuple(u.key) for u in store.units] == [tuple(r[k] for k in ("task", "model", "seed", "case_id",
                                                                        "condition")) for r in units]
    assert set(store.conditions) == set(plan["conditions"]) and len(store.conditions) == 2
    assert store.units[0].rounds == tuple(Round.from_json(r) for r in units[0]["rounds"])
    assert store.records()[0] == units[0] and store.sources == {"toy": (str(folders["data"]), "jsonl")}
    assert list(store.groups()) == list(store.conditions)  # one task, model and seed: labels are the conditions

    vp = read_results(folders["validate-probe"])
    assert vp.kind == "validate-probe" and vp.units == () and vp.conditions == ("loo", "bm25")
    assert list(vp.scores) == _lines(folders["validate-probe"] / "scores.jsonl")
    assert vp.config == json.loads((folders["validate-probe"] / "summary.json").read_text())["config"]
    assert {r.kind for r in (run, store, vp)} <= set(KINDS)


def _append(path: Path, line: dict) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def test_a_duplicate_key_keeps_its_first_record_in_every_kind(folders, tmp_path):
    copies = {kind: shutil.copytree(folders[kind], tmp_path / kind) for kind in ("run", "store", "validate-probe")}
    before = {kind: read_results(folders[kind]) for kind in copies}
    # a later copy of a case row, a round, a unit and a score row, each with a different value
    run = copies["run"]
    _append(run / "cases.jsonl", {**_lines(run / "cases.jsonl")[0], "ecr": -1.0})
    _append(run / "rounds.jsonl", {**_lines(run / "rounds.jsonl")[0], "response": "a later copy"})
    store = copies["store"] / "units.jsonl"
    _append(store, {**_lines(store)[0], "ecr": -1.0})
    scores = copies["validate-probe"] / "scores.jsonl"
    _append(scores, {**_lines(scores)[0], "score": -1.0})
    after = {kind: read_results(folder) for kind, folder in copies.items()}
    for kind in ("run", "store"):
        assert [(u.key, u.rounds, u.record) for u in after[kind].units] == \
            [(u.key, u.rounds, u.record) for u in before[kind].units], kind
    assert after["validate-probe"].scores == before["validate-probe"].scores
    # the consumers read the same units (the replay consumer of the store sees one unit per case)
    from ascp.loop.consumers import make_consumer

    condition = before["store"].conditions[0]
    replay = make_consumer(f"replay(run={copies['store']},condition={condition})")
    assert set(replay.rounds) == {"c1", "c2"}


def _one_sentence(path, match: str, **kwargs) -> str:
    with pytest.raises(AscpError, match=match) as caught:
        read_results(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and message.endswith("."), message
    return message


def test_an_unknown_incomplete_or_damaged_folder_is_one_sentence(folders, tmp_path):
    (tmp_path / "empty").mkdir()
    _one_sentence(tmp_path / "empty", r"holds no run: it holds neither rounds.jsonl .* units.jsonl .* scores.jsonl")
    _one_sentence(tmp_path / "absent", "is not a folder")
    _one_sentence(tmp_path / "empty", r"not an experiment run store \(no plan.json\)", kinds=("store",))
    _one_sentence(folders["run"], r"is an `ascp run` folder, not an experiment run store", kinds=("store",))

    run = shutil.copytree(folders["run"], tmp_path / "run")
    (run / "cases.jsonl").unlink()
    _one_sentence(run, r"holds no run \(cases.jsonl missing\)")
    shutil.copy(folders["run"] / "cases.jsonl", run / "cases.jsonl")
    lines = (run / "rounds.jsonl").read_text().splitlines()
    (run / "rounds.jsonl").write_text("\n".join([lines[0], '{"case_id": "c1", "round": 2}', *lines[2:]]) + "\n")
    _one_sentence(run, r"rounds.jsonl:2: KeyError")

    store = shutil.copytree(folders["store"], tmp_path / "store")
    units = (store / "units.jsonl").read_text().splitlines()
    (store / "units.jsonl").write_text("\n".join(["{not json", *units[1:]]) + "\n")
    _one_sentence(store, r"units.jsonl line 1 is not a unit record; the store is damaged")
    old = json.loads(units[0])
    del old["rounds"][0]["response"]
    (store / "units.jsonl").write_text("\n".join([json.dumps(old), *units[1:]]) + "\n")
    _one_sentence(store, r"units.jsonl:1 is not a unit record this version of ascp reads \(KeyError")
    (store / "plan.json").unlink()
    _one_sentence(store, r"is not an experiment run store \(no plan.json\)")

    vp = shutil.copytree(folders["validate-probe"], tmp_path / "vp")
    rows = (vp / "scores.jsonl").read_text().splitlines()
    bad = {k: v for k, v in json.loads(rows[1]).items() if k != "role"}
    (vp / "scores.jsonl").write_text("\n".join([rows[0], json.dumps(bad), *rows[2:]]) + "\n")
    _one_sentence(vp, r"scores.jsonl:2 is not a score row of `ascp validate-probe` \(KeyError: 'role'\)")


def test_view_and_export_take_an_experiment_store(folders, tmp_path, cli):
    store = read_results(folders["store"])
    page = tmp_path / "view.html"
    _ok(cli("view", folders["store"], "--out", page))
    html = page.read_text(encoding="utf-8")
    assert all(name in html for name in store.conditions) and "When was Canberra made the capital?" in html
    rounds = sum(len(u.rounds) for u in store.units)
    assert html.count("<tr data-attribution=") == rounds  # every round of every unit is a row
    _ok(cli("export", folders["store"], "--out", tmp_path / "trec"))
    trec = tmp_path / "trec"
    assert sorted(p.name for p in trec.iterdir()) == sorted([*(f"{c}.run" for c in store.conditions),
                                                              "qrels.txt", "units.qrels"])
    for condition in store.conditions:
        lines = (trec / f"{condition}.run").read_text().splitlines()
        shown = sum(len(r.context) for u in store.units if u.condition == condition for r in u.rounds)
        assert len(lines) == shown and all(line.split()[0].startswith("toy/") for line in lines)
    # the run folder's export is as before: one system (its policy), queries <case>/<round>
    _ok(cli("export", folders["run"], "--out", tmp_path / "trec-run"))
    (system,) = [p.name for p in (tmp_path / "trec-run").glob("*.run")]
    assert system == f"{read_results(folders['run']).conditions[0]}.run"


def test_a_command_given_the_wrong_kind_says_so_in_one_sentence(folders, tmp_path, cli):
    report = cli("report", folders["run"], "--out", tmp_path / "report")
    assert report.exit_code == 2 and "is an `ascp run` folder, not an experiment run store (a report" in report.output
    assert "Traceback" not in report.output and not (tmp_path / "report").exists()
    view = cli("view", folders["validate-probe"], "--out", tmp_path / "v.html")
    assert view.exit_code == 2 and "is an `ascp validate-probe` folder, not" in view.output
    calibrate = cli("calibrate", "--validation", folders["store"], "--out", tmp_path / "cal")
    assert calibrate.exit_code == 2 and "is an experiment run store, not an `ascp validate-probe` folder" in \
        calibrate.output


def test_the_results_package_imports_nothing_above_it():
    """It sits below every stage that reads results (the loop's consumers included): its modules
    import only the root's value types and utilities, and each other."""
    allowed = {"ascp.errors", "ascp.jsonio", "ascp.types", "ascp.records", "ascp.records.format",
               "ascp.records.reader"}
    folder = Path(__file__).resolve().parents[1] / "src" / "ascp" / "results"
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ascp"):
                assert node.module in allowed, (path.name, node.module)
