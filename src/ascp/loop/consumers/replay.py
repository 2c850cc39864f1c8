"""`replay(run=...)`: the readings a real run's probe gave, looked up per case, round and passage."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ascp.errors import AscpError
from ascp.loop.consumers.base import Consumption, run_records
from ascp.params import Param
from ascp.schedulers.base import RoundFeedback
from ascp.types import Case


class Replay:
    """The readings of a real run's probe (see the module docstring for unseen passages).

    `run`: an `ascp run` folder (its `rounds.jsonl`), or an experiment store (`units.jsonl` of
    `ascp experiment run` / `ascp reproduce`), whose rounds of one `condition` are replayed (the
    condition is needed when the store holds several).
    """

    params = (Param("run", str, "", "run folder of `ascp run`, or experiment store, to replay"),
              Param("condition", str, "", "the store's condition whose rounds are replayed"))

    def __init__(self, run: str, condition: str = "") -> None:
        folder = Path(run)
        self.name = f"replay({run}{', ' + condition if condition else ''})"
        # case -> passage -> [(round, normalised score, used)]
        self.readings: dict[str, dict[str, list[tuple[int, float, bool]]]] = {}
        self.rounds: dict[str, set[int]] = {}
        if (folder / "rounds.jsonl").is_file():
            for where, rec in run_records(folder / "rounds.jsonl"):
                self._add(where, rec, str(rec.get("case_id")))
        elif (folder / "units.jsonl").is_file():
            units = run_records(folder / "units.jsonl")
            names = sorted({str(u.get("condition")) for _, u in units})
            if not condition and len(names) == 1:
                condition = names[0]
            if condition not in names:
                raise AscpError(f"replay consumer: give one of the store's conditions, e.g. "
                                f"replay(run={run},condition={names[0]}); it holds: {'; '.join(names)}.")
            for where, unit in units:
                if unit.get("condition") == condition:
                    for rec in unit.get("rounds", []):
                        self._add(where, rec, str(unit.get("case_id")))
        else:
            raise AscpError(f"replay consumer: {folder} holds neither rounds.jsonl (`ascp run`) nor units.jsonl "
                            "(an experiment store); give the folder of a run.")

    def _add(self, where: str, rec: dict, case_id: str) -> None:
        try:
            t, used = int(rec["round"]), set(rec["used"])
            readings = {d: float(rec["normalized"].get(d, 0.0)) for d in rec["context"]}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise AscpError(f"replay consumer: {where} is not a round record of a run.") from None
        if t in self.rounds.get(case_id, set()):
            raise AscpError(f"replay consumer: {where} repeats round {t} of case {case_id!r} (the run holds several "
                            "seeds, models or tasks for it); replay a run with one reading per case and round.")
        self.rounds.setdefault(case_id, set()).add(t)
        for d, a in readings.items():
            self.readings.setdefault(case_id, {}).setdefault(d, []).append((t, a, d in used))

    def check(self, cases: Sequence[Case], T: int) -> None:
        """The replayed run must cover these cases and rounds 1..T (else one sentence)."""
        missing = [c.id for c in cases if c.id not in self.rounds]
        if missing:
            raise AscpError(f"{self.name}: the recorded run has no rounds for case {missing[0]!r}; replay a run "
                            "made on the same data file.")
        short = [c.id for c in cases if not set(range(1, T + 1)) <= self.rounds[c.id]]
        if short:
            raise AscpError(f"{self.name}: the recorded run lacks some of rounds 1..{T} for case {short[0]!r}; "
                            f"replay a run with at least T={T} rounds.")

    def consume(self, case: Case, round: int, context: Sequence[str],
                history: Sequence[RoundFeedback]) -> Consumption:
        normalized, used = {}, []
        for d in context:
            seen = self.readings.get(case.id, {}).get(d)
            if not seen:
                normalized[d] = 0.0
                continue
            _, a, was_used = min(seen, key=lambda r: (abs(r[0] - round), r[0]))
            normalized[d] = a
            if was_used:
                used.append(d)
        return Consumption(normalized, tuple(used))
