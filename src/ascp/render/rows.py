"""What a view of one attribution shows: one row per passage, in context order."""

from __future__ import annotations

from dataclasses import dataclass

from ascp.types import AttributionResult


@dataclass(frozen=True)
class PassageRow:
    id: str
    text: str  # the passage block as the model saw it, without its trailing separator
    score: float
    normalized: float
    used: bool


def passage_rows(result: AttributionResult) -> list[PassageRow]:
    """A row per source; a sentence source (`sources="sentences"`) shows its id before its text."""
    def text(pid: str) -> str:
        shown = result.passage_text(pid).strip()
        return f"[{pid}] {shown}" if result.sources == "sentences" else shown

    return [PassageRow(id=pid, text=text(pid), score=score, normalized=result.normalized[pid], used=pid in result.used)
            for pid, score in result.scores.items()]
