"""Frozen value types shared by every stage, each with its JSON record (`to_json`/`from_json`).

Results also render themselves: `to_pandas()` for a frame, `_repr_html_()` for a notebook (the
one renderer of `ascp.render`, shared with the console tables).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascp.reading import Reading


def _reading_of(record: Mapping[str, Any]) -> Reading:
    """The reading a record holds (scores, normalized, used, and the threshold where it states one)."""
    from ascp.reading import Reading

    threshold = record.get("threshold")
    return Reading(scores={k: float(v) for k, v in record["scores"].items()},
                   normalized={k: float(v) for k, v in record["normalized"].items()},
                   used=tuple(record["used"]), threshold=None if threshold is None else float(threshold))


class _ReadingView:
    """`scores`, `normalized`, `used` and `threshold` of a value that holds a `reading`."""

    reading: Reading

    @property
    def scores(self) -> dict[str, float]:
        """Raw score per passage id, context order."""
        return self.reading.scores

    @property
    def normalized(self) -> dict[str, float]:
        """[raw]_+ / sum [raw]_+ per passage id."""
        return self.reading.normalized

    @property
    def used(self) -> tuple[str, ...]:
        """The passages whose normalised score reaches `threshold` (the tau(k) rule)."""
        return self.reading.used

    @property
    def threshold(self) -> float | None:
        """The cut `used` was read at (tau(k) or a fixed threshold); None in a record written before
        records stated it."""
        return self.reading.threshold


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


def token_anchor(text: str, start: int, end: int) -> int:
    """Where the token covering text[start:end] sits: its first non-space character, or its start when it is
    all whitespace. Byte-level BPE tokenizers (SmolLM2, Llama 3, Qwen) fold the space before a word into the
    word's token (" It"), so a token belongs with the word it spells, not with the space before it; the
    rule places response tokens in sentences and prompt tokens in sources."""
    piece = text[start:end]
    return start + len(piece) - len(piece.lstrip()) if piece.strip() else start


def tokens_overlapping(token_spans: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """The response tokens (indexes) whose characters overlap [start, end): the tokens of a span read by
    `for_span` and `read_spans`."""
    return [i for i, (a, b) in enumerate(token_spans) if a < end and b > start and b > a]


@dataclass(frozen=True)
class SpanScorer:
    """How a reading reads any part of its response from the passes its estimator ran: `score(tokens)` gives
    the estimator's raw scores (context order) over those response tokens; `token_spans` is the character
    span of each response token in the response text (the backend's)."""

    score: Callable[[Sequence[int]], Any]
    token_spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class TokenLogprobs:
    """Per-token response log-probabilities behind a single-passage ablation reading.

    full: shape (n,) under the full prompt; ablated: shape (k, n), one row per passage (context
    order); spans: the character span of each response token in the response text.
    """

    full: Any
    ablated: Any
    spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SpanReading:
    """The probe's reading of one part of the response: characters [start, end) of the response, its
    `tokens` response tokens, and the reading over them (scores in nats per token for `loo`)."""

    start: int
    end: int
    text: str
    tokens: int
    reading: Reading

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "text": self.text, "tokens": self.tokens,
                "scores": self.reading.scores, "normalized": self.reading.normalized, "used": list(self.reading.used)}

    @classmethod
    def from_json(cls, record: Mapping[str, Any], threshold: float | None) -> SpanReading:
        reading = _reading_of({**record, "threshold": threshold})
        return cls(int(record["start"]), int(record["end"]), str(record["text"]), int(record["tokens"]), reading)


