"""The run folder reads what it writes (`ascp.loop.runfolder.read_run`), and a missing or damaged
file is one sentence naming the file (and line)."""

from __future__ import annotations

import json

import pytest

from ascp.errors import AscpError
from ascp.loop.runfolder import RUN_FILES, read_records, read_run, read_summary, write_run
from ascp.types import Portfolio, Round


def _round(t: int, context: list[str], used: list[str]) -> Round:
    return Round(round=t, context=tuple(context), response=f"answer {t}", response_tokens=2,
                 scores={d: float(d in used) for d in context}, normalized={d: float(d in used) for d in context},
                 used=tuple(used), seconds=0.25)


@pytest.fixture()
def written(tmp_path):
    portfolios = [Portfolio(case_id=cid, policy="rotate", rounds=(_round(1, ["a", "b"], ["a"]),
                                                                   _round(2, ["c", "b"], []))) for cid in ("c1", "c2")]
    rows = [{"case_id": p.case_id, "policy": "rotate", "ecr": 0.5 * i} for i, p in enumerate(portfolios)]
    summary = write_run(tmp_path / "run", [], portfolios, rows, {"policy": "rotate", "data": "x.jsonl"})
    return tmp_path / "run", portfolios, rows, summary


def test_read_run_gives_back_what_write_run_wrote(written):
    folder, portfolios, rows, summary = written
    run = read_run(folder)
    assert run.summary == summary and run.config["policy"] == "rotate" and run.cases == rows
    assert [n for n, _ in run.records] == [1, 2, 3, 4]
    assert run.rounds() == {p.case_id: list(p.rounds) for p in portfolios}


def test_missing_and_damaged_files_are_one_sentence_naming_the_file(written):
    folder, *_ = written
    (folder / "cases.jsonl").unlink()
    with pytest.raises(AscpError, match=r"holds no run \(cases.jsonl missing\)"):
        read_run(folder)
    with pytest.raises(AscpError, match=r"holds no run \(rounds.jsonl, cases.jsonl, summary.json missing\)"):
        read_run(folder / "nope")
    (folder / "cases.jsonl").write_text('{"case_id": "c1"}\n\n{"case_id": \n', encoding="utf-8")
    with pytest.raises(AscpError, match=r"cases.jsonl:3 is not valid JSON"):
        read_run(folder)
    (folder / "cases.jsonl").write_text('[1, 2]\n', encoding="utf-8")
    with pytest.raises(AscpError, match=r"cases.jsonl:1 is a JSON list, not a record of a run"):
        read_records(folder / "cases.jsonl")
    (folder / "summary.json").write_text("[]", encoding="utf-8")
    with pytest.raises(AscpError, match=r"summary.json is not the summary of a run"):
        read_summary(folder)


def test_a_round_record_of_another_format_names_its_line(written):
    folder, *_ = written
    lines = (folder / "rounds.jsonl").read_text(encoding="utf-8").splitlines()
    lines[2] = json.dumps({"case_id": "c2", "round": 1, "passages": ["a"]})
    (folder / "rounds.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = read_run(folder)  # the files parse; the record is read when the rounds are asked for
    with pytest.raises(AscpError, match=r"is not a run folder this version of ascp reads \(.*rounds.jsonl:3: KeyError"):
        run.rounds()
    assert set(RUN_FILES) == {p.name for p in folder.iterdir()}
