"""`replay(run=...)`: the readings a real run's probe gave, looked up per case, round and passage."""

from __future__ import annotations

from collections.abc import Sequence

from ascp.errors import AscpError
from ascp.loop.consumers.base import Consumption, recorded_run
from ascp.params import Param
from ascp.schedulers.base import RoundFeedback
from ascp.types import Case, Round


class Replay:
    """The readings of a real run's probe (see the module docstring for unseen passages).

    `run`: an `ascp run` folder, an `ascp simulate` output or an experiment store (`ascp experiment
    run` / `ascp reproduce`), whose rounds of one `condition` (a policy, or a store's condition
    name) are replayed; the condition is needed when the folder holds several.
    """

    params = (Param("run", str, "", "run folder of `ascp run`, or experiment store, to replay"),
              Param("condition", str, "", "the condition (policy) whose rounds are replayed"))

    def __init__(self, run: str, condition: str = "") -> None:
        self.name = f"replay({run}{', ' + condition if condition else ''})"
        # case -> passage -> [(round, normalised score, used)]
        self.readings: dict[str, dict[str, list[tuple[int, float, bool]]]] = {}
        self.rounds: dict[str, set[int]] = {}
        results = recorded_run("replay", run)
        names = results.conditions
        if not condition and len(names) == 1:
            condition = names[0]
        if condition not in names:
            holder = "store" if results.kind == "store" else "run"
            raise AscpError(f"replay consumer: give one of the {holder}'s conditions, e.g. "
                            f"replay(run={run},condition={names[0] if names else 'NAME'}); it holds: "
                            f"{'; '.join(names) or 'none'}.")
        for unit in results.units:
            if unit.condition == condition:
                for r in unit.rounds:
                    self._add(unit.where, r, unit.case_id)

    def _add(self, where: str, r: Round, case_id: str) -> None:
        if r.round in self.rounds.get(case_id, set()):
            raise AscpError(f"replay consumer: {where} repeats round {r.round} of case {case_id!r} (the run holds "
                            "several seeds, models or tasks for it); replay a run with one reading per case and "
                            "round.")
        self.rounds.setdefault(case_id, set()).add(r.round)
        for d in r.context:
            self.readings.setdefault(case_id, {}).setdefault(d, []).append(
                (r.round, float(r.normalized.get(d, 0.0)), d in r.used))

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
