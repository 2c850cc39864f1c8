"""The one store of computed prompt prefixes: keys and values a backend already computed, reused in this process.

A portfolio run prefills the same prompt many times: the fixed arm shows one context in every
round (each round its own seed), round 1 is the top k for most policies, and the probe's full
variant is the prompt generation has just prefilled; every later response probed against the same
context repeats each variant's prompt side. `PrefixStore` keeps, per prompt (its exact token ids),
the backend's keys and values of those positions (and, from generation, the logits that predict
the first new token), so a later pass over the same prompt feeds only what follows it.

Exactness: a stored prefix holds the keys and values the backend computed for those tokens at
those positions, so a pass on top of it computes what a pass over the whole sequence computes, up
to floating-point reassociation (the same argument as the longest-common-prefix reuse of
`ascp.lm.scoring`). Transformers' generation takes the stored logits of the prompt's last
position, computed in the batch that first prefilled it; a response is therefore what an unshared
run samples for its seed (tested), as it is across batch sizes. llama.cpp's generation does not
use the store (its numbers move with a sequence's place in the shared cache; `ascp.lm.llamacpp`).

Memory: entries are evicted least recently used first once their bytes exceed `max_bytes`
(`ASCP_PREFIX_CACHE_MB`, default 2048: a 135M model holds about 46 KB per token, so about a
hundred ASQA-sized prompts on transformers' fp32 cache and twice that on llama.cpp's f16 cache; a
7B model in bf16 about 128 KB). `--prefix-cache-mb`, the spec field `prefix_cache_mb` and
`ascp.load_model(prefix_cache_mb=...)` set it per run; 0 turns the store off.
`stats` counts hits, misses, prompt tokens not fed and evictions; only the store's own methods
change them (`get`, `reused`, `put`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

from ascp.caching.lru import LRU
from ascp.errors import AscpError

__all__ = ["DEFAULT_MB", "PrefixEntry", "PrefixStats", "PrefixStore", "check_megabytes", "configure_prefixes",
           "fresh_prefixes", "prefix_store", "prefix_store_from_env"]

DEFAULT_MB = 2048


@dataclass(frozen=True)
class PrefixEntry:
    """A backend's state for the first `tokens` positions of a prompt, and (from generation) the
    float32 logits at its last position."""

    state: Any
    tokens: int
    nbytes: int
    logits: Any = None


@dataclass
class PrefixStats:
    hits: int = 0
    misses: int = 0
    tokens_saved: int = 0  # prompt tokens not fed because a stored prefix held them
    evictions: int = 0

    def summary(self) -> str:
        return (f"prefix store: {self.hits} of {self.hits + self.misses} prompt prefills reused "
                f"({self.tokens_saved:,} prompt tokens not fed, {self.evictions} evicted)")


class PrefixStore:
    """Prompt token ids -> `PrefixEntry`, least recently used evicted beyond `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise AscpError(f"the prefix store's limit must be at least 0 bytes, got {max_bytes}.")
        self.max_bytes = max_bytes
        self.stats = PrefixStats()
        self._entries: LRU[tuple[int, ...], PrefixEntry] = LRU(max_bytes=max_bytes, size_of=_entry_bytes)

    @property
    def bytes(self) -> int:
        return self._entries.bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, ids: object) -> bool:
        return ids in self._entries

    def get(self, ids: tuple[int, ...], need_logits: bool = False, saves: int | None = None) -> PrefixEntry | None:
        """The entry of exactly these prompt ids (counted as a hit that spares the caller `saves`
        prompt tokens, default all of `ids`), or None (a miss)."""
        entry = self._entries.peek(ids)
        if entry is None or (need_logits and entry.logits is None):
            self.stats.misses += 1
            return None
        self._entries.get(ids)  # now the most recent
        self.stats.hits += 1
        self.stats.tokens_saved += len(ids) if saves is None else saves
        return entry

    def reused(self, ids: tuple[int, ...], times: int) -> None:
        """Count `times` further rows of one batch that reuse the prefill of `ids` (each a hit)."""
        self.stats.hits += times
        self.stats.tokens_saved += times * len(ids)

    def put(self, ids: tuple[int, ...], entry: PrefixEntry) -> None:
        """Keep `entry` for `ids` (replacing an entry without logits by one with them)."""
        if entry.nbytes > self.max_bytes:
            return
        old = self._entries.peek(ids)
        if old is not None and old.logits is not None and entry.logits is None:
            entry = old
        evicted = self._entries.evictions
        self._entries.put(ids, entry)
        self.stats.evictions += self._entries.evictions - evicted

    def clear(self) -> None:
        self._entries.clear()


def _entry_bytes(entry: PrefixEntry) -> int:
    return entry.nbytes


def check_megabytes(value: object, where: str) -> float:
    """`value` as a finite number of megabytes >= 0, or one sentence naming `where`."""
    try:
        mb = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        mb = float("nan")
    if isinstance(value, bool) or not 0 <= mb < float("inf"):
        raise AscpError(f"{where}: expected a number of megabytes of at least 0 (0 turns the prefix store off), "
                        f"got {value!r}.")
    return mb


def prefix_store(mb: float) -> PrefixStore | None:
    """A store of `mb` megabytes; None when it is 0."""
    return PrefixStore(int(mb * 2**20)) if mb > 0 else None


def prefix_store_from_env() -> PrefixStore | None:
    """A store of `ASCP_PREFIX_CACHE_MB` megabytes (default 2048); None when it is 0."""
    raw = os.environ.get("ASCP_PREFIX_CACHE_MB", str(DEFAULT_MB)).strip()
    return prefix_store(check_megabytes(raw, "ASCP_PREFIX_CACHE_MB"))


class HoldsPrefixes(Protocol):
    """What the two functions below need of a model: the seam's declared store (`LanguageModel.prefixes`)."""

    prefixes: PrefixStore | None


def fresh_prefixes(lm: HoldsPrefixes) -> None:
    """Empty `lm`'s store (its counts stay): a loop run or a batch of probes then computes the same
    way, to the last bit, whatever the model computed before (docs/prefix-store.md)."""
    if lm.prefixes is not None:
        lm.prefixes.clear()


def configure_prefixes(lm: HoldsPrefixes, mb: float | None) -> None:
    """Give `lm` a store of `mb` megabytes (0: none); None keeps its own. A model that prefills
    nothing in process (an engine's server keeps its own cache) holds it unused."""
    if mb is not None:
        lm.prefixes = prefix_store(mb)
