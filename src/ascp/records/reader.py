"""`read_results`: the one reader of the folders ascp writes results into.

Four kinds, recognised by their files:

- `run`: an `ascp run` folder (`rounds.jsonl`, `cases.jsonl`, `summary.json`; `ascp.loop.runfolder`);
- `simulation`: an `ascp simulate` output (`comparison.json` beside one run folder per policy);
- `store`: an experiment store (`plan.json`, `units.jsonl`; `ascp.experiments.store`);
- `validate-probe`: an `ascp validate-probe` folder (`scores.jsonl`, and `summary.json` when present).

The folder is checked once, here: a folder that is none of them, incomplete or damaged is one
`AscpError` sentence naming the file (and line). Round records come back as `Round` values, one
`Unit` per (task, model, seed, case, condition), with the duplicate rule of `ascp.records.format`
applied alike to all kinds. For a run folder the unit's condition is its policy, its task empty.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.jsonio import read_jsonl
from ascp.records.format import (
    COMPARISON,
    KEY_FIELDS,
    PLAN,
    RUN_FILES,
    SCORE_KEY_FIELDS,
    SCORES,
    UNITS,
    UnitKey,
    keep_first,
    parse_units,
)
from ascp.types import Portfolio, Round

KINDS = ("run", "simulation", "store", "validate-probe")
KIND_NAMES = {"run": "an `ascp run` folder", "simulation": "an `ascp simulate` output",
              "store": "an experiment run store", "validate-probe": "an `ascp validate-probe` folder"}
KIND_FILES = {"run": "rounds.jsonl (`ascp run`)", "simulation": f"{COMPARISON} (`ascp simulate`)",
              "store": f"{UNITS} (`ascp experiment run`)", "validate-probe": f"{SCORES} (`ascp validate-probe`)"}

RERUN = "rerun it with `ascp run` or `ascp simulate`"
REWRITE = "rerun the command that wrote it (`ascp run`, `ascp simulate` or `ascp experiment run`)"


# ----- the records ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Unit:
    """One portfolio: its key, its rounds in file order, its record as stored (a store's unit line,
    or a run folder's case row: the per-case metrics) and where that record is (file:line)."""

    key: UnitKey
    rounds: tuple[Round, ...]
    record: dict[str, Any]
    where: str

    @property
    def case_id(self) -> str:
        return self.key.case_id

    @property
    def condition(self) -> str:
        return self.key.condition

    def portfolio(self) -> Portfolio:
        """The unit as the loop's value: its condition as the policy, its numeric metrics."""
        metrics = {k: float(v) for k, v in self.record.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in KEY_FIELDS}
        return Portfolio(case_id=self.case_id, policy=self.condition, rounds=self.rounds, metrics=metrics)

    def to_record(self) -> dict[str, Any]:
        """The unit as a store record (key fields, metrics, rounds), a fresh dict the caller may extend."""
        rounds = self.record.get("rounds")
        if not isinstance(rounds, list):
            rounds = [r.to_json() for r in self.rounds]
        return {**self.record, **self.key._asdict(), "rounds": rounds}


@dataclass(frozen=True)
class Results:
    """A results folder as read: its kind, configuration (a run's `config`, a store's plan, a
    validation's `config`), summary file (a run's or validation's `summary.json`, a simulation's
    `comparison.json`; a store has none), its units (run folders, simulations, stores) and its
    per-passage score rows (validate-probe folders)."""

    path: Path
    kind: str
    config: dict[str, Any]
    summary: dict[str, Any]
    units: tuple[Unit, ...] = ()
    scores: tuple[dict[str, Any], ...] = ()
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)  # task -> (data file, format)

    @property
    def conditions(self) -> tuple[str, ...]:
        """The conditions in order of first appearance: the units' (a run's policy, a store's
        condition names) or, for a validate-probe folder, its estimators."""
        if self.kind == "validate-probe":
            return tuple(dict.fromkeys(str(r["estimator"]) for r in self.scores))
        return tuple(dict.fromkeys(u.condition for u in self.units))

    def groups(self) -> dict[str, list[Unit]]:
        """The units by condition; where the folder holds several tasks, models or seeds, the label
        names them too (`rotate(k=2,T=2) [task=t, seed=1]`), so each group holds one unit per case."""
        varying = [(name, i) for i, name in enumerate(KEY_FIELDS[:3])
                   if len({u.key[i] for u in self.units}) > 1]
        out: dict[str, list[Unit]] = {}
        for u in self.units:
            extra = ", ".join(f"{name}={u.key[i]}" for name, i in varying)
            out.setdefault(f"{u.condition} [{extra}]" if extra else u.condition, []).append(u)
        return out

    def records(self) -> list[dict[str, Any]]:
        """The units as store records (`Unit.to_record`), in order."""
        return [u.to_record() for u in self.units]


