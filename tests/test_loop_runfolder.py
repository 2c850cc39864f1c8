"""The run folder reads what it writes (`ascp.records.reader.read_run`), and a missing or damaged
file is one sentence naming the file (and line)."""

from __future__ import annotations

import json

import pytest

from ascp.errors import AscpError
from ascp.loop.runfolder import RUN_FILES, write_run
from ascp.reading import Reading
from ascp.records.reader import read_records, read_run, read_summary
from ascp.types import Portfolio, Round


def _round(t: int, context: list[str], used: list[str]) -> Round:
    return Round(round=t, context=tuple(context), response=f"answer {t}", response_tokens=2,
                 reading=Reading({d: float(d in used) for d in context}, {d: float(d in used) for d in context},
                                 tuple(used), None), seconds=0.25)


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


# ----- `ascp run` on a disk that refuses the run folder -------------------------------------------

def _run(cli, tiny_model_dir, out):
    from importlib import resources

    demo = str(resources.files("ascp") / "resources" / "demo_cases.jsonl")
    return cli("run", "--data", demo, "--limit", "2", "--policy", "rotate", "--k", "2", "--T", "2", "--out", str(out),
               "--model", str(tiny_model_dir), "--max-new-tokens", "4", "--embedder", "hashing")


def test_a_full_disk_leaves_no_run_folder_and_the_rerun_after_space_returns_completes(cli, tiny_model_dir,
                                                                                      small_disk, tmp_path):
    from conftest import fill_disk

    reference = _run(cli, tiny_model_dir, tmp_path / "reference")
    assert reference.exit_code == 0, reference.output
    disk = small_disk("64k")
    filler = fill_disk(disk, leave=4096)  # one page: less than the run folder's three files need
    out = disk / "run"
    result = _run(cli, tiny_model_dir, out)
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"error: could not write {out}") and "no space is left on the device; free space or " \
        "choose another output folder, then rerun (nothing was written)." in line, line
    assert sorted(p.name for p in disk.iterdir()) == [".filler"]  # no run folder, no hidden temporary one
    filler.unlink()
    again = _run(cli, tiny_model_dir, out)
    assert again.exit_code == 0, again.output
    strip = lambda folder: [{k: v for k, v in r.items() if "seconds" not in k}  # noqa: E731 - timings vary
                            for _, r in read_records(folder / "rounds.jsonl")]
    assert strip(out) == strip(tmp_path / "reference")


def test_a_read_only_output_folder_is_one_sentence(cli, tiny_model_dir, small_disk):
    disk = small_disk("64k", read_only=True)
    result = _run(cli, tiny_model_dir, disk / "run")
    assert result.exit_code == 2, result.output
    # refused before the model is loaded or a round is run
    assert result.output.strip().splitlines()[-1] == (
        f"error: cannot write into {disk}: its file system is read-only; choose another output folder (nothing was "
        "run).")
