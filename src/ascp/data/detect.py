"""Format detection (`--format auto`) from the first record of a file, and the JSON-list reader.

Rules, first match wins (the record is the first item of a JSON list, or the first line of a
JSON-lines file; large ALCE files are not parsed whole to detect them):

- a line `<query_idx>\\tNombre:\\t...` among the first lines          -> `recipes`
- JSON list, first item has `_id`, `context`, `supporting_facts`    -> `hotpotqa`
- JSON list, first item has `qa_pairs` / `claims` / `answers`        -> `asqa` / `eli5` / `qampari`
- JSON lines, first record has `question_id` and `contexts`          -> `hotpotqa-ircot`
- JSON lines, first record has `pool`, or the file ends in `.jsonl`  -> `jsonl`
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ascp.errors import AscpError

_RECIPE_LINE = re.compile(r"^\d+\tNombre:\t")
_MAX_HEAD = 64 << 20  # give up detecting past 64 MiB of a first record


def _head(path: Path, size: int) -> str:
    with path.open("rb") as handle:
        return handle.read(size).decode("utf-8", errors="ignore").lstrip("\ufeff")


def first_record(path: Path) -> tuple[str, dict[str, Any] | None]:
    """("list" | "lines" | "other", the first JSON object or None), reading only as much as needed."""
    size = 1 << 16
    while True:
        head = _head(path, size)
        text = head.lstrip()
        if text.startswith("["):
            body = text[1:].lstrip()
            try:
                obj, _ = json.JSONDecoder().raw_decode(body)
            except json.JSONDecodeError:
                if len(head) < size or size >= _MAX_HEAD:  # whole file read, or too large to sniff
                    return "list", None
                size *= 4
                continue
            return "list", obj if isinstance(obj, dict) else None
        if text.startswith("{"):
            line = text.split("\n", 1)[0]
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                if "\n" not in text and len(head) == size and size < _MAX_HEAD:
                    size *= 4
                    continue
                return "lines", None
            return "lines", obj if isinstance(obj, dict) else None
        return "other", None


def detect_format(path: Path) -> str:
    """The format name of `path` (see the module docstring), or an AscpError naming the choices."""
    from ascp.data import FORMATS

    path = Path(path)
    head = _head(path, 1 << 14)
    if any(_RECIPE_LINE.match(line) for line in head.splitlines()[:5]):
        return "recipes"
    kind, obj = first_record(path)
    keys = set(obj) if obj else set()
    if kind == "list":
        if {"_id", "context", "supporting_facts"} <= keys:
            return "hotpotqa"
        for field, fmt in (("qa_pairs", "asqa"), ("claims", "eli5"), ("answers", "qampari")):
            if field in keys:
                return fmt
    if kind == "lines":
        if {"question_id", "contexts"} <= keys:
            return "hotpotqa-ircot"
        if "pool" in keys or path.suffix.lower() == ".jsonl":
            return "jsonl"
    choices = ", ".join(f for f in FORMATS if f != "auto")
    raise AscpError(f"cannot tell the format of {path}; pass --format with one of {choices}.")


def read_json_list(path: Path, what: str) -> list[Any]:
    """The JSON list in `path`, or an AscpError saying what was expected."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AscpError(f"cannot read {path} as a JSON list of {what} ({exc.__class__.__name__}).") from exc
    if not isinstance(items, list):
        raise AscpError(f"{path} is not a JSON list of {what}.")
    return items


def wrong_format(path: Path, where: str, field: str, fmt: str) -> AscpError:
    """The error for a record lacking `field` (e.g. "'qa_pairs'"), naming the format the file looks like."""
    try:
        seen = detect_format(path)
    except AscpError:
        seen = None
    hint = (f"this looks like a {seen} file; pass --format {seen} (or --format auto)" if seen and seen != fmt
            else f"is this a {fmt} file?")
    return AscpError(f"{where} has no {field} field; {hint}.")