# ----- run folders ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunFolder:
    """A run folder's three files as parsed: its summary, its case rows and its round records, in
    file order (the records are decoded by `rounds`)."""

    path: Path
    summary: dict[str, Any]
    cases: list[dict[str, Any]]
    records: list[tuple[int, dict[str, Any]]]  # (line of rounds.jsonl, record)

    @property
    def config(self) -> dict[str, Any]:
        config = self.summary.get("config", {})
        return config if isinstance(config, dict) else {}

    def rounds(self) -> dict[str, list[Round]]:
        """The rounds per case id, in file order, the first record per (case, round) (a record this
        version cannot read: one sentence)."""
        rounds: dict[str, list[Round]] = {}
        seen: set[tuple[str, int]] = set()
        path = self.path / "rounds.jsonl"
        for number, record in self.records:
            try:
                case_id, r = str(record["case_id"]), Round.from_json(record)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise AscpError(f"{self.path} is not a run folder this version of ascp reads ({path}:{number}: "
                                f"{type(exc).__name__}: {exc}); {RERUN}.") from None
            if (case_id, r.round) not in seen:
                seen.add((case_id, r.round))
                rounds.setdefault(case_id, []).append(r)
        return rounds

    def units(self) -> list[Unit]:
        """One unit per case: the case rows in file order (first row per case), then any case with
        rounds but no row."""
        config = self.config
        policy = str(config.get("policy", self.path.name))
        try:
            model, seed = str(config.get("model", "")), int(config.get("seed", 0))
        except (TypeError, ValueError):
            raise AscpError(f"{self.path / 'summary.json'} is not the summary of a run (its seed is not a whole "
                            f"number); {RERUN}.") from None
        rounds = self.rounds()
        rows = {str(row["case_id"]): (n, row) for n, row in self._case_rows()}
        for cid in rounds:
            rows.setdefault(cid, (0, {"case_id": cid, "policy": policy}))
        return [Unit(key=UnitKey("", model, seed, cid, str(row.get("policy", policy))),
                     rounds=tuple(rounds.get(cid, ())), record=row,
                     where=f"{self.path / 'cases.jsonl'}:{n}" if n else f"{self.path / 'rounds.jsonl'}")
                for cid, (n, row) in rows.items()]

    def _case_rows(self) -> list[tuple[int, dict[str, Any]]]:
        numbered = list(enumerate(self.cases, start=1))
        for n, row in numbered:
            if "case_id" not in row:
                raise AscpError(f"{self.path / 'cases.jsonl'}: row {n} has no case_id, so it is not a case row of a "
                                f"run; {RERUN}.")
        return keep_first(numbered, lambda item: str(item[1]["case_id"]))


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


def _run_sources(config: dict[str, Any], folder: Path) -> dict[str, tuple[str, str]]:
    return {"": (_data_path(config.get("data", ""), folder), str(config.get("format", "auto")))}


