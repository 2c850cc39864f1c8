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
    supporting: bool | None = None  # gold supporting paragraph (HotpotQA); None where the format has no such label

    @property
    def full_text(self) -> str:
        """"title: text" (or the text alone when untitled): what embedders and BM25 read."""
        return f"{self.title}: {self.text}" if self.title.strip() else self.text


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


@dataclass(frozen=True)
class AnswerUnit:
    """A gold answer unit: a set of aliases (string-matched), or a claim (NLI-matched tasks)."""

    id: str
    aliases: tuple[str, ...] = ()
    claim: str | None = None


@dataclass(frozen=True)
class Case:
    """One question with its ranked pool (rank order, best first) and gold answer units."""

    id: str
    question: str
    pool: tuple[Passage, ...]
    units: tuple[AnswerUnit, ...]
    task: str = "generic"

    def passage(self, passage_id: str) -> Passage:
        for p in self.pool:
            if p.id == passage_id:
                return p
        raise KeyError(passage_id)


@dataclass(frozen=True)
class Round:
    """One generation of a portfolio: its context, response and probe reading."""

    round: int  # 1-based
    context: tuple[str, ...]  # passage ids in prompt order
    response: str
    response_tokens: int
    scores: dict[str, float]
    normalized: dict[str, float]
    used: tuple[str, ...]
    seconds: float
    steered: bool = False  # decoded with attribution steering (Eq. 5): steering on and O non-empty
    overused: int = 0  # |O|: passages flagged used in earlier rounds (0 when steering is off)
    prompt_tokens: int = 0  # tokens of the (full-context) prompt: the cost axis of Fig. 6
    generation_seconds: float = 0.0  # this round's share of generation wall time, probe excluded


@dataclass(frozen=True)
class Portfolio:
    """The T rounds one policy produced for one case."""

    case_id: str
    policy: str
    rounds: tuple[Round, ...]

    @property
    def offered(self) -> tuple[str, ...]:
        """Distinct passage ids shown across rounds (O_T), in order of first appearance."""
        seen: dict[str, None] = {}
        for r in self.rounds:
            for pid in r.context:
                seen.setdefault(pid, None)
        return tuple(seen)
