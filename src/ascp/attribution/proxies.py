"""Relevance proxies the probe is validated against: BM25 and embedding cosines.

`bm25`: BM25 (bm25s, Lucene variant, k1 = 1.5, b = 0.75) of each passage for the question,
with the passages of the request as the collection. `qd-cosine`: cosine between question and
passage embeddings. `yd-cosine`: cosine between response and passage embeddings. Passages are
embedded as "title: text" (or the text alone when untitled).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.embed.embedders import DEFAULT_EMBEDDER, embed
from ascp.params import Param
from ascp.types import Passage

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


def bm25_scores(question: str, passages: Sequence[Passage]) -> np.ndarray:
    """BM25 of each passage for the question, the passages being the collection."""
    import bm25s

    corpus = bm25s.tokenize([p.full_text for p in passages], stopwords="en", show_progress=False)
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index(corpus, show_progress=False)
    query = bm25s.tokenize([question], stopwords="en", show_progress=False, return_ids=False)[0]
    # get_scores takes the query as a list of token strings known to the index vocabulary.
    return np.asarray(retriever.get_scores(query), dtype=np.float64)


class BM25Proxy(Estimator):
    name = "bm25"
    uses_model = False

    def score(self, lm: LanguageModel | None, item: ProbeInput) -> Scores:
        return Scores(bm25_scores(item.question, item.passages))


class CosineProxy(Estimator):
    uses_model = False
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
