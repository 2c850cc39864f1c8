"""Ranking pools whose retriever scores are not comparable.

`dense` (default): cosine between the question and `title: text` of each passage under the
embedded all-MiniLM-L6-v2 embedder; `bm25`: BM25 of each passage for the question with the
pool as the collection. Ties keep the original order. The new rank is stored on each passage.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ascp.errors import AscpError
from ascp.types import Case

RANKERS = ("dense", "bm25")


def _dense_scores(case: Case) -> np.ndarray:
    from ascp.embed import embed

    vectors = embed([case.question, *(p.full_text for p in case.pool)])
    return vectors[1:] @ vectors[0]


def _bm25_scores(case: Case) -> np.ndarray:
    from ascp.attribution.base import ProbeInput
    from ascp.attribution.proxies import BM25Proxy

    item = ProbeInput(case.question, case.pool, None, "", ())  # BM25 reads only question and passages
    return BM25Proxy().score(None, item)


def rank_pools(cases: list[Case], rank_by: str = "dense") -> list[Case]:
    if rank_by not in RANKERS:
        raise AscpError(f"unknown ranker {rank_by!r}; choose one of {', '.join(RANKERS)}.")
    scorer = _dense_scores if rank_by == "dense" else _bm25_scores
    ranked = []
    for case in cases:
        scores = scorer(case)
        order = np.argsort(-scores, kind="stable")
        pool = tuple(replace(case.pool[i], score=float(scores[i]), rank=r + 1) for r, i in enumerate(order))
        ranked.append(replace(case, pool=pool))
    return ranked
