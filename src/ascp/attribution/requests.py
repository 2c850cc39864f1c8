"""Parse and validate `ascp attribute` input lines into `AttributionRequest`s.

Line format: {"id": str, "question": str, "passages": [{"id": str, "title": str (optional),
"text": str}, ...], "response": str or null}. The order of `passages` is the context order.

Every check here runs before any model work, and each failure is one `AscpError` sentence: a
wrong type, an empty field, a duplicate id, an id holding a line break or another control character,
or text that is not valid Unicode (an unpaired surrogate, which no tokenizer can encode and no
UTF-8 file can hold) or holds a NUL character (`ascp.params.check_text` / `check_id`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.jsonio import read_jsonl
from ascp.params import check_id, check_text
from ascp.types import AttributionRequest, Passage

check_unicode = check_text  # the name the request parser's callers know


def _text(where: str, obj: dict[str, Any], key: str, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if key not in obj:
        raise AscpError(f"{where}: the field {key!r} is missing.")
    if not isinstance(value, str):
        raise AscpError(f"{where}: field {key!r} must be a string, got {type(value).__name__}.")
    return check_unicode(f"{where}: field {key!r}", value)


def parse_id(value: Any) -> str | None:
    """A string or integer id as text; None for anything else (bools, floats, empty strings)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    try:
        text = str(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return None
    return text or None


def parse_passages(where: str, raw_passages: Any) -> tuple[Passage, ...]:
    """Validate a list of passage objects {"id", "title"?, "text"}: ids unique, texts non-empty."""
    if not isinstance(raw_passages, list) or not raw_passages:
        raise AscpError(f"{where}: the passage list is empty or missing; give at least one passage.")
    passages: list[Passage] = []
    seen: set[str] = set()
    for j, p in enumerate(raw_passages):
        if not isinstance(p, dict):
            raise AscpError(f"{where}: passage {j} must be an object with 'id' and 'text'.")
        pid = parse_id(p.get("id"))
        if pid is None:
            raise AscpError(f"{where}: passage {j} has no 'id' (a non-empty string or an integer); every passage "
                            "needs a unique id.")
        check_id(f"{where}: passage {j}'s id", pid)
        if pid in seen:
            raise AscpError(f"{where}: passage id {pid!r} appears twice; passage ids must be unique.")
        seen.add(pid)
        text = _text(f"{where} passage {pid!r}", p, "text")
        if not text.strip():
            raise AscpError(f"{where}: passage {pid!r} has empty text.")
        passages.append(Passage(id=pid, text=text, title=_text(f"{where} passage {pid!r}", p, "title",
                                                                  required=False)))
    return tuple(passages)


def parse_request(where: str, obj: dict[str, Any]) -> AttributionRequest:
    """Validate one request object; `where` names it in error messages (e.g. 'requests.jsonl:3')."""
    if not isinstance(obj, dict):
        raise AscpError(f"{where}: a request must be an object with id, question, passages and response, "
                        f"not a {type(obj).__name__}.")
    rid = parse_id(obj.get("id"))
    if rid is None:
        raise AscpError(f"{where}: field 'id' must be a non-empty string.")
    check_id(f"{where}: field 'id'", rid)
    question = _text(where, obj, "question")
    if not question.strip():
        raise AscpError(f"{where}: the question is empty; every request needs a question.")
    passages = parse_passages(where, obj.get("passages"))
    response = obj.get("response")
    if response is not None:
        if not isinstance(response, str):
            raise AscpError(f"{where}: 'response' must be a string or null, got {type(response).__name__}.")
        if not response.strip():
            raise AscpError(f"{where}: the response is empty; give a response or null to generate one.")
        check_unicode(f"{where}: field 'response'", response)
    return AttributionRequest(id=rid, question=question, passages=tuple(passages), response=response)


def load_requests(path: str | Path) -> list[AttributionRequest]:
    """Read and validate every request; the first problem raises with its line number."""
    requests = [parse_request(f"{path}:{n}", obj) for n, obj in read_jsonl(path)]
    counts = Counter(r.id for r in requests)
    dup = next((r.id for r in requests if counts[r.id] > 1), None)
    if dup is not None:
        raise AscpError(f"{path}: request id {dup!r} appears more than once; request ids must be unique.")
    return requests
