"""Every committed result, recomputed from its records by today's code: equal, number for number.

For each experiment store under `docs/results/` (a folder with `units.jsonl` and `report/`), the
report is rebuilt from the store into a scratch folder (`ascp report`, with the preset its README
names where it has one) and every number of `report/tables/tables.json` is compared with the number
the rebuilt report gives under the same table, row and column. A report written before a column was
added has fewer columns: only the columns both hold are compared, and a table the committed report
lacks is not. For each validation folder (`scores.jsonl` beside `summary.json`) Fig. 3's metrics are
recomputed from the scores (`ascp.validation.analysis.summarize`) and compared whole.

Prints one row per folder (tables, numbers compared, numbers differing) and exits 1 when any number
differs by more than 1e-9 (relative) or a row is missing.

    python benchmarks/recompute_results.py [--only cpu-small,probe-validation] [--n-boot N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PRESETS = {"cpu-small": "cpu-small", "heldout-small": "heldout-small"}
"""Stores whose README regenerates the report with a preset (the paper's claims and frame)."""


def stores() -> list[Path]:
    return sorted(p.parent for p in RESULTS.glob("*/units.jsonl") if (p.parent / "report" / "tables").is_dir())


def validations() -> list[Path]:
    return sorted(p.parent for p in RESULTS.glob("**/scores.jsonl") if (p.parent / "summary.json").is_file())


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _leaves(inner, f"{path}[{i}]")
    else:
        yield path, value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if math.isnan(a) and math.isnan(b):
            return True
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def compare_tables(committed: dict[str, Any], rebuilt: dict[str, Any]) -> tuple[int, list[str]]:
    """(numbers compared, differences) over the tables, rows and columns both reports hold."""
    compared, differences = 0, []
    for key, table in committed.items():
        if key not in rebuilt or not isinstance(table, dict) or "data" not in table:
            continue
        old_rows, new_rows = table["data"], rebuilt[key]["data"]
        if len(old_rows) != len(new_rows):
            differences.append(f"{key}: {len(old_rows)} rows committed, {len(new_rows)} rebuilt")
            continue
        for i, (old, new) in enumerate(zip(old_rows, new_rows, strict=True)):
            for column in set(old) & set(new):
                rebuilt_leaves = dict(_leaves(new[column], column))
                for path, value in _leaves(old[column], column):
                    other = rebuilt_leaves.get(path)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        compared += 1
                    if not _same(value, other):
                        differences.append(f"{key} row {i} {path}: committed {value!r}, rebuilt {other!r}")
    return compared, differences


def recompute_store(folder: Path, scratch: Path, n_boot: int | None) -> tuple[int, list[str]]:
    out = scratch / folder.name
    # the stores name their data files relative to the data root (../shared/data from the repository root)
    data_root = os.environ.get("ASCP_DATA") or str(ROOT.parent / "shared" / "data")
    command = [sys.executable, "-m", "ascp.cli", "report", str(folder), "--out", str(out), "--data-root", data_root]
    if folder.name in PRESETS:
        command += ["--preset", PRESETS[folder.name]]
    if n_boot is not None:
        command += ["--n-boot", str(n_boot)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return 0, [f"ascp report failed: {done.stderr.strip().splitlines()[-1:]}"]
    committed = json.loads((folder / "report" / "tables" / "tables.json").read_text(encoding="utf-8"))
    rebuilt = json.loads((out / "tables" / "tables.json").read_text(encoding="utf-8"))
    return compare_tables(committed, rebuilt)


def recompute_validation(folder: Path) -> tuple[int, list[str]]:
    from ascp.validation.analysis import summarize

    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in (folder / "scores.jsonl").read_text(encoding="utf-8").splitlines() if line]
    again = json.loads(json.dumps(summarize(rows, m=summary["config"]["m"], n_boot=summary["n_boot"],
                                            seed=summary["config"]["seed"])))
    old, new = dict(_leaves(summary["metrics"])), dict(_leaves(again))
    differences = [f"{path}: committed {value!r}, recomputed {new.get(path)!r}" for path, value in old.items()
                   if not _same(value, new.get(path))]
    differences += [f"{path}: not in the committed summary" for path in new if path not in old]
    return sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in old.values()), differences


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated folder names (default: every one)")
    parser.add_argument("--n-boot", type=int, default=None, help="a store report's replicates (default: "
                        "the report's own; a committed report used the default)")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    failed = False
    print("| folder | kind | numbers compared | differing |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for folder in stores():
            if only is None or folder.name in only:
                compared, differences = recompute_store(folder, Path(scratch), args.n_boot)
                failed |= bool(differences)
                print(f"| {folder.relative_to(RESULTS)} | store report | {compared} | {len(differences)} |")
                for line in differences[:5]:
                    print(f"    {line}", file=sys.stderr)
        for folder in validations():
            if only is None or folder.name in only or folder.parent.name in only:
                compared, differences = recompute_validation(folder)
                failed |= bool(differences)
                print(f"| {folder.relative_to(RESULTS)} | Fig. 3 summary | {compared} | {len(differences)} |")
                for line in differences[:5]:
                    print(f"    {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
