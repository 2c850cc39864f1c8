"""A fit's readings on disk (`ascp fit-probe --readings FILE`): every context read (`ReadContext`, the
record type, defined here beside its log), one JSON line.

Reading a context (a sampled response, one attention pass, exact leave-one-out) is the whole cost
of a fit, so each one is kept the moment it is read: a resumed fit reads only the contexts the
file lacks, two processes given disjoint position ranges can fill one file at once, and a refit
with other settings (another target, other training positions) feeds no token at all.

Each line is `{"identity": {...}, "context": {...}}`; the context keeps the response's token ids, so
another feature can be read later without sampling again. The identity (feature layout, model
digest, data, sampling seed and length limit) decides whether a reading can be reused: a line of
another identity in the file is refused in one sentence, never mixed in. Lines are appended whole
by the one record log (`ascp.jsonio.append_line`, the experiment store's too); a last line cut
by a crash is ignored (and cut off by the next append), and of two readings of the same context
the first is kept (`ascp.records.format.keep_first`), except that a reading with knockout scores replaces one made
before they were read (`ascp fit-probe` adds them to such a file: a new pass, the exact loo kept).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ascp.attribution.attention_map import AttentionMap
from ascp.errors import AscpError
from ascp.jsonio import append_line, check_parent
from ascp.records.format import keep_first

ContextKey = tuple[str, tuple[str, ...]]
READINGS_FEATURE = "at2-response-rows-v1"
"""The attention features a reading holds (its identity's "feature"); knockout scores, read later,
are an optional part of each line, so readings made before them stay usable."""


@dataclass(frozen=True)
class ReadContext:
    """One context read both ways: features (k, layers, heads) and knockout scores (k,), and exact LOO (k,)."""

    case_id: str
    position: int
    passage_ids: tuple[str, ...]
    features: np.ndarray
    loo: np.ndarray
    response_tokens: int
    prompt_tokens: int
    attention_seconds: float
    loo_seconds: float
    attention_tokens: int
    loo_tokens: int
    spans: tuple[tuple[int, int], ...] = ()
    """Each passage block's token span [start, end) in the prompt."""
    response_ids: tuple[int, ...] = ()
    """The sampled response's token ids: another feature can be read from a readings file without
    sampling again (the exact `loo` is what costs)."""
    knockout: np.ndarray | None = None
    """Knockout scores (k,); None in a reading made before they were read (`read_contexts` adds them)."""

    @property
    def k(self) -> int:
        return len(self.passage_ids)

    def predicted(self, fitted: AttentionMap) -> np.ndarray:
        """The map's prediction of this context's exact LOO scores."""
        if self.knockout is None:
            raise AscpError(f"the reading of case {self.case_id!r} has no knockout scores; complete it with "
                            "ascp fit-probe --readings FILE.")
        return fitted.predict(self.features, self.knockout)


def context_key(case_id: str, passage_ids: Iterable[str]) -> ContextKey:
    """What identifies a read context within one identity: the case and its passages in prompt order."""
    return case_id, tuple(passage_ids)


def _as_json(context: ReadContext) -> dict[str, Any]:
    return {
        "case_id": context.case_id, "position": context.position, "passage_ids": list(context.passage_ids),
        "features": np.round(context.features, 9).tolist(), "loo": context.loo.tolist(),
        "spans": [list(s) for s in context.spans], "response_tokens": context.response_tokens,
        "prompt_tokens": context.prompt_tokens, "attention_seconds": context.attention_seconds,
        "loo_seconds": context.loo_seconds, "attention_tokens": context.attention_tokens,
        "loo_tokens": context.loo_tokens, "response_ids": list(context.response_ids),
        **({"knockout": context.knockout.tolist()} if context.knockout is not None else {}),
    }


def _from_json(row: Mapping[str, Any]) -> ReadContext:
    return ReadContext(
        str(row["case_id"]), int(row["position"]), tuple(str(p) for p in row["passage_ids"]),
        np.asarray(row["features"], dtype=np.float64), np.asarray(row["loo"], dtype=np.float64),
        int(row["response_tokens"]), int(row["prompt_tokens"]), float(row["attention_seconds"]),
        float(row["loo_seconds"]), int(row["attention_tokens"]), int(row["loo_tokens"]),
        tuple((int(a), int(b)) for a, b in row["spans"]), tuple(int(i) for i in row.get("response_ids", ())),
        np.asarray(row["knockout"], dtype=np.float64) if "knockout" in row else None,
    )


def check_readings_path(path: Path) -> Path:
    """`path` as a readings file can use it (a file, or none yet, in a folder that exists), or one sentence."""
    path = Path(path)
    if path.is_dir():
        raise AscpError(f"readings file {path} is a folder; give a file path (a .jsonl file).")
    check_parent(path, "readings file")
    return path


class FitReadings:
    """The readings file of one fit identity: what it holds, and appending to it."""

    def __init__(self, path: Path, identity: Mapping[str, Any]) -> None:
        self.path = check_readings_path(path)
        self.identity = dict(identity)

    def load(self) -> dict[ContextKey, ReadContext]:
        """The readings in the file by context key (first reading kept). One sentence for a line
        of another identity or a damaged line before the last."""
        if not self.path.exists():
            return {}
        lines = self.path.read_text(encoding="utf-8").split("\n")
        rows = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                identity, context = row["identity"], _from_json(row["context"])
            except (ValueError, KeyError, TypeError):
                if number >= len(lines) - 1:  # the last line, cut while it was written
                    continue
                raise AscpError(f"readings file {self.path}, line {number}: not a reading this ascp wrote; "
                                "remove the line or give another --readings file.") from None
            if identity != self.identity:
                differing = sorted(k for k in {*identity, *self.identity} if identity.get(k) != self.identity.get(k))
                raise AscpError(f"readings file {self.path}, line {number}: read with other settings "
                                f"({', '.join(differing)} differ), so it cannot be reused here; give another "
                                "--readings file or the settings it was read with.")
            rows.append(context)
        # A reading made before knockout scores existed is followed by its completed copy: that one counts.
        def key(c: ReadContext) -> ContextKey:
            return context_key(c.case_id, c.passage_ids)

        out = {key(c): c for c in keep_first(rows, key=key)}
        out.update({key(c): c for c in keep_first([c for c in rows if c.knockout is not None], key=key)})
        return out

    def append(self, context: ReadContext) -> None:
        """Add one reading: one whole line through the one record log (`ascp.jsonio.append_line`)."""
        line = json.dumps({"identity": self.identity, "context": _as_json(context)}, separators=(",", ":")) + "\n"
        append_line(self.path, line.encode("utf-8"))


__all__ = ["READINGS_FEATURE", "ContextKey", "FitReadings", "ReadContext", "check_readings_path", "context_key"]
