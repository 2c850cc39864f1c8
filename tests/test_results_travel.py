"""Results that travel (issue 54, item 4): a data file recorded by its path under the data root, SHA-256 and
size; a resume checks the bytes, not the folder; `ascp experiment relocate` rewrites older stores; no
committed result names a folder of the machine it ran on; the held-out README quotes its report."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import invoke_cli
from test_experiments import write_spec

from ascp.caching import files
from ascp.caching.files import describe_file, locate_file, same_content
from ascp.errors import AscpError
from ascp.experiments import load_spec, make_plan
from ascp.experiments.spec import stored_text
from ascp.experiments.store import RunStore

REPO = Path(__file__).resolve().parents[1]


def test_a_data_file_is_described_by_its_path_under_the_root_its_hash_and_size(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "asqa").mkdir(parents=True)
    data = root / "asqa" / "pools.json"
    data.write_bytes(b'{"a": 1}\n')
    assert describe_file(data, root) == {"path": "asqa/pools.json", "bytes": 9,
                                         "sha256": hashlib.sha256(b'{"a": 1}\n').hexdigest()}
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: reads.append(a[0]) or real_open(*a, **k))
    describe_file(data, root)
    assert reads == []  # hashed once per process per (path, size, mtime)
    other = tmp_path / "elsewhere"
    shutil.copytree(root, other)
    found = locate_file(describe_file(data, root), other)
    assert found == other / "asqa" / "pools.json" and same_content(describe_file(data, root), found)
    assert files.relative_path(data, tmp_path / "data" / "asqa") == "pools.json"


def _store(tmp_path: Path, model_dir: Path) -> tuple[Path, Path, Path]:
    """(a spec whose data lies under data root A, root A, a store begun from it, without model work)."""
    spec = write_spec(tmp_path / "spec", model_dir)
    root = tmp_path / "rootA"
    root.mkdir()
    shutil.move(spec.parent / "cases.jsonl", root / "cases.jsonl")
    store = tmp_path / "store"
    plan = make_plan(load_spec(spec, data_root=root))
    with RunStore(store) as s:
        s.begin(plan.manifest(), stored_text(plan.spec), {t.name: t.data for t in plan.spec.tasks})
    return spec, root, store


def test_a_store_records_the_data_file_relative_to_the_root_with_its_hash(tmp_path, tiny_model_dir):
    spec, root, store = _store(tmp_path, tiny_model_dir)
    task = json.loads((store / "plan.json").read_text(encoding="utf-8"))["tasks"][0]
    assert task["data"] == describe_file(root / "cases.jsonl", root)
    assert task["data"]["path"] == "cases.jsonl"
    assert yaml.safe_load((store / "spec.yaml").read_text(encoding="utf-8"))["tasks"][0]["data"] == "cases.jsonl"


def test_a_store_resumes_from_another_data_root_holding_the_same_bytes(tmp_path, tiny_model_dir):
    spec, root, store = _store(tmp_path, tiny_model_dir)
    other = tmp_path / "another-machine"
    shutil.copytree(root, other)
    shutil.rmtree(root)
    plan = make_plan(load_spec(spec, data_root=other))
    with RunStore(store) as s:  # no refusal: the plan compares equal, the data by its bytes
        s.begin(plan.manifest(), "", {t.name: t.data for t in plan.spec.tasks})


def test_a_resume_on_another_file_is_refused_in_one_sentence(tmp_path, tiny_model_dir):
    spec, root, store = _store(tmp_path, tiny_model_dir)
    data = root / "cases.jsonl"
    data.write_text(data.read_text(encoding="utf-8").replace("river", "rivers"), encoding="utf-8")
    before = (store / "plan.json").read_bytes()
    result = invoke_cli(["experiment", "run", spec, "--out", store, "--data-root", root])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    message = " ".join(lines)
    assert message.startswith("error: task toy: ") and message.count(". ") == 0, message
    new = hashlib.sha256(data.read_bytes()).hexdigest()
    assert f"SHA-256 {new[:12]}" in message and "pass the data file it was run on, or a new --out." in message
    assert (store / "plan.json").read_bytes() == before


def _legacy(store: Path) -> None:
    """The store as ascp wrote it before data files were described: absolute paths in plan and spec."""
    plan = json.loads((store / "plan.json").read_text(encoding="utf-8"))
    absolute = str((store.parent / "rootA" / "cases.jsonl").resolve())
    plan["tasks"][0]["data"] = absolute
    (store / "plan.json").write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    spec = (store / "spec.yaml").read_text(encoding="utf-8").replace("data: cases.jsonl", f"data: {absolute}")
    (store / "spec.yaml").write_text(spec, encoding="utf-8")
    (store / "units.jsonl").write_text('{"task": "toy", "pr": 0.25}\n', encoding="utf-8")


def test_relocate_rewrites_an_older_store_idempotently_and_changes_no_number(tmp_path, tiny_model_dir):
    spec, root, store = _store(tmp_path, tiny_model_dir)
    expected = {p.name: p.read_bytes() for p in (store / "plan.json", store / "spec.yaml")}
    _legacy(store)
    units = (store / "units.jsonl").read_bytes()
    moved = tmp_path / "moved-root"
    shutil.copytree(root, moved)
    with pytest.raises(AscpError, match=r"names its data file by the absolute path .*ascp experiment relocate"):
        plan = make_plan(load_spec(spec, data_root=moved))
        with RunStore(store) as s:
            s.begin(plan.manifest(), "", {t.name: t.data for t in plan.spec.tasks})
    first = invoke_cli(["experiment", "relocate", store, "--data-root", moved])
    assert first.exit_code == 0, first.output
    after = {p.name: p.read_bytes() for p in (store / "plan.json", store / "spec.yaml")}
    assert after == expected  # what a new store writes: relative path, SHA-256, size
    assert (store / "units.jsonl").read_bytes() == units
    second = invoke_cli(["experiment", "relocate", store, "--data-root", moved])
    assert second.exit_code == 0 and "rewrote 0 files" in second.output
    assert {p.name: p.read_bytes() for p in (store / "plan.json", store / "spec.yaml")} == after
    plan = make_plan(load_spec(spec, data_root=moved))
    with RunStore(store) as s:  # the relocated store resumes
        s.begin(plan.manifest(), "", {t.name: t.data for t in plan.spec.tasks})


def test_relocate_refuses_a_missing_file_and_writes_nothing(tmp_path, tiny_model_dir):
    spec, root, store = _store(tmp_path, tiny_model_dir)
    _legacy(store)
    before = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    empty = tmp_path / "empty-root"
    empty.mkdir()
    result = invoke_cli(["experiment", "relocate", store, "--data-root", empty])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is not under --data-root" in result.output and "pass the data root that holds it." in result.output
    assert {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()} == before


# ----- the committed files ---------------------------------------------------------------------------

# A folder of the machine a result ran on: its checkouts and data (top folder `work`) and home folders. /tmp/ is
# allowed in prose and command lines (a scratch --out folder of a documented command names no file the
# reader needs), but not in a field that names a data file or model, checked below.
MACHINE = re.compile(r"(?<![\w.~-])/(work|home|Users)/")
PATH_FIELDS = ("data", "pools", "source", "target", "path")
ABSOLUTE = re.compile(r"^(/|[A-Za-z]:\\)")


def _tracked() -> list[Path]:
    done = subprocess.run(["git", "ls-files", "docs", "src", "tests", "benchmarks", "tools", "Makefile", "README.md"],
                          cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / line for line in done.stdout.splitlines()]


def test_no_committed_file_names_a_folder_of_the_machine_it_ran_on():
    hits = []
    for path in _tracked():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits)


def _path_fields(value, where=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in PATH_FIELDS and isinstance(inner, str):
                yield f"{where}.{key}", inner
            yield from _path_fields(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _path_fields(inner, f"{where}[{i}]")


def test_no_committed_result_names_a_data_file_or_model_by_an_absolute_path():
    hits = []
    for path in _tracked():
        if path.suffix != ".json" or not (path.is_relative_to(REPO / "docs" / "results")
                                          or path.is_relative_to(REPO / "src" / "ascp" / "resources")):
            continue
        for where, value in _path_fields(json.loads(path.read_text(encoding="utf-8"))):
            if ABSOLUTE.match(value):
                hits.append(f"{path.relative_to(REPO)} {where}: {value}")
    assert not hits, "\n".join(hits)


# ----- the held-out README quotes its report ---------------------------------------------------------

HELDOUT = REPO / "docs" / "results" / "heldout-small"
NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def _tables(text: str) -> list[tuple[str, list[list[str]]]]:
    """(the text before each markdown table, its rows as cells, the separator row left out)."""
    tables, rows, before = [], [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        else:
            if rows:
                tables.append(("\n".join(before[-12:]), rows))
                rows = []
            before.append(line)
    if rows:
        tables.append(("\n".join(before[-12:]), rows))
    return tables


def test_every_number_of_the_heldout_readme_tables_is_the_reports():
    """Each table of the README that names a report table (`report/tables/NAME.md` in the text before it)
    holds, row by row, the numbers of that table's rows with the same header and first cells."""
    readme = (HELDOUT / "README.md").read_text(encoding="utf-8")
    compared = 0
    for before, rows in _tables(readme):
        named = re.findall(r"report/tables/([\w.-]+\.md)", before)
        if not named:
            continue
        source = (HELDOUT / "report" / "tables" / named[-1]).read_text(encoding="utf-8")
        matching = [t for _, t in _tables(source) if t[0] == rows[0]]
        assert matching, f"README table before {named[-1]!r} has header {rows[0]}, which no table there has"
        report = {tuple(r[:2]): r for r in matching[0][1:]}
        for row in rows[1:]:
            assert tuple(row[:2]) in report, f"README row {row[:2]} is not in {named[-1]}"
            theirs = report[tuple(row[:2])]
            for column, mine, their in zip(rows[0], row, theirs, strict=True):
                ours, reported = NUMBER.findall(mine), NUMBER.findall(their)
                for a, b in zip(ours, reported, strict=False):
                    assert a == b, (f"README {named[-1]} row {row[:2]} column {column!r}: README says {a}, "
                                    f"the report {b}")
                assert len(ours) == len(reported), (f"README {named[-1]} row {row[:2]} column {column!r}: {mine} "
                                                    f"vs {their}")
                compared += len(ours)
    assert compared > 100  # the by-task and pooled Table 11 at least