def _data_path(entry: Any, near: Path | None) -> str:
    """A recorded data entry as a path to read: a path string as it is; a description
    (`ascp.caching.files.describe_file`) found under the data root ($ASCP_DATA, else ../shared/data),
    the current folder, or the folder `near` and its parents (`locate_file`)."""
    from ascp.caching.files import is_description, locate_file

    return str(locate_file(entry, near=near)) if is_description(entry) else str(entry)


def _read_run_results(folder: Path) -> Results:
    run = read_run(folder)
    return Results(path=folder, kind="run", config=run.config, summary=run.summary, units=tuple(run.units()),
                   sources=_run_sources(run.config, folder))


def _read_simulation(folder: Path) -> Results:
    path = folder / COMPARISON
    try:
        comparison = json.loads(path.read_text(encoding="utf-8"))
        order = list(comparison.get("policies", {}))
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        raise AscpError(f"{path} is not the comparison of an `ascp simulate` run; rerun it.") from None
    runs = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and any((p / name).is_file() for name in RUN_FILES)):
        run = read_run(sub)
        runs[str(run.config.get("policy", sub.name))] = run
    if not runs:
        raise AscpError(f"{folder} holds {COMPARISON} but no run folder of a policy; rerun `ascp simulate`.")
    # the order the simulation compared them in, baseline first
    ordered = sorted(runs.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    config = comparison.get("config", {})
    config = config if isinstance(config, dict) else {}
    units = tuple(u for _, run in ordered for u in run.units())
    return Results(path=folder, kind="simulation", config={**ordered[0][1].config, **config}, summary=comparison,
                   units=units, sources=_run_sources(ordered[0][1].config, folder))


# ----- experiment stores ---------------------------------------------------------------------------

def read_plan(directory: Path) -> dict[str, Any]:
    """A store's `plan.json`."""
    path = directory / PLAN
    if not path.is_file():
        raise AscpError(f"{directory} is not an experiment run store (no {PLAN}); pass the --out folder of "
                        "`ascp experiment run`.")
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        plan = None
    if not isinstance(plan, dict):
        raise AscpError(f"{path} is not the plan of an experiment; the store is damaged, rerun "
                        "`ascp experiment run` into a new --out folder.")
    return plan


def read_units(directory: Path) -> list[dict[str, Any]]:
    """Finished unit records (first record per key), without touching the file: safe during a run."""
    return [rec for _, rec in _numbered_units(directory)]


def _numbered_units(directory: Path) -> list[tuple[int, dict[str, Any]]]:
    path = directory / UNITS
    if not path.is_file():
        return []
    records, _ = parse_units(path.read_bytes(), path)
    # parse_units reads every line up to a torn tail, so a record's index is its line
    return keep_first(enumerate(records, start=1), lambda item: UnitKey.of(item[1]))


def _read_store(directory: Path) -> Results:
    plan = read_plan(directory)
    path = directory / UNITS
    units = []
    for number, rec in _numbered_units(directory):
        where = f"{path}:{number}"
        try:
            key = UnitKey(str(rec["task"]), str(rec["model"]), int(rec["seed"]), str(rec["case_id"]),
                          str(rec["condition"]))
            rounds = tuple(Round.from_json(r) for r in rec.get("rounds", []))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AscpError(f"{where} is not a unit record this version of ascp reads ({type(exc).__name__}: "
                            f"{exc}); rerun `ascp experiment run` into a new --out folder.") from None
        units.append(Unit(key=key, rounds=rounds, record=rec, where=where))
    sources = {}
    for task in plan.get("tasks", []):
        if isinstance(task, dict) and "name" in task:
            sources[str(task["name"])] = (_data_path(task.get("data", ""), directory), str(task.get("format", "auto")))
    return Results(path=directory, kind="store", config=plan, summary={}, units=tuple(units), sources=sources)


# ----- validate-probe folders ----------------------------------------------------------------------

def _read_validation(folder: Path) -> Results:
    path = folder / SCORES
    records = read_jsonl(path, missing=f"{folder} holds no {SCORES}; pass the --out folder of `ascp validate-probe`.",
                         fix="rerun `ascp validate-probe`", not_object="not a score row of `ascp validate-probe`",
                         empty=None)
    for number, row in records:
        try:
            missing = [k for k in (*SCORE_KEY_FIELDS, "role", "answers", "score", "normalized") if k not in row]
            if missing:
                raise KeyError(missing[0])
            int(row["width"])
            if not isinstance(row["answers"], list):
                raise TypeError("answers is not a list")
            float(row["score"]), float(row["normalized"])
        except (KeyError, TypeError, ValueError) as exc:
            raise AscpError(f"{path}:{number} is not a score row of `ascp validate-probe` ({type(exc).__name__}: "
                            f"{exc}); rerun it.") from None
    rows = keep_first((row for _, row in records), lambda r: tuple(str(r[k]) for k in SCORE_KEY_FIELDS))
    summary: dict[str, Any] = {}
    if (folder / "summary.json").is_file():
        try:
            summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            summary = {}
        if not isinstance(summary, dict):
            raise AscpError(f"{folder / 'summary.json'} is not the summary of `ascp validate-probe`; rerun it.")
    config = summary.get("config", {})
    return Results(path=folder, kind="validate-probe", config=config if isinstance(config, dict) else {},
                   summary=summary, scores=tuple(rows))


# ----- the reader ----------------------------------------------------------------------------------

def kind_of(folder: Path) -> str | None:
    """The kind of results `folder` holds, by its files (None: none of them)."""
    if (folder / PLAN).is_file() or (folder / UNITS).is_file():
        return "store"
    if (folder / SCORES).is_file():
        return "validate-probe"
    if any((folder / name).is_file() for name in RUN_FILES):
        return "run"
    if (folder / COMPARISON).is_file():
        return "simulation"
    return None


READERS = {"run": _read_run_results, "simulation": _read_simulation, "store": _read_store,
           "validate-probe": _read_validation}
COMMANDS = {"run": "`ascp run`", "simulation": "`ascp simulate`", "store": "`ascp experiment run`",
            "validate-probe": "`ascp validate-probe`"}


def _commands(kinds: Sequence[str]) -> str:
    names = [COMMANDS[k] for k in kinds]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _absent(path: Path, kinds: Sequence[str]) -> str:
    """The sentence for a folder that holds none of `kinds`."""
    if tuple(kinds) == ("store",):
        return f"{path} is not an experiment run store (no {PLAN}); pass the --out folder of `ascp experiment run`."
    if tuple(kinds) == ("validate-probe",):
        return f"{path} holds no {SCORES}; pass the --out folder of `ascp validate-probe`."
    if tuple(kinds) in (("run",), ("run", "simulation")):
        return (f"{path} holds no run ({', '.join(RUN_FILES)} missing); give the --out folder of `ascp run` or "
                "`ascp simulate`.")
    files = [KIND_FILES[k] for k in kinds]
    return (f"{path} holds no run: it holds neither {', '.join(files[:-1])} nor {files[-1]}; give the --out folder "
            f"of {_commands(kinds)}.")


def read_results(path: str | Path, kinds: Sequence[str] = KINDS, purpose: str = "") -> Results:
    """The results folder `path`, checked whole: its kind must be one of `kinds` (else one sentence;
    `purpose` says why, e.g. "a report compares the conditions of an experiment's plan")."""
    path = Path(path)
    if not path.is_dir():
        raise AscpError(f"{path} is not a folder; give the --out folder of {_commands(kinds)}.")
    kind = kind_of(path)
    if kind is None:
        raise AscpError(_absent(path, kinds))
    if kind not in kinds:
        why = f" ({purpose})" if purpose else ""
        raise AscpError(f"{path} is {KIND_NAMES[kind]}, not {' or '.join(KIND_NAMES[k] for k in kinds)}{why}; give "
                        f"the --out folder of {_commands(kinds)}.")
    return READERS[kind](path)
