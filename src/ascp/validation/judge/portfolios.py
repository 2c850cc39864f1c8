"""The portfolios to judge, from an `ascp run` folder (read by `ascp.loop.runfolder`; passage texts
from the case file its config names) or an `ascp experiment run` store (`plan.json`, `units.jsonl`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.types import Case, Passage, Round
from ascp.validation.judge.prompts import masked


@dataclass(frozen=True)
class JudgedPortfolio:
    """One portfolio to judge: who it is (`key`, for the output only), its case and rounds, and the
    probe-side measures recorded with it."""

    key: dict[str, Any]
    case: Case
    rounds: tuple[Round, ...]
    ecr: float
    ecr_thresholded: float
    distinct_2: float

    @property
    def offered(self) -> tuple[str, ...]:
        """Distinct passage ids shown across rounds, in order of first appearance."""
        return tuple(dict.fromkeys(pid for r in self.rounds for pid in r.context))

    @property
    def responses(self) -> list[str]:
        return [r.response for r in self.rounds]

    def shown_responses(self) -> list[str]:
        """The responses as the judge sees them (`masked`: no passage id of the case's pool)."""
        ids = [p.id for p in self.case.pool] + list(self.offered)
        return [masked(r, ids) for r in self.responses]

    def passage(self, pid: str) -> Passage:
        try:
            return self.case.passage(pid)
        except KeyError:
            raise AscpError(f"case {self.case.id!r}: passage {pid!r} of the run is not in its case file; "
                            "judge the run against the case file it was made from.") from None


def _metric(record: dict[str, Any], name: str, rounds: Sequence[Round]) -> float:
    """A recorded metric, or computed from the rounds where the record predates it."""
    value = record.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    from ascp.metrics.diversity import distinct_n
    from ascp.metrics.portfolio import evidence_coverage_rate, thresholded_coverage

    if name == "ecr":
        return evidence_coverage_rate(rounds)
    if name == "ecr_thresholded":
        return thresholded_coverage(rounds)
    return distinct_n([r.response for r in rounds], 2)


def _portfolio(key: dict[str, Any], case: Case, rounds: Sequence[Round], record: dict[str, Any]) -> JudgedPortfolio:
    ordered = tuple(sorted(rounds, key=lambda r: r.round))
    return JudgedPortfolio(key=key, case=case, rounds=ordered, ecr=_metric(record, "ecr", ordered),
                           ecr_thresholded=_metric(record, "ecr_thresholded", ordered),
                           distinct_2=_metric(record, "distinct_2", ordered))


def _load_case_file(data: str, format: str, where: str) -> dict[str, Case]:
    from ascp.data import load_cases

    path = Path(data)
    if not path.is_file():
        raise AscpError(f"the case file {data!r} named in {where} is not here; judge from the folder the run was "
                        "made in, so its passage texts can be read.")
    return {c.id: c for c in load_cases(path, format=format, rank_by="given", require_pool=False)}


def _case(cases: dict[str, Case], case_id: str, data: str) -> Case:
    if case_id not in cases:
        raise AscpError(f"case {case_id!r} of the run is not in {data}; judge the run against its own case file.")
    return cases[case_id]


def load_run_portfolios(directory: Path, limit: int | None = None) -> list[JudgedPortfolio]:
    """The portfolios of an `ascp run` folder, in `cases.jsonl` order (the first `limit`)."""
    from ascp.loop.runfolder import read_run

    run = read_run(directory)
    config = run.config
    rounds = run.rounds()
    rows = run.cases[:limit]
    data = str(config.get("data", ""))
    cases = _load_case_file(data, str(config.get("format", "auto")), f"{directory}/summary.json")
    policy = str(config.get("policy", ""))
    return [_portfolio({"case_id": str(row["case_id"]), "policy": str(row.get("policy", policy))},
                       _case(cases, str(row["case_id"]), data), rounds.get(str(row["case_id"]), []), row)
            for row in rows]


def load_store_portfolios(directory: Path, limit: int | None = None) -> list[JudgedPortfolio]:
    """The units of an `ascp experiment run` store, in file order (the first `limit`)."""
    from ascp.experiments.store import read_plan, read_units

    tasks = {t["name"]: t for t in read_plan(directory)["tasks"]}
    units = read_units(directory)[:limit]
    cases: dict[str, dict[str, Case]] = {}
    out = []
    for unit in units:
        task = tasks[unit["task"]]
        if task["name"] not in cases:
            cases[task["name"]] = _load_case_file(task["data"], task.get("format", "auto"), f"{directory}/plan.json")
        key = {k: unit[k] for k in ("task", "model", "seed", "case_id", "condition")}
        out.append(_portfolio(key, _case(cases[task["name"]], str(unit["case_id"]), task["data"]),
                              [Round.from_json(r) for r in unit.get("rounds", [])], unit))
    return out


def load_portfolios(directory: str | Path, limit: int | None = None) -> tuple[str, list[JudgedPortfolio]]:
    """("run" or "store", the portfolios) of an `ascp run` folder or an experiment store; one
    AscpError sentence for anything else."""
    from ascp.loop.runfolder import missing_files

    directory = Path(directory)
    if limit is not None and limit < 1:
        raise AscpError(f"--limit must be at least 1, got {limit}.")
    if not directory.is_dir():
        raise AscpError(f"{directory} is not a folder; give the --out folder of `ascp run` (or of "
                        "`ascp experiment run`).")
    store = (directory / "plan.json").is_file() and (directory / "units.jsonl").is_file()
    if not store:
        missing = missing_files(directory)
        if missing:
            raise AscpError(f"{directory} holds no run ({', '.join(missing)} missing); give the --out folder of "
                            "`ascp run` (or of `ascp experiment run`).")
    try:
        found = ("store", load_store_portfolios(directory, limit)) if store else \
            ("run", load_run_portfolios(directory, limit))
    except (KeyError, TypeError, ValueError) as exc:
        raise AscpError(f"{directory} is not a readable ascp run ({exc.__class__.__name__}: {exc}); give an "
                        "unmodified output folder of `ascp run` or `ascp experiment run`.") from None
    if not any(p.offered for p in found[1]):
        raise AscpError(f"{directory} holds no portfolio with an offered passage; nothing to judge.")
    return found
