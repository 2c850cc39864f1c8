"""The generic JSONL case format.

One case per line:
    {"id": str, "question": str, "task": str (optional),
     "pool": [{"id": str, "title": str (optional), "text": str, "score": float (optional)}, ...],
     "answers": [{"id": str (optional), "aliases": [str, ...]} | [str, ...] | {"claim": str}, ...]}
The pool is taken in the order given (rank 1 first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.jsonio import read_jsonl
from ascp.types import AnswerUnit, Case, Passage


def _passages(where: str, raw: Any) -> tuple[Passage, ...]:
    if not isinstance(raw, list) or not raw:
        raise AscpError(f"{where}: the pool is empty or missing; give at least one passage in 'pool'.")
    seen: set[str] = set()
    out = []
    for rank, p in enumerate(raw, start=1):
        if not isinstance(p, dict) or not isinstance(p.get("text"), str) or not str(p.get("id", "")).strip():
            raise AscpError(f"{where}: pool entry {rank} needs a string 'id' and 'text'.")
        pid = str(p["id"])
        if pid in seen:
            raise AscpError(f"{where}: passage id {pid!r} appears twice in the pool; ids must be unique.")
        seen.add(pid)
        if not p["text"].strip():
            raise AscpError(f"{where}: passage {pid!r} has empty text.")
        score = p.get("score")
        out.append(Passage(id=pid, text=p["text"], title=str(p.get("title") or ""),
                           score=float(score) if isinstance(score, (int, float)) else None, rank=rank))
    return tuple(out)


def _units(where: str, raw: Any) -> tuple[AnswerUnit, ...]:
    if not isinstance(raw, list) or not raw:
        raise AscpError(f"{where}: the case has no gold answer units; give at least one entry in 'answers'.")
    units = []
    for i, a in enumerate(raw):
        if isinstance(a, list):
            a = {"aliases": a}
        if isinstance(a, str):
            a = {"aliases": [a]}
        if not isinstance(a, dict):
            raise AscpError(f"{where}: answer {i} must be a list of aliases or an object with 'aliases' or 'claim'.")
        aliases = tuple(str(x) for x in a.get("aliases", []) if str(x).strip())
        claim = a.get("claim")
        if not aliases and not (isinstance(claim, str) and claim.strip()):
            raise AscpError(f"{where}: answer {i} has no aliases and no claim.")
        units.append(AnswerUnit(id=str(a.get("id") or f"u{i}"), aliases=aliases, claim=claim))
    return tuple(units)


def parse_case(where: str, obj: dict[str, Any]) -> Case:
    cid = obj.get("id")
    if not isinstance(cid, (str, int)) or str(cid) == "":
        raise AscpError(f"{where}: field 'id' must be a non-empty string.")
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise AscpError(f"{where}: the question is empty or missing.")
    return Case(id=str(cid), question=question, pool=_passages(where, obj.get("pool")),
                units=_units(where, obj.get("answers")), task=str(obj.get("task") or "generic"))


def load_jsonl_cases(path: Path, limit: int | None = None) -> list[Case]:
    cases = []
    for number, obj in read_jsonl(path):
        cases.append(parse_case(f"{path}:{number}", obj))
        if limit is not None and len(cases) >= limit:
            break
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise AscpError(f"{path}: case ids must be unique.")
    return cases
