"""The run folder: `rounds.jsonl`, `cases.jsonl`, `summary.json`, written all or nothing and read back.

The three files are written into a temporary folder beside the output folder and moved into
place only when all of them are complete, so a failed run leaves nothing half-written.
`read_run` is the one reader (`ascp view`, `ascp judge`, the replay consumer): a missing or
damaged file is one sentence naming the file (and line).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.jsonio import check_writable, read_jsonl, staged_folder
from ascp.types import Case, Portfolio, Round

RUN_FILES = ("rounds.jsonl", "cases.jsonl", "summary.json")


def check_out_dir(out: Path, overwrite: bool = False) -> None:
    """Fail before any work when the output folder cannot be written, or holds an earlier run's
    results and `overwrite` is not set (a run is never replaced silently)."""
    if out.exists() and not out.is_dir():
        raise AscpError(f"--out {out} exists and is not a folder; pass a folder path.")
    earlier = [name for name in RUN_FILES if (out / name).exists()]
    if earlier and not overwrite:
        raise AscpError(f"--out {out} already holds a run ({', '.join(earlier)}); pass --overwrite to replace it "
                        "or choose another folder.")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        raise AscpError(f"the parent folder of --out ({parent}) does not exist; create it first.")
    check_writable(out if out.is_dir() else parent)


def round_records(portfolio: Portfolio) -> list[dict[str, Any]]:
    """The lines of `rounds.jsonl` for one portfolio: each round's record with its case id."""
    return [{"case_id": portfolio.case_id, **r.to_json()} for r in portfolio.rounds]


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


# ----- reading -----------------------------------------------------------------------------------

RERUN = "rerun it with `ascp run` or `ascp simulate`"
# read_records also reads an experiment store's units.jsonl (the replay consumer)
REWRITE = "rerun the command that wrote it (`ascp run`, `ascp simulate` or `ascp experiment run`)"


@dataclass(frozen=True)
class RunFolder:
    """A run folder as read: its summary, its case rows and its round records, in file order."""

    path: Path
    summary: dict[str, Any]
    cases: list[dict[str, Any]]
    records: list[tuple[int, dict[str, Any]]]  # (line of rounds.jsonl, record)

    @property
    def config(self) -> dict[str, Any]:
        config = self.summary.get("config", {})
        return config if isinstance(config, dict) else {}

    def rounds(self) -> dict[str, list[Round]]:
        """The rounds per case id, in file order (a record this version cannot read: one sentence)."""
        rounds: dict[str, list[Round]] = {}
        path = self.path / "rounds.jsonl"
        for number, record in self.records:
            try:
                rounds.setdefault(str(record["case_id"]), []).append(Round.from_json(record))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise AscpError(f"{self.path} is not a run folder this version of ascp reads ({path}:{number}: "
                                f"{type(exc).__name__}: {exc}); {RERUN}.") from None
        return rounds


def missing_files(folder: Path) -> list[str]:
    """The run files `folder` lacks (all three when it is no folder)."""
    return [name for name in RUN_FILES if not (folder / name).is_file()]


def read_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every JSON line of a run file; blank lines are skipped."""
    return read_jsonl(path, missing=f"{path.parent} holds no run ({path.name} missing); give the --out folder of "
                      "`ascp run` or `ascp simulate`.", fix=f"the file is damaged, {REWRITE}",
                      not_object=f"not a record of a run; {REWRITE}", empty=None)


def read_summary(folder: Path) -> dict[str, Any]:
    """`summary.json` of a run folder (its `config` and `mean`)."""
    path = folder / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AscpError(f"{folder} holds no run (summary.json missing); give the --out folder of `ascp run` or "
                        "`ascp simulate`.") from None
    except (OSError, UnicodeDecodeError, ValueError):
        summary = None
    if not isinstance(summary, dict):
        raise AscpError(f"{path} is not the summary of a run; rerun it with `ascp run`.")
    return summary


def read_run(folder: str | Path) -> RunFolder:
    """The three files of an `ascp run` folder (or of one policy of an `ascp simulate` output)."""
    folder = Path(folder)
    missing = missing_files(folder)
    if missing:
        raise AscpError(f"{folder} holds no run ({', '.join(missing)} missing); give the --out folder of `ascp run` "
                        "or `ascp simulate`.")
    return RunFolder(path=folder, summary=read_summary(folder),
                     cases=[row for _, row in read_records(folder / "cases.jsonl")],
                     records=read_records(folder / "rounds.jsonl"))
