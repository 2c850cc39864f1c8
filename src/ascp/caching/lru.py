"""The one bounded mapping: least recently used entries dropped first beyond a count or a byte size.

`LRU(max_items=n)` keeps at most n entries; `LRU(max_bytes=b, size_of=f)` keeps entries while the
sum of `f(value)` is at most b; both bounds may be given, neither means unbounded (an ordered dict
whose reads refresh recency). `get` and `put` make an entry the most recent; `peek` does not. A
value larger than `max_bytes` on its own is not kept (nothing is evicted for it). Not thread-safe:
a caller shared between threads holds its own lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar, overload

__all__ = ["LRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class LRU(Generic[K, V]):
    """Key -> value, oldest first, bounded by `max_items` and/or `max_bytes` (see the module docstring)."""

    def __init__(self, max_items: int | None = None, max_bytes: int | None = None,
                 size_of: Callable[[V], int] | None = None) -> None:
        if max_items is not None and max_items < 0:
            raise ValueError(f"LRU: max_items must be at least 0, got {max_items}")
        if max_bytes is not None and (max_bytes < 0 or size_of is None):
            raise ValueError("LRU: max_bytes must be at least 0 and comes with size_of")
        self.max_items, self.max_bytes, self.size_of = max_items, max_bytes, size_of
        self.bytes = 0  # sum of size_of over the entries (0 without size_of)
        self.evictions = 0  # entries dropped to keep a bound
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __getitem__(self, key: K) -> V:
        """The value of `key` without refreshing it (as `peek`); KeyError when absent."""
        return self._entries[key]

    def __iter__(self) -> Iterator[K]:
        """Keys, least recently used first."""
        return iter(self._entries)

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(self._entries.items())

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        """The value of `key`, now the most recent entry; `default` when absent."""
        if key not in self._entries:
            return default
        self._entries.move_to_end(key)
        return self._entries[key]

    @overload
    def peek(self, key: K) -> V | None: ...
    @overload
    def peek(self, key: K, default: D) -> V | D: ...
    def peek(self, key: K, default: object = None) -> object:
        """The value of `key` without refreshing it; `default` when absent."""
        return self._entries.get(key, default)

    def put(self, key: K, value: V) -> bool:
        """Keep `value` under `key` as the most recent entry, evicting the oldest beyond the bounds;
        False (and nothing changed) when the value alone is larger than `max_bytes`."""
        size = self.size_of(value) if self.size_of is not None else 0
        if self.max_bytes is not None and size > self.max_bytes:
            return False
        self.pop(key)
        self._entries[key] = value
        self.bytes += size
        while self._entries and ((self.max_items is not None and len(self._entries) > self.max_items)
                                 or (self.max_bytes is not None and self.bytes > self.max_bytes)):
            self._drop(next(iter(self._entries)))
            self.evictions += 1
        return True

    def pop(self, key: K) -> V | None:
        """Remove `key` and return its value (None when absent)."""
        if key not in self._entries:
            return None
        return self._drop(key)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _drop(self, key: K) -> V:
        value = self._entries.pop(key)
        if self.size_of is not None:
            self.bytes -= self.size_of(value)
        return value
