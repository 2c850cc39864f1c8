"""What every consumer shares: the reading it returns (`Consumption`), the `Consumer` protocol,
the uniform reading over used passages, the answer-bearing passages of a case, and the recorded
run a consumer learns from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ascp.errors import AscpError
from ascp.records import Results, read_results
from ascp.schedulers.base import RoundFeedback
from ascp.types import Case


@dataclass(frozen=True)
class Consumption:
    """One round's reading by a consumer: normalised scores over the context and the used ids."""

    normalized: dict[str, float]
    used: tuple[str, ...]


@runtime_checkable
class Consumer(Protocol):
    name: str

    def consume(self, case: Case, round: int, context: Sequence[str],
                history: Sequence[RoundFeedback]) -> Consumption:
        """Which passages of `context` (round `round`, 1-based) are used, given the earlier rounds."""
        ...


def uniform_reading(context: Sequence[str], used: Sequence[str]) -> Consumption:
    share = 1.0 / len(used) if used else 0.0
    chosen = set(used)
    return Consumption({d: share if d in chosen else 0.0 for d in context}, tuple(d for d in context if d in chosen))




def bearing_ids(case: Case) -> set[str]:
    """Ids of the pool passages that attest at least one gold unit (the PR@T rule)."""
    from ascp.metrics.attestation import attestation_matrix

    hits = np.atleast_1d(attestation_matrix(case.pool, case.units).any(axis=1)).tolist()
    return {p.id for p, hit in zip(case.pool, hits, strict=True) if hit}


def answer_bearing(case: Case) -> set[str]:
    """`bearing_ids`, or none for a case whose units are not all alias units (claims need an NLI model)."""
    if not case.units or not all(u.aliases for u in case.units):
        return set()
    return bearing_ids(case)


def recorded_run(consumer: str, run: str) -> Results:
    """The results a consumer learns from (a run folder, a simulation or an experiment store), read
    by `ascp.records.read_results`; anything else is one sentence naming the consumer."""
    try:
        return read_results(run, kinds=("run", "simulation", "store"))
    except AscpError as exc:
        raise AscpError(f"{consumer} consumer: {exc}") from None
