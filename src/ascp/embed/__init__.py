"""Sentence embedders by name (`--embedder`) and the one cache of embeddings.

`embedders`: `default`/`minilm` (the embedded all-MiniLM-L6-v2), `mpnet` (all-mpnet-base-v2 from
`make mpnet`), `hashing` or a folder; `cache`: `EmbeddingCache`, the one cache of their vectors (in
memory, optionally in a file per embedder). The names below keep `from ascp.embed import X` working.
"""

from ascp.embed.cache import EmbeddingCache, cache_file, default_cache_folder
from ascp.embed.embedders import (
    DEFAULT_EMBEDDER,
    EMBEDDER_NAMES,
    HASHING,
    MPNET_FOLDER,
    check_embedder,
    embed,
    embedded_minilm_dir,
    embedder_id,
    hashing_embed,
    load_embedder,
    mpnet_candidates,
    mpnet_dir,
    resolve_embedder,
)

__all__ = ["DEFAULT_EMBEDDER", "EMBEDDER_NAMES", "HASHING", "MPNET_FOLDER", "EmbeddingCache", "cache_file",
           "check_embedder", "default_cache_folder", "embed", "embedded_minilm_dir", "embedder_id", "hashing_embed",
           "load_embedder", "mpnet_candidates", "mpnet_dir", "resolve_embedder"]
