"""The one request cache: generations and teacher-forced scores remembered across runs.

`cached_model(lm, path)` wraps any model of the seam so that each `generate` row and each `score`
row is looked up in a SQLite file before it is computed, and stored after. A row's key is a hash
of everything that determines its value:

* the model's declared `fingerprint` (each backend computes its own with `fingerprint_of`:
  transformers' dtype and device, the config, the weight files' names, sizes and modification
  times, or a digest of the parameters of a model held only in memory; llama.cpp's GGUF file; an
  engine's served model and tokenizer; each with ascp's cache schema);
* generation: the prompt's token ids, the sampling settings and the row's seed;
* scoring: the prompt's and the response's token ids.

So re-running an experiment, adding a condition (round 1 is the top k for most policies, with the
same seeds: common random numbers), re-reporting or resuming after a crash feeds nothing already
fed. Each stored value carries a digest of its key and bytes; an entry that fails it (a damaged
file, a row copied under another key) is deleted and computed again, never returned.

What a hit returns is what the model returned when the row was first computed. Rows are computed
in the batches of the run that first asked for them; a backend whose numbers move in the last bit
with their batch neighbours (transformers' batched sampling and scoring, the engines' servers) can
therefore differ from an uncached run by that much, as two uncached runs with other batch sizes
do. Steered decoding (`generate_streams`) and `reuse_prefix=False` (the naive reference) are
passed through uncached.

One file serves many processes at once (SQLite's write-ahead log; Ray workers on one machine); a
file on a network file system may not be safe (SQLite's own caveat). Two workers that compute one
row at the same moment each keep their own value; the file keeps the first one stored, so a later
run can differ from those workers' records in the last bits. A file that cannot be opened
or written (read-only, full, damaged, written by another schema) gives one warning sentence and the
run goes on without the cache: the cache never changes a number and never stops a run.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, astuple, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ascp.lm.protocol import LanguageModel, ScoredPrompts, as_language_model, model_name, steers, tokens_fed
from ascp.lm.sampling import Generation, SamplingConfig

if TYPE_CHECKING:
    from ascp.lm.prefixes import PrefixStore

__all__ = ["CacheStats", "CachedModel", "RequestCache", "cached_model", "default_cache_path", "files_identity",
           "fingerprint_of", "model_fingerprint", "resolve_cache_path", "savings"]

SCHEMA = "1"


def default_cache_path() -> Path:
    """`$ASCP_HOME/requests.sqlite`: the file `--request-cache default` names."""
    from ascp.caching.files import ascp_home

    return ascp_home() / "requests.sqlite"


def resolve_cache_path(value: str | Path | None) -> Path | None:
    """The cache file `--request-cache VALUE` names: None or `off` (no cache), `default`, a file, or a
    folder to hold `requests.sqlite`."""
    if value is None or str(value) == "off":
        return None
    if str(value) == "default":
        return default_cache_path()
    path = Path(value).expanduser()
    return path / "requests.sqlite" if path.is_dir() else path


def files_identity(paths: Sequence[Path]) -> list[tuple[str, int, int]]:
    """`ascp.caching.files.file_identity` of each file, sorted by path: weights files' identity."""
    from ascp.caching.files import file_identity

    return [file_identity(path) for path in sorted(paths)]


def fingerprint_of(parts: dict[str, Any]) -> str:
    """A backend's fingerprint: a hash of what decides its numbers (`parts`) and the cache schema."""
    blob = json.dumps({"schema": SCHEMA, **parts}, sort_keys=True, default=str).encode()
    return hashlib.blake2b(blob, digest_size=20).hexdigest()


def model_fingerprint(lm: LanguageModel) -> str | None:
    """What the cache keys `lm`'s rows on: its declared `fingerprint` (each backend computes its
    own); None when the model declares none (it runs uncached then)."""
    return lm.fingerprint or None


