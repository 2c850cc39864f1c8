"""Ordering pools: keep the file's order, or re-rank against the question.

`given`: the order the file lists passages in (meaningful for generic JSONL and retrieval
outputs such as ALCE's GTR/BM25 files and the recipe files). `dense`: cosine between the question
and `title: text` of each passage under the embedder passed (default: the embedded
all-MiniLM-L6-v2; the CLI passes its `--embedder`). `bm25`: BM25 of each passage for the
question with the pool as the collection. Ties keep the original order. The rank used (1 =
best) is stored on each passage (`Passage.rank`); re-ranking also stores its score.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from ascp.errors import AscpError
from ascp.types import Case, Passage

RANKERS = ("given", "dense", "bm25")


def _dense_scores(case: Case, embed_fn: Callable[[Sequence[str]], np.ndarray] | None = None) -> np.ndarray:
    from ascp.embed.embedders import embed

    vectors = (embed_fn or embed)([case.question, *(p.full_text for p in case.pool)])
    return vectors[1:] @ vectors[0]


def bm25_scores(question: str, passages: Sequence[Passage]) -> np.ndarray:
    """BM25 of each passage for the question, the passages being the collection. A question with no
    term left after stopwords ("It was.") matches nothing: every passage scores 0."""
    import bm25s

    query = bm25s.tokenize([question], stopwords="en", show_progress=False, return_ids=False)[0]
    if not query:  # bm25s indexes query[0]
        return np.zeros(len(passages))
    corpus = bm25s.tokenize([p.full_text for p in passages], stopwords="en", show_progress=False)
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index(corpus, show_progress=False)
    # get_scores takes the query as a list of token strings known to the index vocabulary.
    return np.asarray(retriever.get_scores(query), dtype=np.float64)


def _bm25_scores(case: Case, embed_fn: object = None) -> np.ndarray:
    return bm25_scores(case.question, case.pool)


def rank_pools(cases: list[Case], rank_by: str = "dense",
               embed_fn: Callable[[Sequence[str]], np.ndarray] | None = None) -> list[Case]:
    """Order every pool by `rank_by`; `embed_fn` replaces the embedded MiniLM for `dense`."""
    if rank_by not in RANKERS:
        raise AscpError(f"unknown ranker {rank_by!r}; choose one of {', '.join(RANKERS)}.")
    ranked = []
    for case in cases:
        if rank_by == "given" or not case.pool:
            pool = tuple(replace(p, rank=r) for r, p in enumerate(case.pool, start=1))
        else:
            scores = (_dense_scores if rank_by == "dense" else _bm25_scores)(case, embed_fn)
            order = np.argsort(-scores, kind="stable")
            pool = tuple(replace(case.pool[i], score=float(scores[i]), rank=r + 1) for r, i in enumerate(order))
        ranked.append(replace(case, pool=pool))
    return ranked
