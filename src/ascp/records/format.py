"""The record format that run folders and experiment stores share, and the one rule for duplicates.

A *round record* is `Round.to_json()`: a line of a run folder's `rounds.jsonl` (with the case id in
front), or an element of a store unit's `rounds`. A *unit* is one (task, model, seed, case,
condition), named by `UnitKey`. Wherever a key appears twice (a store unit, a run folder's case
row or round, a validate-probe score row) the first record counts (`keep_first`): the store never
writes a finished key again, so a later copy can only be a concatenated or hand-edited file, and
every reader must then see the same units.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ascp.errors import AscpError
from ascp.types import Portfolio

RUN_FILES = ("rounds.jsonl", "cases.jsonl", "summary.json")  # an `ascp run` folder
COMPARISON = "comparison.json"  # an `ascp simulate` output: this beside one run folder per policy
UNITS = "units.jsonl"  # an experiment store: this and its plan
PLAN = "plan.json"
SCORES = "scores.jsonl"  # an `ascp validate-probe` folder (with responses.jsonl and summary.json)
KEY_FIELDS = ("task", "model", "seed", "case_id", "condition")
# one score row per (protocol, case, width, padding, estimator, passage)
SCORE_KEY_FIELDS = ("protocol", "case_id", "width", "padding", "estimator", "passage_id")

T = TypeVar("T")


class UnitKey(NamedTuple):
    task: str
    model: str
    seed: int
    case_id: str
    condition: str

    @classmethod
    def of(cls, record: dict[str, Any]) -> UnitKey:
        return cls(*(record[f] for f in KEY_FIELDS))


def keep_first(items: Iterable[T], key: Callable[[T], Hashable]) -> list[T]:
    """The items in order, each key's first one only: the one duplicate rule of every results folder."""
    seen: set[Hashable] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def round_records(portfolio: Portfolio) -> list[dict[str, Any]]:
    """The lines of `rounds.jsonl` for one portfolio: each round's record with its case id."""
    return [{"case_id": portfolio.case_id, **r.to_json()} for r in portfolio.rounds]


def parse_units(data: bytes, path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of the complete lines of a store's `units.jsonl`, and the byte length they span (a
    partial tail is excluded); every record, duplicates included (the writer needs them all).

    The last line counts as complete only when it ends with a newline and parses; an earlier
    line that does not parse is damage the store cannot explain, and raises.
    """
    end = data.rfind(b"\n") + 1
    records: list[dict[str, Any]] = []
    lines = data[:end].split(b"\n")[:-1] if end else []
    offset = 0
    for number, line in enumerate(lines, start=1):
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError
            UnitKey.of(obj)
        except (ValueError, KeyError, TypeError):
            if number == len(lines):  # a torn last line that happened to hold a newline byte
                return records, offset
            raise AscpError(f"{path} line {number} is not a unit record; the store is damaged (move the line "
                            "out of the file and rerun to redo that unit).") from None
        records.append(obj)
        offset += len(line) + 1
    return records, offset
