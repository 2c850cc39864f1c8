"""Citations and the probe: write causal citations from per-sentence readings (`cite_response`), and
check a response's own inline citations against what the probe found used (`check_citations`).

A RAG system that asks its model to cite (`[1]`, `[doc-id]`) makes a claim the causal probe can
test: every cited passage should be used, and every used passage cited. `check_citations` reads
the bracketed citations of the response, maps each to a passage (a number n is the n-th passage
when no passage has that id; otherwise ids match exactly) and compares with the reading.
Brackets holding prose ("[citation needed]") and markdown links ("[text](url)") are not
citations; a bracket of id-like tokens that names no passage is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ascp.errors import AscpError
from ascp.types import AttributionResult

CITATION = re.compile(r"\[([^\[\]]+)\](?!\()")  # not a markdown link [text](url)
_ID_LIKE = re.compile(r"^[\w:./#-]+$")  # a bracket of id-like tokens is a citation; "[citation needed]" is not


@dataclass(frozen=True)
class CitationCheck:
    cited: tuple[str, ...]  # passage ids cited, in order of first citation
    cited_and_used: tuple[str, ...]
    cited_not_used: tuple[str, ...]  # the response credits a passage the probe finds it did not use
    used_not_cited: tuple[str, ...]  # the response relied on a passage without crediting it
    sentences: tuple[SentenceCitations, ...] = ()  # per sentence, when the result holds sentence readings

    @property
    def precision(self) -> float:
        """Share of cited passages that were used (nan without citations)."""
        return len(self.cited_and_used) / len(self.cited) if self.cited else float("nan")


@dataclass(frozen=True)
class SentenceCitations:
    """One sentence of the attributed response: its own citations against its own reading's used set."""

    start: int
    end: int
    text: str
    check: CitationCheck


def _citations(text: str, ids: list[str]) -> list[tuple[int, str]]:
    """(character offset, passage id) of every citation in `text`; one sentence for one naming no passage."""
    found = []
    for match in CITATION.finditer(text):
        tokens = [t.strip() for t in match.group(1).split(",")]
        if not all(_ID_LIKE.match(t) for t in tokens):
            continue  # prose in brackets, not a citation
        for token in tokens:
            if token in ids:
                found.append((match.start(), token))
            elif token.isdigit() and 1 <= int(token) <= len(ids):
                found.append((match.start(), ids[int(token) - 1]))
            else:
                raise AscpError(f"citation [{token}] in the response names no passage of the context "
                                f"(ids: {', '.join(ids)}; or a number 1..{len(ids)}).")
    return found


def _compare(cited_ids: list[str], used: set[str], ids: list[str]) -> CitationCheck:
    cited = tuple(dict.fromkeys(cited_ids))
    return CitationCheck(cited=cited, cited_and_used=tuple(d for d in cited if d in used),
                         cited_not_used=tuple(d for d in cited if d not in used),
                         used_not_cited=tuple(d for d in ids if d in used and d not in cited))


def check_citations(result: AttributionResult, response: str | None = None) -> CitationCheck:
    """Compare the citations in `response` (default: the attributed response) with `result.used`.
    A citation that names no passage of the context raises one sentence.

    When `result` holds per-sentence readings (`spans="sentences"`) and the citations are read from the
    attributed response itself, `sentences` checks each sentence's citations against that sentence's
    own used set. A citation belongs to the sentence it follows: the one whose text it lies in, or the
    one before when it opens a sentence (`It was built.[1] It stands.`: [1] cites the first)."""
    text = result.response if response is None else response
    ids = list(result.scores)
    found = _citations(text, ids)
    whole = _compare([pid for _, pid in found], set(result.used), ids)
    if not result.spans or text != result.response:
        return whole
    owner: list[list[str]] = [[] for _ in result.spans]
    for at, pid in found:
        index = max((i for i, span in enumerate(result.spans) if span.start <= at), default=0)
        opening = CITATION.sub("", text[result.spans[index].start:at]).strip() == ""
        if opening and index > 0 and at < result.spans[index].end:
            index -= 1  # a citation that opens a sentence cites the one before it
        owner[index].append(pid)
    sentences = tuple(SentenceCitations(span.start, span.end, span.text,
                                        _compare(owner[i], set(span.reading.used), ids))
                      for i, span in enumerate(result.spans))
    return CitationCheck(whole.cited, whole.cited_and_used, whole.cited_not_used, whole.used_not_cited, sentences)


MARKERS = ("positions", "ids")
"""How `cite_response` writes a source: its context position (`[2]`) or its passage id (`[doc-7]`)."""


@dataclass(frozen=True)
class CitedSentence:
    """One response sentence with the passages it used, strongest first (`supported`: it used one)."""

    start: int
    end: int
    text: str
    sources: tuple[str, ...]

    @property
    def supported(self) -> bool:
        return bool(self.sources)

    def to_json(self) -> dict[str, object]:
        return {"start": self.start, "end": self.end, "text": self.text, "sources": list(self.sources),
                "supported": self.supported}


@dataclass(frozen=True)
class CitedResponse:
    """A response with a citation marker after each sentence for the passages that sentence used."""

    id: str
    text: str
    sentences: tuple[CitedSentence, ...]
    markers: str
    attribution: AttributionResult

    @property
    def unsupported(self) -> tuple[CitedSentence, ...]:
        """The sentences that used no passage."""
        return tuple(s for s in self.sentences if not s.supported)

    def to_json(self) -> dict[str, object]:
        """The record `ascp cite` writes (one JSONL line)."""
        return {"id": self.id, "cited": self.text, "sentences": [s.to_json() for s in self.sentences],
                "markers": self.markers, "estimator": self.attribution.estimator,
                "threshold": self.attribution.threshold}


def cite_response(result: AttributionResult, markers: str = "positions") -> CitedResponse:
    """Causal citations: after each sentence of the response, a marker for every passage the sentence
    used (its per-sentence reading, `spans="sentences"`), strongest first, written as the passage's
    context position (`[2]`, `[1][4]`; what `check_citations` reads back) or its id. A sentence that
    used no passage gets no marker and is marked unsupported."""
    if markers not in MARKERS:
        raise AscpError(f"markers must be positions or ids, got {markers!r}.")
    if not result.spans:
        raise AscpError(f"request {result.id!r} has no per-sentence readings; attribute it with spans='sentences' "
                        "(ascp cite does) to cite it.")
    ids = list(result.scores)
    pieces, sentences, cursor = [], [], 0
    for span in result.spans:
        order = sorted(span.reading.used, key=lambda pid: (-span.reading.normalized[pid], ids.index(pid)))
        marks = "".join(f"[{ids.index(pid) + 1}]" if markers == "positions" else f"[{pid}]" for pid in order)
        pieces.append(result.response[cursor:span.end] + marks)
        cursor = span.end
        sentences.append(CitedSentence(span.start, span.end, span.text, tuple(order)))
    pieces.append(result.response[cursor:])
    return CitedResponse(result.id, "".join(pieces), tuple(sentences), markers, result)
