"""Readings per response sentence, from the passes the probe already ran.

Exact leave-one-out keeps the log-probability of every response token under the full prompt and
under each passage's deletion, so the reading of any part of the response is the mean over its
tokens of `log p(token | full) - log p(token | without the passage)`, with no further pass; ContextCite
refits its surrogate on the same masks' log-probabilities of the part (as the original does). An
estimator declaring `token_readings` gives that scorer (`Scores.span_scores` / `Scores.scorer`).
`sentence_spans` splits a response into sentences (sentencex: rules, no model, no download),
`assign_tokens` gives each response token to the sentence its first non-space character lies in (the
spans partition the response's tokens, so the whole `loo` score is the token-weighted mean of its
sentences' scores), and `span_readings` reads each span under the probe's threshold rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from ascp.errors import AscpError
from ascp.reading import read_scores
from ascp.types import SpanReading, token_anchor

if TYPE_CHECKING:
    import numpy as np


class Probed(Protocol):
    """What a sentence reading needs of a probe step (`ProbeReading` has it): the estimator's span
    scorer and each response token's characters."""

    @property
    def span_scores(self) -> Callable[[Sequence[int]], np.ndarray] | None: ...

    @property
    def token_spans(self) -> tuple[tuple[int, int], ...] | None: ...

SPAN_KINDS = ("sentences",)
"""What `spans=` may name (None: the whole response only)."""


def check_spans(spans: object) -> str | None:
    """`spans` when it is None or a kind of `SPAN_KINDS`, else one sentence."""
    if spans is not None and spans not in SPAN_KINDS:
        raise AscpError(f"spans must be {' or '.join(SPAN_KINDS)} (or None for the whole response only), got "
                        f"{spans!r}.")
    return None if spans is None else str(spans)


def sentence_spans(text: str, language: str = "en") -> list[tuple[int, int]]:
    """Character spans [start, end) of the sentences of `text`, each without the whitespace around it
    (sentencex may open a sentence with the space after a citation marker); in order, covering every
    non-space character (a text with no sentence boundary is one sentence)."""
    import sentencex

    out = []
    for bound in sentencex.get_sentence_boundaries(language, text):
        start, end = int(bound["start_index"]), int(bound["end_index"])
        piece = text[start:end]
        if piece.strip():
            start += len(piece) - len(piece.lstrip())
            out.append((start, start + len(piece.strip())))
    return out


def assign_tokens(spans: Sequence[tuple[int, int]], token_spans: Sequence[tuple[int, int]],
                  text: str) -> list[list[int]]:
    """For each span, the response tokens whose first non-space character lies in it or in the whitespace
    after it (before the next span starts): every token goes to exactly one span, placed by
    `token_anchor` (its first non-space character, not its first character)."""
    if not spans:
        return []
    starts = [s for s, _ in spans]
    groups: list[list[int]] = [[] for _ in spans]
    for i, (a, b) in enumerate(token_spans):
        at = token_anchor(text, a, b)
        j = max((k for k, s in enumerate(starts) if s <= at), default=0)
        groups[j].append(i)
    return groups


def read_sentences(ids: Sequence[str], probed: Probed, text: str, threshold: float | None,
                   where: str, model: str) -> tuple[SpanReading, ...]:
    """THE per-sentence reading of a probed response (`ascp.Probe`, the loop): its sentences read by the
    estimator's span scorer over the passes it ran, or one sentence when the model gave no token offsets."""
    if probed.span_scores is None or probed.token_spans is None:
        raise AscpError(f"{where}: model {model!r} gives no character offsets of its response tokens, so the "
                        "response's sentences cannot be read; use a transformers or llama.cpp model, or drop spans.")
    return span_readings(ids, probed.span_scores, probed.token_spans, text, sentence_spans(text), threshold, where)


def span_readings(ids: Sequence[str], scorer: Callable[[Sequence[int]], np.ndarray],
                  token_spans: Sequence[tuple[int, int]], text: str, spans: Sequence[tuple[int, int]],
                  threshold: float | None, where: str = "the response") -> tuple[SpanReading, ...]:
    """The reading of each span by `scorer` (the estimator's scores over the span's tokens, from the passes
    it ran), spans with no token of their own merged into a neighbour (so the spans keep partitioning
    the tokens)."""
    if not spans:
        raise AscpError(f"{where} has no sentence (it is empty or all whitespace), so it has no span to read.")
    groups = assign_tokens(spans, token_spans, text)
    merged: list[tuple[int, int, list[int]]] = []
    pending: tuple[int, list[int]] | None = None  # a leading span with no token, joined to the next
    for (start, end), tokens in zip(spans, groups, strict=True):
        if pending is not None:
            start, tokens, pending = pending[0], pending[1] + tokens, None
        if not tokens:
            if merged:
                merged[-1] = (merged[-1][0], end, merged[-1][2])
            else:
                pending = (start, tokens)
            continue
        merged.append((start, end, tokens))
    if not merged:
        raise AscpError(f"{where}: no response token lies in any sentence, so no sentence can be read.")
    return tuple(SpanReading(start, end, text[start:end], len(tokens), read_scores(ids, scorer(tokens), threshold))
                 for start, end, tokens in merged)


__all__ = ["SPAN_KINDS", "SpanReading", "assign_tokens", "check_spans", "read_sentences", "sentence_spans",
           "span_readings"]
