"""Relevance proxies the probe is validated against: BM25 and embedding cosines.

`bm25`: BM25 (bm25s, Lucene variant, k1 = 1.5, b = 0.75) of each passage for the question,
with the passages of the request as the collection. `qd-cosine`: cosine between question and
passage embeddings. `yd-cosine`: cosine between response and passage embeddings. Passages are
embedded as "title: text" (or the text alone when untitled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.data.ranking import bm25_scores
from ascp.embed.embedders import DEFAULT_EMBEDDER, embed
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


class BM25Proxy(Estimator):
    name = "bm25"
    uses_model = False
    reads_response = False

    def score(self, lm: LanguageModel | None, item: ProbeInput) -> Scores:
        return Scores(bm25_scores(item.question, item.passages))


class CosineProxy(Estimator):
    """Cosine between an anchor text (`against`: the question or the response) and each passage."""

    uses_model = False
    needs_embedder = True
    params = (Param("embedder", str, DEFAULT_EMBEDDER, "sentence embedder: default/minilm (embedded MiniLM), "
                    "mpnet (`make mpnet`), hashing or a sentence-transformers folder"),)

    def __init__(self, against: str, embedder: str = DEFAULT_EMBEDDER) -> None:
        if against not in {"question", "response"}:
            raise ValueError("against must be 'question' or 'response'")
        self.against = against
        self.embedder = embedder
        self.name = "qd-cosine" if against == "question" else "yd-cosine"

    def score(self, lm: LanguageModel | None, item: ProbeInput) -> Scores:
        anchor = item.question if self.against == "question" else item.response_text
        vectors = embed([anchor, *(p.full_text for p in item.passages)], self.embedder)
        return Scores(np.asarray(vectors[1:] @ vectors[0], dtype=np.float64))


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
