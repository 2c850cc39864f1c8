"""The embedder an experiment uses for facets, dense re-ranking and semantic diversity, by name.

`default` / `minilm`: the embedded all-MiniLM-L6-v2; `mpnet`: all-mpnet-base-v2 (`make mpnet`);
a sentence-transformers folder; or `hashing`: character-trigram counts of the space-padded text
hashed into 256 dimensions (crc32, so the same in every process), unit-normalised. `hashing`
needs no model: it is meant for smoke runs and tests, not for measurements, since its facets are
lexical, not semantic. The names are resolved in `ascp.embed.embedders` (shared with the other commands).

Every embedder is wrapped in a memo keyed on the whole call (the tuple of texts), so a case's
pool is embedded once per process however many conditions and seeds reuse it, and each call
returns exactly what an uncached call returns (no batch-composition effects).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from ascp.embed.embedders import HASHING, check_embedder, hashing_embed, resolve_embedder

EmbedFn = Callable[[Sequence[str]], np.ndarray]

__all__ = ["HASHING", "EmbedFn", "MemoEmbedder", "check_embedder", "hashing_embed", "resolve_embedder"]


class MemoEmbedder:
    """Cache `embed_fn` results per distinct call (a bounded LRU of text tuples)."""

    def __init__(self, embed_fn: EmbedFn, size: int = 4096) -> None:
        self.embed_fn = embed_fn
        self.size = size
        self._memo: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        hit = self._memo.get(key)
        if hit is None:
            hit = np.asarray(self.embed_fn(list(texts)))
            self._memo[key] = hit
            if len(self._memo) > self.size:
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(key)
        return hit.copy()
