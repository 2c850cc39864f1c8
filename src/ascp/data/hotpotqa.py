"""HotpotQA: the official JSON format and the IRCoT JSON-lines format.

Official (`hotpot_dev_distractor_v1.json`): a JSON list of
    {_id, question, answer, supporting_facts: [[title, sent_idx], ...], context: [[title, [sentences]], ...]}
IRCoT (`hotpotqa_dev_distractor_ircot.jsonl`): one object per line,
    {question_id, question_text, answers_objects: [{spans: [...], number?, ...}], contexts: [{id, title,
     paragraph_text, is_supporting}]}

One case per question, task `hotpotqa`. Gold = one unit `answer` whose aliases are the answer
string (official) or every answer span (IRCoT; a `number` is used when there are no spans).
Pool = the context paragraphs; passage id = the paragraph's position (official) or its `id`
(IRCoT); text = the sentences joined as written; paragraphs with empty text are dropped.
`Passage.supporting` marks the gold supporting paragraphs (official: its title appears in
`supporting_facts`; IRCoT: `is_supporting`). The distractor setting shuffles the paragraphs, so
the file order carries no ranking: `load_cases` ranks these pools densely unless told otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascp.data.detect import read_json_list, wrong_format
from ascp.errors import AscpError
from ascp.jsonio import read_jsonl
from ascp.types import AnswerUnit, Case, Passage


def _need(obj: dict[str, Any], field: str, where: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(field)
    if not isinstance(value, kind) or (isinstance(value, (str, list)) and not value):
        raise AscpError(f"{where} has no {field!r} field (or it is empty or of the wrong type).")
    return value


def _case(cid: str, question: str, aliases: list[str], paragraphs: list[tuple[str, str, str, bool]],
          where: str, require_pool: bool) -> Case:
    aliases = list(dict.fromkeys(a.strip() for a in aliases if a.strip()))
    if not aliases:
        raise AscpError(f"{where} has an empty answer; every HotpotQA question needs one.")
    pool = tuple(Passage(id=pid, title=title, text=text, supporting=sup)
                 for pid, title, text, sup in paragraphs if text.strip())
    if not pool and require_pool:
        raise AscpError(f"{where} has no non-empty context paragraphs to form a pool.")
    return Case(id=cid, question=question, pool=pool, units=(AnswerUnit("answer", tuple(aliases)),), task="hotpotqa")


def load_hotpotqa(path: Path, limit: int | None = None, require_pool: bool = True) -> list[Case]:
    """The official HotpotQA JSON list."""
    cases = []
    for n, item in enumerate(read_json_list(path, "HotpotQA questions")):
        where = f"{path} item {n}"
        if not isinstance(item, dict) or "context" not in item:
            raise wrong_format(path, where, "'context'", "hotpotqa")
        cid = str(_need(item, "_id", where, (str, int)))
        where = f"{where} ({cid})"
        question = _need(item, "question", where, str)
        answer = _need(item, "answer", where, str)
        support = {str(f[0]) for f in _need(item, "supporting_facts", where, list) if isinstance(f, list) and f}
        paragraphs = []
        for j, entry in enumerate(item["context"] if isinstance(item["context"], list) else []):
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
                raise AscpError(f"{where}: context[{j}] must be [title, [sentences]].")
            title = str(entry[0])
            paragraphs.append((str(j), title, "".join(str(s) for s in entry[1]).strip(), title in support))
        cases.append(_case(cid, question, [answer], paragraphs, where, require_pool))
        if limit is not None and len(cases) >= limit:
            break
    return cases


def load_hotpotqa_ircot(path: Path, limit: int | None = None, require_pool: bool = True) -> list[Case]:
    """The IRCoT JSON-lines export of HotpotQA."""
    cases = []
    for number, obj in read_jsonl(path):
        where = f"{path}:{number}"
        if "contexts" not in obj:
            raise wrong_format(path, where, "'contexts'", "hotpotqa-ircot")
        cid = str(_need(obj, "question_id", where, (str, int)))
        where = f"{where} ({cid})"
        question = _need(obj, "question_text", where, str)
        aliases: list[str] = []
        for answer in _need(obj, "answers_objects", where, list):
            spans = [str(s) for s in answer.get("spans") or []] if isinstance(answer, dict) else []
            number_ = str(answer.get("number") or "") if isinstance(answer, dict) else ""
            aliases.extend(spans or [number_])
        paragraphs = []
        for j, ctx in enumerate(_need(obj, "contexts", where, list)):
            if not isinstance(ctx, dict) or not isinstance(ctx.get("paragraph_text"), str):
                raise AscpError(f"{where}: contexts[{j}] needs a string 'paragraph_text'.")
            pid = str(ctx.get("id", j))
            paragraphs.append((pid, str(ctx.get("title") or ""), ctx["paragraph_text"].strip(),
                               bool(ctx.get("is_supporting", False))))
        if len({p[0] for p in paragraphs}) != len(paragraphs):
            raise AscpError(f"{where}: context ids repeat; each paragraph needs a distinct 'id'.")
        cases.append(_case(cid, question, aliases, paragraphs, where, require_pool))
        if limit is not None and len(cases) >= limit:
            break
    return cases
