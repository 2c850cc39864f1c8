"""Adapters to the RAG stacks people already run, each behind an extra (`pip install ascp[NAME]`)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ascp.errors import AscpError
from ascp.types import AttributionResult


def require(module: str, extra: str) -> ModuleType:
    """Import an optional framework, or one sentence naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise AscpError(f"this adapter needs {module.split('.')[0]}, which is not installed; install it with "
                        f"`pip install -e '.[{extra}]'` in a clone of ascp.") from None


def reading_metadata(result: AttributionResult, passage_id: str) -> dict[str, Any]:
    """What every adapter writes into a document's metadata: `ascp_score` (raw), `ascp_normalized`,
    `ascp_used`, and, when the probe read the answer per sentence (`Probe(..., spans="sentences")`),
    `ascp_sentences`: per answer sentence, its text and characters and this passage's reading by it."""
    meta: dict[str, Any] = {"ascp_score": result.scores[passage_id], "ascp_normalized": result.normalized[passage_id],
                            "ascp_used": passage_id in result.used}
    if result.spans:
        meta["ascp_sentences"] = sentence_readings(result, passage_id)
    return meta


def sentence_readings(result: AttributionResult, passage_id: str) -> list[dict[str, Any]]:
    """One passage's reading by each answer sentence, in answer order (empty without per-sentence
    readings): `text`, `start`, `end`, `score`, `normalized`, `used`."""
    return [{"text": s.text, "start": s.start, "end": s.end, "score": s.reading.scores[passage_id],
             "normalized": s.reading.normalized[passage_id], "used": passage_id in s.reading.used}
            for s in result.spans]