@dataclass(frozen=True)
class AttributionResult(_ReadingView):
    """One estimator's reading of one request (`reading`: scores in the context order of the request,
    normalised scores, the passages used and the threshold they were read at).

    `prompt` is the exact chat-templated text scored before the response and `passage_spans`
    the character span of each source in it: a passage block, or with `sources="sentences"` one
    sentence of a passage (source ids `<passage id>#<n>`). `unit` is the unit of `scores` as the
    estimator declares it ("nats/token" for an estimator on leave-one-out's scale, else "score").
    `token_logprobs` (not written to JSON) keeps the per-token log-probabilities of `loo` and
    `replace`; `scorer` (not written either) reads any part of the response for every estimator that
    declares `token_readings` (`read_spans`, `for_span`).
    """

    id: str
    estimator: str
    response: str
    response_tokens: int
    reading: Reading
    prompt: str
    passage_spans: dict[str, tuple[int, int]]
    seconds: float
    extra: dict[str, object] = field(default_factory=dict)
    token_logprobs: TokenLogprobs | None = field(default=None, compare=False, repr=False)
    unit: str = "score"
    tokens_processed: int = 0  # tokens the estimator fed the model (the same with and without spans)
    spans: tuple[SpanReading, ...] = ()  # per sentence (`spans="sentences"`), in response order
    sources: str = "passages"  # what the scores are over: "passages" or "sentences" (of the passages)
    scorer: SpanScorer | None = field(default=None, compare=False, repr=False)

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
            **({"threshold": self.threshold} if self.threshold is not None else {}),
            "prompt": self.prompt,
            "passage_spans": {k: list(v) for k, v in self.passage_spans.items()},
            "seconds": round(self.seconds, 4),
            "tokens_processed": self.tokens_processed,
            "unit": self.unit,
            **({"sources": self.sources} if self.sources != "passages" else {}),
            **({"spans": [span.to_json() for span in self.spans]} if self.spans else {}),
            **self.extra,
        }

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> AttributionResult:
        known = ({f.name for f in fields(cls)} - {"extra", "reading", "token_logprobs", "scorer"}
                 | {"scores", "normalized", "used", "threshold"})
        threshold = record.get("threshold")
        return cls(
            id=str(record["id"]), estimator=str(record["estimator"]), response=str(record["response"]),
            response_tokens=int(record["response_tokens"]), reading=_reading_of(record), prompt=str(record["prompt"]),
            passage_spans={k: (int(v[0]), int(v[1])) for k, v in record["passage_spans"].items()},
            seconds=float(record["seconds"]),
            unit=str(record.get("unit", "score")),
            tokens_processed=int(record.get("tokens_processed", 0)),
            spans=tuple(SpanReading.from_json(span, None if threshold is None else float(threshold))
                        for span in record.get("spans", ())),
            sources=str(record.get("sources", "passages")),
            extra={k: v for k, v in record.items() if k not in known},
        )

    def passage_text(self, passage_id: str) -> str:
        """The source as the model saw it: a passage's block (identifier, title and text), or a sentence."""
        start, end = self.passage_spans[passage_id]
        return self.prompt[start:end]

    def to_pandas(self):
        """One row per passage (context order): id, score, normalized, used."""
        import pandas as pd

        return pd.DataFrame({
            "id": list(self.scores),
            "score": list(self.scores.values()),
            "normalized": [self.normalized[d] for d in self.scores],
            "used": [d in self.used for d in self.scores],
        })

    def for_span(self, start: int, end: int) -> AttributionResult:
        """The same reading for the response tokens overlapping characters [start, end) of the
        response: per-token LOO averaged over those tokens only, from the stored log-probabilities
        (no new model passes)."""
        from ascp.errors import AscpError
        from ascp.reading import read_span

        if self.token_logprobs is None:
            raise AscpError(f"for_span needs the per-token log-probabilities of a `loo` or `replace` reading; "
                            f"this one is {self.estimator!r} (or was read from JSON).")
        if not 0 <= start < end <= len(self.response):
            raise AscpError(f"span [{start}, {end}) is not inside the response of {len(self.response)} characters.")
        tokens = tokens_overlapping(self.token_logprobs.spans, start, end)
        if not tokens:
            raise AscpError(f"no response token overlaps characters [{start}, {end}).")
        reading = read_span(list(self.scores), self.token_logprobs.full, self.token_logprobs.ablated, tokens,
                            self.threshold)
        return replace(self, response=self.response[start:end], response_tokens=len(tokens), reading=reading,
                       seconds=0.0, token_logprobs=None, spans=(), scorer=None)

    def read_spans(self, spans: Sequence[tuple[int, int]]) -> tuple[SpanReading, ...]:
        """The reading of each character span [start, end) of the response, many at once, from the passes
        the estimator already ran (`scorer`: every estimator declaring `token_readings`): a span's
        tokens are the response tokens overlapping it; spans may overlap. One sentence for a span
        outside the response or holding no token."""
        from ascp.errors import AscpError
        from ascp.reading import read_scores

        where = f"reading {self.id!r}"
        if self.scorer is None:
            raise AscpError(f"{where} keeps no span scorer (its estimator {self.estimator!r} cannot read a part of the "
                            "response, or it was read from JSON); probe it again with an estimator that can (ascp "
                            "estimators: token_readings).")
        groups = []  # every span checked before any is read
        for n, span in enumerate(spans):
            if (not isinstance(span, (tuple, list)) or len(span) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)):
                raise AscpError(f"{where}: span {n} must be a pair of character offsets (start, end), got {span!r}.")
            start, end = int(span[0]), int(span[1])
            if not 0 <= start < end <= len(self.response):
                raise AscpError(f"{where}: span {n} [{start}, {end}) is not inside the response of "
                                f"{len(self.response)} characters; give 0 <= start < end <= the response's length.")
            tokens = tokens_overlapping(self.scorer.token_spans, start, end)
            if not tokens:
                raise AscpError(f"{where}: span {n} [{start}, {end}) holds no response token (only whitespace "
                                "between tokens); widen it.")
            groups.append((start, end, tokens))
        ids = list(self.scores)
        return tuple(SpanReading(start, end, self.response[start:end], len(tokens),
                                 read_scores(ids, self.scorer.score(tokens), self.threshold))
                     for start, end, tokens in groups)

    def _repr_html_(self) -> str:
        from ascp.render import attribution_html

        return attribution_html(self)


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
class Round(_ReadingView):
    """One generation of a portfolio: its context, response and probe reading (`reading`)."""

    round: int  # 1-based
    context: tuple[str, ...]  # passage ids in prompt order
    response: str
    response_tokens: int
    reading: Reading  # raw -> normalised -> used, and the threshold it was read at
    seconds: float
    steered: bool = False  # decoded with attribution steering (Eq. 5): steering on and O non-empty
    overused: int = 0  # |O|: passages flagged used in earlier rounds (0 when steering is off)
    prompt_tokens: int = 0  # tokens of the (full-context) prompt: the cost axis of Fig. 6
    generation_seconds: float = 0.0  # this round's share of generation wall time, probe excluded
    probe_tokens: int = 0  # tokens the probe fed (less with a warmer prefix store or request cache)
    probe_extra: Mapping[str, Any] = field(default_factory=dict)
    """What the estimator says it did (`Scores.extra`, e.g. `gated`'s passages verified exactly)."""
    spans: tuple[SpanReading, ...] = ()  # per response sentence when the run asked for them (`spans`)

    def to_json(self) -> dict[str, Any]:
        """The round's record (a line of `rounds.jsonl` without the case id)."""
        record = {
            "round": self.round,
            "context": list(self.context),
            "response": self.response,
            "response_tokens": self.response_tokens,
            "scores": self.scores,
            "normalized": self.normalized,
            "used": list(self.used),
            "steered": self.steered,
            "overused": self.overused,
            "seconds": round(self.seconds, 4),
            "prompt_tokens": self.prompt_tokens,
            "generation_seconds": round(self.generation_seconds, 4),
            "probe_tokens": self.probe_tokens,
        }
        if self.threshold is not None:
            record["threshold"] = self.threshold
        if self.probe_extra:  # only estimators that report something (loo reports nothing)
            record["probe_extra"] = dict(self.probe_extra)
        if self.spans:
            record["spans"] = [span.to_json() for span in self.spans]
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Round:
        return cls(
            round=int(record["round"]), context=tuple(record["context"]), response=str(record["response"]),
            response_tokens=int(record["response_tokens"]), reading=_reading_of(record),
            seconds=float(record.get("seconds", 0.0)),
            steered=bool(record.get("steered", False)), overused=int(record.get("overused", 0)),
            prompt_tokens=int(record.get("prompt_tokens", 0)),
            generation_seconds=float(record.get("generation_seconds", 0.0)),
            probe_tokens=int(record.get("probe_tokens", 0)), probe_extra=dict(record.get("probe_extra", {})),
            spans=tuple(SpanReading.from_json(span, None if record.get("threshold") is None
                                              else float(record["threshold"])) for span in record.get("spans", ())),
        )


