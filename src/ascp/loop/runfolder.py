"""The run folder: `rounds.jsonl`, `cases.jsonl`, `summary.json`, written all or nothing.

The three files are written into a temporary folder beside the output folder and moved into
place only when all of them are complete, so a failed run leaves nothing half-written. The
record format is `ascp.records.format`; the folder is read back by `ascp.records.read_results`
(with experiment stores and validate-probe folders), below the loop, so every stage may read it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.jsonio import check_parent, check_writable, staged_folder
from ascp.records.format import RUN_FILES, round_records
from ascp.types import Case, Portfolio


def check_out_dir(out: Path, overwrite: bool = False) -> None:
    """Fail before any work when the output folder cannot be written, or holds an earlier run's
    results and `overwrite` is not set (a run is never replaced silently)."""
    if out.exists() and not out.is_dir():
        raise AscpError(f"--out {out} exists and is not a folder; pass a folder path.")
    earlier = [name for name in RUN_FILES if (out / name).exists()]
    if earlier and not overwrite:
        raise AscpError(f"--out {out} already holds a run ({', '.join(earlier)}); pass --overwrite to replace it "
                        "or choose another folder.")
    parent = check_parent(out, "--out")
    check_writable(out if out.is_dir() else parent)


def summarize(case_rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean of every numeric metric over cases (NaNs ignored)."""
    keys = [k for k, v in case_rows[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    means = {}
    for k in keys:
        values = np.array([row[k] for row in case_rows if isinstance(row.get(k), (int, float))], dtype=float)
        means[k] = float(np.nanmean(values)) if values.size and not np.all(np.isnan(values)) else float("nan")
    return means


def write_run(
    out: Path, cases: Sequence[Case], portfolios: Sequence[Portfolio], case_rows: Sequence[dict[str, Any]],
    config: dict[str, Any],
) -> dict[str, Any]:
    with staged_folder(out) as tmp:
        return write_run_files(tmp, portfolios, case_rows, config)


def write_run_files(folder: Path, portfolios: Sequence[Portfolio], case_rows: Sequence[dict[str, Any]],
                    config: dict[str, Any]) -> dict[str, Any]:
    """The three files of a run into an existing (staged) folder; returns the summary."""
    summary = {"config": config, "cases": len(case_rows), "mean": summarize(case_rows)}
    with (folder / "rounds.jsonl").open("w", encoding="utf-8") as handle:
        for p in portfolios:
            for rec in round_records(p):
                handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
    with (folder / "cases.jsonl").open("w", encoding="utf-8") as handle:
        for row in case_rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary
