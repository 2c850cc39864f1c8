"""Sentence embedders by name (`--embedder`) and the one cache of embeddings.

`embedders`: `default`/`minilm` (the embedded all-MiniLM-L6-v2), `mpnet` (all-mpnet-base-v2 from
`make mpnet`), `hashing` or a folder. The names below keep `from ascp.embed import X` working.
"""

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

__all__ = ["DEFAULT_EMBEDDER", "EMBEDDER_NAMES", "HASHING", "MPNET_FOLDER", "check_embedder", "embed",
           "embedded_minilm_dir", "embedder_id", "hashing_embed", "load_embedder", "mpnet_candidates", "mpnet_dir",
           "resolve_embedder"]
