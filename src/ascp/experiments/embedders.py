"""The embedder an experiment uses for facets, dense re-ranking and semantic diversity, by name.

`default` / `minilm`: the embedded all-MiniLM-L6-v2; `mpnet`: all-mpnet-base-v2 (`make mpnet`);
a sentence-transformers folder; or `hashing`: character-trigram counts of the space-padded text
hashed into 256 dimensions (crc32, so the same in every process), unit-normalised. `hashing`
needs no model: it is meant for smoke runs and tests, not for measurements, since its facets are
lexical, not semantic. The names are resolved in `ascp.embed.embedders` (shared with the other commands).

Every embedder is wrapped in the embedding cache (`ascp.embed.cache.EmbeddingCache`) remembering
whole calls (the tuple of texts), so a case's pool is embedded once per process however many
conditions and seeds reuse it, and each call returns exactly what an uncached call returns (no
batch-composition effects), as float64 rows.
"""

from __future__ import annotations

from ascp.embed.cache import EmbeddingCache, EmbedFn
from ascp.embed.embedders import HASHING, check_embedder, hashing_embed, resolve_embedder

__all__ = ["HASHING", "EmbedFn", "MemoEmbedder", "check_embedder", "hashing_embed", "resolve_embedder"]


class MemoEmbedder(EmbeddingCache):
    """`EmbeddingCache` of whole calls, in memory, at most `size` calls (least recently used dropped)."""

    def __init__(self, embed_fn: EmbedFn, size: int = 4096) -> None:
        super().__init__(embed_fn, whole_calls=True, size=size)