@dataclass(frozen=True)
class Portfolio:
    """The T rounds one policy produced for one case, with the case's metrics once measured."""

    case_id: str
    policy: str
    rounds: tuple[Round, ...]
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def offered(self) -> tuple[str, ...]:
        """Distinct passage ids shown across rounds (O_T), in order of first appearance."""
        seen: dict[str, None] = {}
        for r in self.rounds:
            for pid in r.context:
                seen.setdefault(pid, None)
        return tuple(seen)

    def to_json(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "policy": self.policy, "metrics": dict(self.metrics),
                "rounds": [r.to_json() for r in self.rounds]}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Portfolio:
        return cls(case_id=str(record["case_id"]), policy=str(record["policy"]),
                   rounds=tuple(Round.from_json(r) for r in record["rounds"]),
                   metrics={k: float(v) for k, v in record.get("metrics", {}).items()})

    def to_pandas(self):
        """One row per round: round, context, response, used, response tokens, seconds."""
        import pandas as pd

        return pd.DataFrame([{"case_id": self.case_id, "policy": self.policy, "round": r.round,
                              "context": list(r.context), "response": r.response, "used": list(r.used),
                              "response_tokens": r.response_tokens, "seconds": r.seconds} for r in self.rounds])

    def _repr_html_(self) -> str:
        from ascp.render import portfolio_html

        return portfolio_html(self)
