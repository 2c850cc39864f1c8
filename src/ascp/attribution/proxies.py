"""Relevance proxies the probe is validated against: BM25 and embedding cosines.

`bm25`: BM25 (bm25s, Lucene variant, k1 = 1.5, b = 0.75) of each passage for the question,
with the passages of the request as the collection. `qd-cosine`: cosine between question and
passage embeddings. `yd-cosine`: cosine between response and passage embeddings. Passages are
embedded as "title: text" (or the text alone when untitled).

Per sentence (`spans="sentences"`) a proxy scores the sentence's text in place of its anchor: BM25 of
each passage for the sentence, the cosine between the sentence and each passage (for `qd-cosine`
too, so that per sentence it reads what the sentence says, as a citation baseline does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.data.ranking import bm25_scores
from ascp.embed.embedders import DEFAULT_EMBEDDER, embed
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


def text_scorer(lm: LanguageModel | None, item: ProbeInput,
                score_text: Callable[[str], np.ndarray]) -> Callable[[Sequence[int]], np.ndarray]:
    """A span scorer that scores the text of the response tokens it is given (characters from the first
    token's start to the last one's end, by the model's token offsets, read once when first asked)."""
    offsets: list[tuple[tuple[int, int], ...] | None] = []

    def scorer(tokens: Sequence[int]) -> np.ndarray:
        if not offsets:
            read = lm.response_token_spans(item.response_text) if lm is not None else None
            offsets.append(None if read is None else tuple(read))
        spans = offsets[0]
        if spans is None:
            raise ValueError("the model gives no token offsets")
        # the whitespace around a sentence lies in its tokens, not in its text
        return score_text(item.response_text[spans[min(tokens)][0]:spans[max(tokens)][1]].strip())

    return scorer


class BM25Proxy(Estimator):
    name = "bm25"
    uses_model = False
    reads_response = False
    token_readings = True

    def score(self, lm: LanguageModel | None, item: ProbeInput) -> Scores:
        return Scores(bm25_scores(item.question, item.passages),
                      span_scores=text_scorer(lm, item, lambda text: bm25_scores(text, item.passages)))


class CosineProxy(Estimator):
    """Cosine between an anchor text (`against`: the question or the response) and each passage."""

    uses_model = False
    needs_embedder = True
    token_readings = True
    params = (Param("embedder", str, DEFAULT_EMBEDDER, "sentence embedder: default/minilm (embedded MiniLM), "
                    "mpnet (`make mpnet`), hashing or a sentence-transformers folder"),)

    def __init__(self, against: str, embedder: str = DEFAULT_EMBEDDER) -> None:
        if against not in {"question", "response"}:
            raise ValueError("against must be 'question' or 'response'")
        self.against = against
        self.embedder = embedder
        self.name = "qd-cosine" if against == "question" else "yd-cosine"

    def cosines(self, anchor: str, item: ProbeInput) -> np.ndarray:
        vectors = embed([anchor, *(p.full_text for p in item.passages)], self.embedder)
        return np.asarray(vectors[1:] @ vectors[0], dtype=np.float64)

    def score(self, lm: LanguageModel | None, item: ProbeInput) -> Scores:
        anchor = item.question if self.against == "question" else item.response_text
        return Scores(self.cosines(anchor, item), span_scores=text_scorer(lm, item, lambda t: self.cosines(t, item)))


class QuestionCosine(CosineProxy):
    """`qd-cosine`: question-passage cosine (a query-relevance proxy)."""

    name = "qd-cosine"
    reads_response = False

    def __init__(self, embedder: str = DEFAULT_EMBEDDER) -> None:
        super().__init__("question", embedder)


class ResponseCosine(CosineProxy):
    """`yd-cosine`: response-passage cosine."""

    name = "yd-cosine"

    def __init__(self, embedder: str = DEFAULT_EMBEDDER) -> None:
        super().__init__("response", embedder)
