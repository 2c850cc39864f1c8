"""ALCE JSON files: ASQA, QAMPARI and ELI5 (a JSON list of items, with or without `docs`).

Gold units, one per:
- ASQA    `qa_pairs[*]`       aliases = its `short_answers` (pairs without short answers are skipped);
- QAMPARI `answers[*]`        aliases = that alias list (a bare string is one alias);
- ELI5    `claims[*]`         a claim unit (no aliases; matched by NLI entailment, `ascp.metrics.attestation`).

The pool is `docs` (`{id?, title, text, score?}`), in file order; a doc without an `id` is named
`d<position>`, duplicate ids and empty texts are dropped (first occurrence kept).

ALCE's own files list each item's docs in their retriever's order (GTR for ASQA and QAMPARI, BM25
for ELI5; paper Sec. 7.1), so that order is the pool's ranking. A file whose docs name two or more
retrievers in a `source` field within one item is a merged union (the shared ASQA pools: BM25
`sparse` + `hybrid` hits, with scores on different scales): its list order is not a ranking, and
`read_alce` says so (`ascp.data.load_cases` then re-ranks under `rank_by="auto"`). The case id is
`id`, else `sample_id`, else the item's position. Format `alce` decides the task of every item by
its fields (`qa_pairs` > `claims` > `answers`); formats `asqa`, `qampari` and `eli5` require them.

Gold-only files (the ALCE evaluation splits without retrieval): with `require_pool=True` (what
portfolio runs need) an item without docs is an error; with `require_pool=False` (gold statistics,
density bookkeeping) it becomes a Case with an empty pool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascp.data.detect import read_json_list, wrong_format
from ascp.errors import AscpError
from ascp.types import AnswerUnit, Case, Passage

TASK_FIELDS = {"asqa": "qa_pairs", "eli5": "claims", "qampari": "answers"}


def item_task(item: dict[str, Any]) -> str | None:
    """The ALCE task an item belongs to, from its gold field; None when it has none."""
    return next((task for task, field in TASK_FIELDS.items() if field in item), None)


def _strings(values: Any) -> tuple[str, ...]:
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list):
        return ()
    return tuple(dict.fromkeys(str(v).strip() for v in values if isinstance(v, (str, int, float)) and str(v).strip()))


def _units(task: str, where: str, raw: Any) -> tuple[AnswerUnit, ...]:
    field = TASK_FIELDS[task]
    if not isinstance(raw, list):
        raise AscpError(f"{where}: field {field!r} must be a list.")
    if task == "asqa":
        units = [AnswerUnit(f"qa{i}", _strings(qa.get("short_answers")) if isinstance(qa, dict) else ())
                 for i, qa in enumerate(raw)]
    elif task == "qampari":
        units = [AnswerUnit(f"a{i}", _strings(aliases)) for i, aliases in enumerate(raw)]
    else:
        units = [AnswerUnit(f"c{i}", claim=c.strip()) for i, c in enumerate(raw) if isinstance(c, str) and c.strip()]
    units = [u for u in units if u.aliases or u.claim]
    if not units:
        raise AscpError(f"{where} has no gold units (field {field!r} holds no usable answers).")
    return tuple(units)


def _pool(where: str, docs: Any) -> tuple[Passage, ...]:
    if docs is None:
        return ()
    if not isinstance(docs, list):
        raise AscpError(f"{where}: field 'docs' must be a list of passages.")
    pool, seen = [], set()
    for j, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
            raise AscpError(f"{where}: docs[{j}] needs a string 'text'.")
        pid = str(doc["id"]) if doc.get("id") is not None else f"d{j}"
        if pid in seen or not doc["text"].strip():
            continue
        seen.add(pid)
        score = doc.get("score")
        pool.append(Passage(id=pid, title=str(doc.get("title") or ""), text=doc["text"],
                            score=float(score) if isinstance(score, (int, float)) else None))
    return tuple(pool)


def merged_retrievers(items: list[Any]) -> bool:
    """True when some item's docs name two or more retrievers (`source`): a merged union whose
    list order is not a ranking."""
    for item in items:
        docs = item.get("docs") if isinstance(item, dict) else None
        if isinstance(docs, list):
            sources = {str(d["source"]) for d in docs if isinstance(d, dict) and d.get("source") is not None}
            if len(sources) > 1:
                return True
    return False


def load_alce(path: Path, task: str | None = None, limit: int | None = None, require_pool: bool = True) -> list[Case]:
    """Read an ALCE JSON list; `task` forces asqa | qampari | eli5 (None: decide per item)."""
    return read_alce(path, task, limit, require_pool)[0]


def read_alce(path: Path, task: str | None = None, limit: int | None = None,
              require_pool: bool = True) -> tuple[list[Case], bool]:
    """(`load_alce`'s cases, whether the file's doc order is a ranking: False for merged unions)."""
    fmt = task or "alce"
    items = read_json_list(path, "ALCE items")
    cases: list[Case] = []
    for n, item in enumerate(items):
        where = f"{path} item {n}"
        if not isinstance(item, dict):
            raise AscpError(f"{where} is not a JSON object; is this an ALCE file?")
        item_kind = task or item_task(item)
        if item_kind is None:
            raise wrong_format(path, where, "'qa_pairs', 'claims' or 'answers'", fmt)
        if TASK_FIELDS[item_kind] not in item:
            raise wrong_format(path, where, repr(TASK_FIELDS[item_kind]), fmt)
        question = item.get("question")
        if not isinstance(question, str) or not question.strip():
            raise AscpError(f"{where} has no 'question' field (or it is empty).")
        cid = str(item.get("id") or item.get("sample_id") or n)
        units = _units(item_kind, f"{where} ({cid})", item[TASK_FIELDS[item_kind]])
        pool = _pool(f"{where} ({cid})", item.get("docs"))
        if not pool and require_pool:
            raise AscpError(
                f"{where} ({cid}) has no passages ('docs'); ALCE gold-only files need retrieved docs to run "
                "portfolios, so pass the ALCE retrieval file (with docs) for this task."
            )
        cases.append(Case(id=cid, question=question, pool=pool, units=units, task=item_kind))
        if limit is not None and len(cases) >= limit:
            break
    return cases, not merged_retrievers(items)
