"""ALCE-style ASQA files (`../shared/data/asqa/asqa_wikidpr_pools.json`).

A JSON list of items with `id` (or `sample_id`), `question`, `qa_pairs` and `docs`.
Gold unit = one `qa_pair`; its `short_answers` are the aliases. The pool is `docs`; its
`score`s come from different retrievers and are not comparable, so `load_cases` re-ranks it.
Duplicate passage ids inside one pool are dropped (first occurrence kept).
"""

from __future__ import annotations

import json
from pathlib import Path

from ascp.errors import AscpError
from ascp.types import AnswerUnit, Case, Passage


def load_asqa(path: Path, limit: int | None = None) -> list[Case]:
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AscpError(f"cannot read {path} as an ASQA JSON list ({exc.__class__.__name__}).") from exc
    if not isinstance(items, list):
        raise AscpError(f"{path} is not a JSON list of ASQA items.")
    cases = []
    for n, item in enumerate(items):
        where = f"{path} item {n}"
        if not isinstance(item, dict) or "question" not in item:
            raise AscpError(f"{where} has no 'question'; is this an ALCE-style ASQA file?")
        units = tuple(
            AnswerUnit(id=f"qa{i}", aliases=tuple(a for a in qa.get("short_answers", []) if a.strip()))
            for i, qa in enumerate(item.get("qa_pairs") or [])
        )
        units = tuple(u for u in units if u.aliases)
        if not units:
            raise AscpError(f"{where} ({item.get('id')}) has no gold units (no qa_pairs with short answers).")
        pool, seen = [], set()
        for doc in item.get("docs") or []:
            pid = str(doc.get("id"))
            if pid in seen or not str(doc.get("text", "")).strip():
                continue
            seen.add(pid)
            pool.append(Passage(id=pid, title=str(doc.get("title") or ""), text=doc["text"],
                                score=doc.get("score")))
        if not pool:
            raise AscpError(f"{where} ({item.get('id')}) has an empty pool ('docs').")
        cases.append(Case(id=str(item.get("id") or item.get("sample_id") or n), question=item["question"],
                          pool=tuple(pool), units=units, task="asqa"))
        if limit is not None and len(cases) >= limit:
            break
    return cases
