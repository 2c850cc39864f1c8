"""Small helpers shared by the policies: id mapping, cyclic windows, a response-embedding cache."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ascp.schedulers.base import EmbedFn, PoolView, Selection


def positions(view: PoolView, ids: Iterable[str]) -> list[int]:
    """Pool positions of `ids`, skipping ids that are not in the pool."""
    index = view.index
    return [index[i] for i in ids if i in index]


def selection(view: PoolView, chosen: Sequence[int], earlier_outputs: Sequence[str] = ()) -> Selection:
    ids = view.ids
    return Selection(tuple(ids[int(i)] for i in chosen), tuple(earlier_outputs))


def cyclic_window(n: int, start: int, k: int) -> list[int]:
    """Positions start, start+1, ..., start+k-1 modulo n (the whole range 0..n-1 when k >= n)."""
    if k >= n:
        return list(range(n))
    return [(start + j) % n for j in range(k)]


class ResponseEmbedder:
    """Embeds responses with `embed_fn`, once per distinct text."""

    def __init__(self, embed_fn: EmbedFn) -> None:
        self.embed_fn = embed_fn
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            rows = np.asarray(self.embed_fn(missing), dtype=np.float64).reshape(len(missing), -1)
            self._cache.update(zip(missing, rows, strict=True))
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 0))
