"""The one bounded mapping (`ascp.caching.lru.LRU`) and the caches built on it."""

from __future__ import annotations

import pytest

from ascp.caching.lru import LRU


def test_count_bound_drops_the_least_recently_used():
    lru: LRU[str, int] = LRU(max_items=2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a is now the most recent
    lru.put("c", 3)
    assert list(lru) == ["a", "c"] and lru.evictions == 1
    assert lru.peek("a") == 1 and list(lru) == ["a", "c"]  # peek does not refresh
    lru.put("d", 4)
    assert list(lru) == ["c", "d"]


def test_byte_bound_counts_sizes_and_refuses_a_value_larger_than_the_bound():
    lru: LRU[str, bytes] = LRU(max_bytes=10, size_of=len)
    assert lru.put("a", b"1234") and lru.put("b", b"12345")
    assert lru.bytes == 9
    assert not lru.put("huge", b"x" * 11)  # kept nothing, evicted nothing
    assert list(lru) == ["a", "b"] and lru.bytes == 9
    lru.put("c", b"12")
    assert list(lru) == ["b", "c"] and lru.bytes == 7
    lru.put("b", b"1")  # replacing re-counts the size
    assert lru.bytes == 3 and list(lru) == ["c", "b"]
    assert lru.pop("c") == b"12" and lru.bytes == 1
    lru.clear()
    assert len(lru) == 0 and lru.bytes == 0


def test_unbounded_and_bad_bounds():
    lru: LRU[int, int] = LRU()
    for i in range(1000):
        lru.put(i, i)
    assert len(lru) == 1000 and lru.evictions == 0
    with pytest.raises(ValueError):
        LRU(max_bytes=10)  # a byte bound needs size_of
    with pytest.raises(ValueError):
        LRU(max_items=-1)


def test_the_caches_use_the_one_lru():
    import numpy as np

    from ascp.embed.cache import EmbeddingCache
    from ascp.lm.prefixes import PrefixStore
    from ascp.schedulers import facets

    assert isinstance(PrefixStore(100)._entries, LRU)
    assert isinstance(EmbeddingCache(lambda texts: np.ones((len(texts), 2)), size=3).vectors, LRU)
    assert isinstance(facets._VIEWS, LRU)


def test_the_embedding_cache_keeps_the_most_recent_texts():
    import numpy as np

    from ascp.embed.cache import EmbeddingCache

    calls: list[list[str]] = []

    def embed(texts):
        calls.append(list(texts))
        return np.arange(len(texts) * 2, dtype=float).reshape(len(texts), 2)

    cache = EmbeddingCache(embed, size=2)
    cache(["a", "b"])
    cache(["a", "c"])  # b is the least recently used: dropped
    assert len(cache.vectors) == 2
    cache(["a"])
    assert cache.hits == 2 and calls[-1] == ["c"]  # a was kept: not embedded again
    cache(["b"])
    assert calls[-1] == ["b"]  # b was evicted, so embedded again
    rows = cache(["x", "y", "z"])  # a call larger than the bound still returns every row
    assert rows.shape == (3, 2) and len(cache.vectors) == 2


def test_the_pool_view_cache_does_not_confuse_two_embedders():
    import numpy as np

    from ascp.schedulers.facets import build_pool_view, clear_pool_views
    from ascp.types import Case, Passage

    class Embedder:  # equal to every other instance and unhashable: only identity may key a view
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, column: int) -> None:
            self.column = column

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Embedder)

        def __call__(self, texts):
            out = np.full((len(texts), 3), 0.1)
            out[:, self.column] = 1.0
            return out / np.linalg.norm(out, axis=1, keepdims=True)

    case = Case(id="c", question="q?", pool=(Passage("p1", "one"), Passage("p2", "two")), units=())
    clear_pool_views()
    first, second = Embedder(0), Embedder(1)
    a, b = build_pool_view(case, first), build_pool_view(case, second)
    assert a is not b and not np.allclose(a.embeddings, b.embeddings)
    assert build_pool_view(case, first) is a and build_pool_view(case, second) is b
    clear_pool_views()
