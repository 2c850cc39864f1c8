"""The portfolios to judge, from an `ascp run` folder, an `ascp simulate` output or an `ascp experiment
run` store (read by `ascp.records.read_results`; passage texts from the case file its config or plan
names)."""

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


def load_portfolios(directory: str | Path, limit: int | None = None) -> tuple[str, list[JudgedPortfolio]]:
    """(the folder's kind, its portfolios) of an `ascp run` folder, an `ascp simulate` output or an
    experiment store (`ascp.records.read_results`), in the folder's order (the first `limit`); passage
    texts come from the data file the run's config or the store's plan names for each task."""
    from ascp.records import read_results

    if limit is not None and limit < 1:
        raise AscpError(f"--limit must be at least 1, got {limit}.")
    results = read_results(directory, kinds=("run", "simulation", "store"))
    cases: dict[str, dict[str, Case]] = {}
    where = f"{results.path}/{'plan.json' if results.kind == 'store' else 'summary.json'}"
    found = []
    for unit in results.units[:limit]:
        if unit.key.task not in results.sources:
            raise AscpError(f"{unit.where}: task {unit.key.task!r} is not in {where}; judge an unmodified "
                            "output folder of `ascp run` or `ascp experiment run`.")
        data, format = results.sources[unit.key.task]
        if unit.key.task not in cases:
            cases[unit.key.task] = _load_case_file(data, format, where)
        key = ({"case_id": unit.case_id, "policy": unit.condition} if results.kind != "store"
               else unit.key._asdict())
        found.append(_portfolio(key, _case(cases[unit.key.task], unit.case_id, data), unit.rounds, unit.record))
    if not any(p.offered for p in found):
        raise AscpError(f"{directory} holds no portfolio with an offered passage; nothing to judge.")
    return results.kind, found
