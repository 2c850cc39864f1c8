"""Frozen value types shared by every stage."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Passage:
    """A retrieved passage. `id` is immutable: it names the passage in every prompt it appears in."""

    id: str
    text: str
    title: str = ""
    score: float | None = None
    rank: int | None = None


@dataclass(frozen=True)
class AttributionRequest:
    """One probe request: a question, an ordered context, and a fixed response (None: generate it)."""

    id: str
    question: str
    passages: tuple[Passage, ...]
    response: str | None = None


@dataclass(frozen=True)
class AttributionResult:
    """One estimator's reading of one request; `scores` follow the context order of the request."""

    id: str
    estimator: str
    response: str
    response_tokens: int
    scores: dict[str, float]
    normalized: dict[str, float]
    used: tuple[str, ...]
    prompt: str
    passage_spans: dict[str, tuple[int, int]]
    seconds: float
    extra: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """The record written by `ascp attribute` (one JSONL line)."""
        return {
            "id": self.id,
            "estimator": self.estimator,
            "response": self.response,
            "response_tokens": self.response_tokens,
            "scores": self.scores,
            "normalized": self.normalized,
            "used": list(self.used),
            "prompt": self.prompt,
            "passage_spans": {k: list(v) for k, v in self.passage_spans.items()},
            "seconds": round(self.seconds, 4),
            **self.extra,
        }