@dataclass
class CacheStats:
    """What the cache saved in this process: rows answered from it, rows computed, tokens not fed."""

    generation_hits: int = 0
    generation_misses: int = 0
    score_hits: int = 0
    score_misses: int = 0
    tokens_saved: int = 0  # tokens the rows answered from the cache did not feed (`tokens_fed`)
    discarded: int = 0  # entries that failed their digest and were computed again

    def generations(self, hits: int, misses: int, tokens_saved: int) -> None:
        self.generation_hits += hits
        self.generation_misses += misses
        self.tokens_saved += tokens_saved

    def scores(self, hits: int, misses: int, tokens_saved: int) -> None:
        self.score_hits += hits
        self.score_misses += misses
        self.tokens_saved += tokens_saved

    def add(self, other: CacheStats) -> CacheStats:
        return CacheStats(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def summary(self) -> str:
        return (f"{self.generation_hits} of {self.generation_hits + self.generation_misses} generations and "
                f"{self.score_hits} of {self.score_hits + self.score_misses} scored prompts answered from the "
                f"cache ({self.tokens_saved:,} tokens not fed)")


class RequestCache:
    """A SQLite file of (key -> value, digest) rows; unusable files turn it off with one warning."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db, schema = _open(self.path)
        except (sqlite3.Error, OSError) as exc:
            self._off(exc)
            return
        if schema != SCHEMA:
            db.close()
            self._off(f"it was written by another ascp version (cache schema {schema}, this one reads {SCHEMA}); "
                      "pass another --request-cache file")
            return
        self._db = db

    @property
    def enabled(self) -> bool:
        return self._db is not None

    def _off(self, why: str | BaseException) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        reason = why if isinstance(why, str) else _reason(why)
        warnings.warn(f"request cache {self.path}: {reason}; running without it (nothing computed is reused).",
                      stacklevel=3)

    @staticmethod
    def _digest(key: bytes, value: bytes) -> bytes:
        return hashlib.blake2b(key + b"\0" + value, digest_size=16).digest()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The stored values of those `keys` that are present and whole (damaged ones are deleted)."""
        if self._db is None or not keys:
            return {}
        found: dict[bytes, bytes] = {}
        bad: list[bytes] = []
        with self._lock:
            try:
                for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                    part = list(keys[start:start + 500])
                    marks = ",".join("?" * len(part))
                    for key, value, digest in self._db.execute(
                            f"SELECT key, value, digest FROM rows WHERE key IN ({marks})", part):
                        key, value = bytes(key), bytes(value)
                        if self._digest(key, value) == bytes(digest):
                            found[key] = value
                        else:
                            bad.append(key)
                if bad:
                    self._db.executemany("DELETE FROM rows WHERE key = ?", [(k,) for k in bad])
            except sqlite3.Error as exc:
                self._off(exc)
                return {}
        self.stats.discarded += len(bad)
        return found

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        if self._db is None or not items:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                # the first value stored for a key stays (two workers may compute one row at once)
                self._db.executemany("INSERT OR IGNORE INTO rows VALUES (?, ?, ?)",
                                     [(k, v, self._digest(k, v)) for k, v in items])
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db is not None and self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                self._off(exc)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _open(path: Path, wait_s: float = 60.0) -> tuple[sqlite3.Connection, str]:
    """Connect, switch to WAL and create the tables; returns (connection, the file's schema).

    Processes opening one new file at once (Ray workers) contend for the journal-mode switch and
    the first CREATE, where SQLite answers "database is locked" at once instead of calling its busy
    handler: those attempts are retried for up to `wait_s` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        db = sqlite3.connect(path, timeout=wait_s, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS rows (key BLOB PRIMARY KEY, value BLOB NOT NULL, "
                       "digest BLOB NOT NULL)")
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA,))
            return db, db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()[0]
        except sqlite3.OperationalError as exc:
            db.close()
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        except BaseException:
            db.close()
            raise


def _reason(exc: BaseException) -> str:
    text = str(exc).rstrip(".")
    if "full" in text:
        return "the disk is full"
    if "readonly" in text or "read-only" in text or isinstance(exc, PermissionError):
        return "it cannot be written (read-only)"
    if "not a database" in text or "malformed" in text:
        return "it is damaged (not a SQLite database)"
    return f"it cannot be used ({text})"


def _key(*parts: Any) -> bytes:
    return hashlib.blake2b(json.dumps(parts, separators=(",", ":")).encode(), digest_size=20).digest()


def _encode_generation(gen: Generation) -> bytes:
    return json.dumps({"ids": list(gen.token_ids), "text": gen.text, "finished": gen.finished}).encode()


def _decode_generation(value: bytes) -> Generation | None:
    try:
        raw = json.loads(value)
        ids = tuple(int(t) for t in raw["ids"])
        return Generation(token_ids=ids, text=str(raw["text"]), finished=bool(raw["finished"]))
    except (ValueError, KeyError, TypeError):
        return None


class CachedModel:
    """`lm` with its `generate` and `score` rows answered from a `RequestCache` where it holds them.

    Everything else (tokenization, the window check, `in_flight`, the prefix store, ...) is `lm`'s
    own; `close` closes the file and `lm`.
    """

    def __init__(self, lm: LanguageModel, cache: RequestCache, fingerprint: str) -> None:
        self.lm = lm
        self.cache = cache
        self.fingerprint = fingerprint

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)

    @property
    def context_window(self) -> int:
        return self.lm.context_window

    @property
    def in_flight(self) -> int:
        return self.lm.in_flight

    @property
    def prefixes(self) -> PrefixStore | None:
        return self.lm.prefixes

    @prefixes.setter
    def prefixes(self, store: PrefixStore | None) -> None:
        self.lm.prefixes = store

    def response_token_spans(self, response: str) -> list[tuple[int, int]] | None:
        return self.lm.response_token_spans(response)

    def generate(self, prompts: Sequence[Sequence[int]], config: SamplingConfig, seeds: Sequence[int],
                 batch_size: int = 8, on_batch: Callable[[int], None] | None = None) -> list[Generation]:
        settings = asdict(config)
        keys = [_key("generate", self.fingerprint, list(map(int, p)), settings, int(s))
                for p, s in zip(prompts, seeds, strict=True)]
        found = self.cache.get_many(keys)
        out: list[Generation | None] = [None] * len(prompts)
        for i, key in enumerate(keys):
            if key in found:
                out[i] = _decode_generation(found[key])
        todo = [i for i, gen in enumerate(out) if gen is None]
        hits = len(prompts) - len(todo)
        self.cache.stats.generations(hits, len(todo), sum(tokens_fed(len(prompts[i])) for i, gen in enumerate(out)
                                                          if gen is not None))
        if hits and on_batch is not None:
            on_batch(hits)
        if todo:
            fresh = self.lm.generate([prompts[i] for i in todo], config, [seeds[i] for i in todo], batch_size,
                                     on_batch)
            for i, gen in zip(todo, fresh, strict=True):
                out[i] = gen
            self.cache.put_many([(keys[i], _encode_generation(gen)) for i, gen in zip(todo, fresh, strict=True)])
        return [gen for gen in out if gen is not None]

    def score(self, prompts: Sequence[Sequence[int]], response: Sequence[int],
              reuse_prefix: bool = True) -> ScoredPrompts:
        if not reuse_prefix:  # the naive reference asks for fresh passes
            return self.lm.score(prompts, response, reuse_prefix=False)
        resp = list(map(int, response))
        keys = [_key("score", self.fingerprint, list(map(int, p)), resp) for p in prompts]
        found = self.cache.get_many(keys)
        rows: list[np.ndarray | None] = [None] * len(prompts)
        for i, key in enumerate(keys):
            value = found.get(key)
            if value is not None and len(value) == 8 * len(resp):
                rows[i] = np.frombuffer(value, dtype="<f8").copy()
        todo = [i for i, row in enumerate(rows) if row is None]
        self.cache.stats.scores(len(prompts) - len(todo), len(todo),
                                sum(tokens_fed(len(prompts[i]), len(resp)) for i, row in enumerate(rows)
                                    if row is not None))
        fed = 0
        if todo:
            scored = self.lm.score([prompts[i] for i in todo], resp)
            fed = scored.tokens_processed
            for i, row in zip(todo, scored.logprobs, strict=True):
                rows[i] = np.asarray(row, dtype=np.float64)
            self.cache.put_many([(keys[i], np.asarray(rows[i], dtype="<f8").tobytes()) for i in todo])
        return ScoredPrompts(tuple(row for row in rows if row is not None), fed)

    def close(self) -> None:
        self.cache.close()
        self.lm.close()


class CachedSteerableModel(CachedModel):
    """A `CachedModel` of a model that steers: its lockstep streams are decoded uncached."""

    def generate_streams(self, *args: Any, **kwargs: Any) -> list[Generation]:
        return self.lm.generate_streams(*args, **kwargs)  # type: ignore[attr-defined]


def cached_model(lm: LanguageModel, path: str | Path | None) -> LanguageModel:
    """`lm` behind the request cache in `path` (None: `lm` itself). A model ascp cannot fingerprint,
    or a file it cannot use, gives one warning and `lm` runs uncached."""
    if path is None:
        return lm
    seam = as_language_model(lm)  # a model of one's own: with the facts `CachedModel` passes on
    fingerprint = model_fingerprint(seam)
    if fingerprint is None:
        warnings.warn(f"request cache {path}: ascp cannot tell model {model_name(lm)!r} apart from others "
                      "(give it a `fingerprint` attribute); running without the cache.", stacklevel=2)
        return lm
    cache = RequestCache(path)
    if not cache.enabled:
        return lm
    wrapper = CachedSteerableModel if steers(lm) else CachedModel
    return wrapper(seam, cache, fingerprint)


def savings(lm: LanguageModel, cache_label: str | None = None) -> list[str]:
    """THE summary of what a run's model saved, one sentence each: its request cache (named
    `cache_label`, default `request cache PATH`) and its prefix store (when it was consulted)."""
    out = []
    if isinstance(lm, CachedModel):
        out.append(f"{cache_label or f'request cache {lm.cache.path}'}: {lm.cache.stats.summary()}")
    store = lm.prefixes
    if store is not None and (store.stats.hits or store.stats.misses):
        out.append(store.stats.summary())
    return out
