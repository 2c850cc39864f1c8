"""The one cache of embeddings: an embedder wrapper that memoises vectors in memory and optionally
persists them to a file, keyed by the embedder's id (`ascp.embed.embedders.embedder_id`) and the text.

`EmbeddingCache(embed_fn)` remembers each distinct text's row; `EmbeddingCache(embed_fn, path,
identity)` (or `folder=`, which names the file `<identity>.npz`) also keeps them in an `.npz` file,
one member per text hash plus the embedder id, so a later run embeds nothing it embedded before
(`ascp simulate` keeps one per embedder in `$ASCP_HOME/embeddings/`). A file written by another
embedder is refused (one AscpError sentence); a damaged one (truncated, failed checksum, not one
vector per text hash) is discarded with a warning and its vectors embedded again, never read.

A transformer's vector of a text moves in the last float32 digit with the batch the text is
embedded in. `whole_calls=True` therefore remembers whole calls (the tuple of texts) instead of
single texts, so every call returns exactly what the uncached call returns (the experiments'
memo, `ascp.experiments.embedders.MemoEmbedder`); per-text caches return the rows of the batch each
text was first embedded in. Every cache returns float64 rows; a persistent one rounds them to
float32 (what its file holds) from the first call on, so the run that writes a file and the runs
that read it see the same numbers. `hits` and `misses` count the texts answered from the cache
and those sent to the embedder.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ascp.caching.lru import LRU
from ascp.errors import AscpError, DiskError
from ascp.jsonio import atomic_writer

EmbedFn = Callable[[Sequence[str]], np.ndarray]

__all__ = ["EmbedFn", "EmbeddingCache", "cache_file", "default_cache_folder"]

_TEXT_KEY = re.compile(r"[0-9a-f]{24}")  # `EmbeddingCache.key`: 12 bytes of blake2b in hex
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz file is a zip archive (the second: an empty one)


def default_cache_folder() -> Path:
    """Where `ascp simulate` keeps its embedding caches: `$ASCP_HOME/embeddings`."""
    from ascp.caching.files import ascp_home

    return ascp_home() / "embeddings"


def cache_file(identity: str, folder: str | Path | None = None) -> Path:
    """The cache file of embedder `identity` (an `embedder_id`) in `folder` (default:
    `default_cache_folder()`): `<folder>/<identity>.npz`, so two embedders never share a file."""
    return Path(folder if folder is not None else default_cache_folder()) / f"{identity}.npz"


class EmbeddingCache:
    """`embed_fn` (texts -> one row per text) with its vectors remembered; see the module docstring.

    path / folder: persist to this `.npz` file / to `cache_file(identity, folder)` (call `save()`);
    neither: in memory only. identity: the embedder's `embedder_id`, stored in the file and checked
    against it; files without one were written before identities existed, by the embedded MiniLM
    (`minilm`). whole_calls: remember whole calls (in memory only). size: keep at most this many
    entries (texts, or calls with `whole_calls`), least recently used dropped first; in memory only.
    """

    IDENTITY_KEY = "__embedder__"  # not a text hash: cannot collide with a vector's key
    LEGACY_IDENTITY = "minilm"

    def __init__(self, embed_fn: EmbedFn, path: str | Path | None = None, identity: str | None = None, *,
                 folder: str | Path | None = None, whole_calls: bool = False, size: int | None = None) -> None:
        if folder is not None:
            if path is not None or identity is None:
                raise ValueError("EmbeddingCache: pass folder= with identity= and without path=")
            path = cache_file(identity, folder)
        if path is not None and (whole_calls or size is not None):
            raise ValueError("EmbeddingCache: a persistent cache keeps every text (no whole_calls, no size)")
        self.embed_fn, self.identity, self.whole_calls, self.size = embed_fn, identity, whole_calls, size
        self.path = Path(path) if path is not None else None
        self.vectors: LRU[str, np.ndarray] = LRU(max_items=size)  # text key -> row
        self._calls: LRU[tuple[str, ...], np.ndarray] = LRU(max_items=size)  # whole_calls: texts -> rows
        self.hits = self.misses = 0
        self.discarded: str | None = None  # why a damaged file was not read, if one was
        self._stamp = identity  # the identity save() writes: this cache's, else the file's
        self._dirty = False
        if self.path is not None and self.path.is_file():
            self._load(self.path)

    @staticmethod
    def key(text: str) -> str:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self.whole_calls:
            return self._whole_call(texts)
        keys = [self.key(t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in self.vectors}.items())
        fresh: dict[str, np.ndarray] = {}
        if missing:
            rows_in = np.asarray(self.embed_fn([t for _, t in missing])).reshape(len(missing), -1)
            for (k, _), row in zip(missing, rows_in, strict=True):
                # a persistent cache holds what its file holds (float32) from the first call on
                fresh[k] = np.asarray(row, dtype=np.float32) if self.path is not None else row
            if self.path is not None:
                self._dirty = True
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        if not keys:
            return np.zeros((0, 0))
        rows = [fresh[k] if k in fresh else self.vectors[k] for k in keys]
        if self.size is None:  # unbounded: new texts appended in key order (the file's member order)
            for k, row in fresh.items():
                self.vectors.put(k, row)
        else:  # bounded: every text of the call refreshed in call order, the last the most recent
            for k, row in zip(keys, rows, strict=True):
                self.vectors.put(k, row)
        return np.stack(rows).astype(np.float64)

    def _whole_call(self, texts: Sequence[str]) -> np.ndarray:
        call = tuple(texts)
        rows = self._calls.get(call)
        if rows is None:
            rows = np.asarray(self.embed_fn(list(call)))
            self._calls.put(call, rows)
            self.misses += len(call)
        else:
            self.hits += len(call)
        return rows.astype(np.float64)  # a copy: callers may change it

    def save(self) -> None:
        """Write the file (atomically: a reader sees the old file or the whole new one) if anything
        was embedded since it was read; a no-op for an in-memory cache."""
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        stamp = {} if self._stamp is None else {self.IDENTITY_KEY: np.array(self._stamp)}
        try:
            with atomic_writer(self.path, mode="wb") as handle:
                np.savez(handle, **dict(self.vectors.items()), **stamp)  # type: ignore[arg-type]
        except DiskError as exc:  # a cache is an optimisation: the results stand without it
            warnings.warn(f"{exc} The embedding cache was not saved (the old file, if any, is intact); the "
                          "results are unaffected.", UserWarning, stacklevel=2)
            return
        self._dirty = False

    def _load(self, path: Path) -> None:
        with path.open("rb") as handle:
            head = handle.read(4)
        if head and head not in _ZIP_MAGIC:
            raise AscpError(f"the embedding cache {path} is not an .npz file written by ascp; pass another --cache "
                            "file (one per embedder) or remove this one.")
        try:
            stored, vectors = _read_npz(path, self.IDENTITY_KEY)
        except Exception as exc:  # any damage (zip, checksum, array format) means: embed again, read nothing
            self.discarded = f"{exc.__class__.__name__}: {exc}"
            self._dirty = True  # save() replaces the damaged file
            warnings.warn(f"the embedding cache {path} is damaged ({self.discarded}); its vectors are embedded "
                          "again and the file is rewritten on save.", UserWarning, stacklevel=3)
            return
        found = stored if stored is not None else self.LEGACY_IDENTITY
        if self.identity is not None and found != self.identity:
            raise AscpError(f"the embedding cache {path} holds vectors of embedder {found!r}, not of "
                            f"--embedder {self.identity!r}; pass another --cache file (one per embedder).")
        self._stamp = self.identity if self.identity is not None else stored
        for key, vector in vectors.items():
            self.vectors.put(key, vector)


def _read_npz(path: Path, identity_key: str) -> tuple[str | None, dict[str, np.ndarray]]:
    """(stored identity or None, text key -> vector), every member read (so checksums are checked)
    and checked: text-hash keys, finite float vectors of one length; raises on any damage."""
    with path.open("rb") as handle, np.load(handle, allow_pickle=False) as data:  # our handle: closed on errors
        members = {name: data[name] for name in data.files}
    stored = members.pop(identity_key, None)
    if stored is not None and (stored.ndim != 0 or stored.dtype.kind != "U"):
        raise ValueError(f"{identity_key} is not one string")
    dims = set()
    for name, vector in members.items():
        if not _TEXT_KEY.fullmatch(name) or vector.ndim != 1 or vector.dtype.kind != "f":
            raise ValueError(f"member {name!r} is not a vector under a text hash")
        if not np.isfinite(vector).all():
            raise ValueError(f"member {name!r} holds non-finite values")
        dims.add(vector.shape[0])
    if len(dims) > 1:
        raise ValueError(f"vectors of {len(dims)} lengths")
    return (None if stored is None else str(stored)), members
