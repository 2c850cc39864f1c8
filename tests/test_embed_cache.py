"""The one embedding cache (`ascp.embed.cache.EmbeddingCache`): the numbers of the uncached path,
persistence in the file format `ascp simulate` has always written, damaged files detected and
embedded again, and embedders that never share vectors."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest

from ascp.embed import EmbeddingCache, cache_file, embedded_minilm_dir, embedder_id, hashing_embed
from ascp.errors import AscpError

TEXTS = ["the capital of France is Paris", "a second passage", "", "the capital of France is Paris", "ünïcode"]


def counting(log: list[list[str]], fn=hashing_embed):
    def embed(texts):
        log.append(list(texts))
        return fn(texts)

    return embed


def batch_dependent(texts):
    """Like a transformer: a text's row moves in the last digits with the batch it is embedded in."""
    return np.asarray(hashing_embed(texts) * (1.0 + 1e-7 * len(texts)), dtype=np.float32)


def never(texts):
    raise AssertionError(f"embedded again: {list(texts)}")


# ----- the numbers of the uncached path -----------------------------------------------------------
def test_a_memory_cache_returns_the_uncached_rows_and_embeds_each_text_once():
    calls: list[list[str]] = []
    cache = EmbeddingCache(counting(calls))
    first = cache(TEXTS)
    assert first.dtype == np.float64 and np.array_equal(first, hashing_embed(TEXTS))
    again = cache(TEXTS[::-1])
    assert np.array_equal(again, hashing_embed(TEXTS[::-1]))
    assert sorted(t for call in calls for t in call) == sorted(set(TEXTS))  # each distinct text once
    assert (cache.misses, cache.hits) == (4, 6)
    assert cache([]).shape == (0, 0)


def test_whole_calls_return_exactly_the_uncached_call_even_for_a_batch_dependent_embedder():
    cache = EmbeddingCache(batch_dependent, whole_calls=True)
    for call in (TEXTS, TEXTS[:1], TEXTS, TEXTS[1:3]):
        np.testing.assert_array_equal(cache(call), batch_dependent(call).astype(np.float64))
    assert (cache.misses, cache.hits) == (len(TEXTS) + 1 + 2, len(TEXTS))
    out = cache(TEXTS[:1])
    out[:] = 0.0  # the caller's copy: the cache is unchanged
    np.testing.assert_array_equal(cache(TEXTS[:1]), batch_dependent(TEXTS[:1]))
    # per text, a row is the one of the batch the text was first embedded in
    per_text = EmbeddingCache(batch_dependent)
    per_text(TEXTS)
    assert not np.array_equal(per_text(TEXTS[:1]), batch_dependent(TEXTS[:1]))


def test_whole_calls_keep_at_most_size_calls():
    calls: list[list[str]] = []
    cache = EmbeddingCache(counting(calls), whole_calls=True, size=2)
    for call in (["a"], ["b"], ["a"], ["c"], ["a"], ["b"]):
        cache(call)
    assert calls == [["a"], ["b"], ["c"], ["b"]]  # b was the least recently used when c came


def test_the_old_names_are_the_one_cache():
    from ascp.experiments.embedders import MemoEmbedder
    from ascp.loop.simulate import EmbeddingCache as SimulateCache

    assert SimulateCache is EmbeddingCache
    memo = MemoEmbedder(batch_dependent)
    assert isinstance(memo, EmbeddingCache) and memo.whole_calls and memo.size == 4096 and memo.path is None


def test_schedulers_embed_responses_through_the_cache():
    from ascp.schedulers import make_scheduler
    from ascp.schedulers.base import RoundFeedback
    from ascp.testing.schedulers import hash_embed, synthetic_view

    view = synthetic_view(6)
    calls: list[list[str]] = []
    rng = np.random.default_rng(0)
    scheduler = make_scheduler("ascp(feedback=similarity)", view, 2, 3, rng, embed_fn=counting(calls, hash_embed))
    assert isinstance(scheduler._embed, EmbeddingCache)
    history = (RoundFeedback(view.ids[:2], {}, (), "a response"),)
    scheduler.select(1, ())
    scheduler.select(2, history)
    scheduler.select(3, (*history, RoundFeedback(view.ids[2:4], {}, (), "a response")))
    assert calls == [["a response"]]


@pytest.mark.skipif(embedded_minilm_dir() is None, reason="the embedded MiniLM wheel is not installed")
def test_with_minilm_whole_calls_are_exact_and_a_file_holds_the_first_run_numbers(tmp_path):
    from ascp.embed import resolve_embedder

    minilm = resolve_embedder("minilm")
    calls = [TEXTS, TEXTS[:2], TEXTS]
    memo = EmbeddingCache(minilm, whole_calls=True)
    for call in calls:
        np.testing.assert_array_equal(memo(call), minilm(call))
    path = tmp_path / "minilm.npz"
    cache = EmbeddingCache(minilm, path, identity="minilm")
    first = cache(TEXTS)
    np.testing.assert_array_equal(first, minilm(TEXTS))  # float32 rows: persisting loses nothing
    cache.save()
    np.testing.assert_array_equal(EmbeddingCache(never, path, identity="minilm")(TEXTS), first)


# ----- persistence ----------------------------------------------------------------------------------
def test_a_file_round_trips_and_a_second_run_embeds_nothing(tmp_path):
    cache = EmbeddingCache(hashing_embed, identity="hashing", folder=tmp_path / "embeddings")
    assert cache.path == tmp_path / "embeddings" / "hashing.npz" == cache_file("hashing", tmp_path / "embeddings")
    first = cache(TEXTS)
    # a persistent cache rounds to float32 from the first call on: the runs that read the file agree
    np.testing.assert_array_equal(first, hashing_embed(TEXTS).astype(np.float32).astype(np.float64))
    cache.save()
    stamp = cache.path.stat().st_mtime_ns
    again = EmbeddingCache(never, cache.path, identity="hashing")
    np.testing.assert_array_equal(again(TEXTS), first)
    assert (again.hits, again.misses) == (len(TEXTS), 0)
    again.save()  # nothing new: the file is not rewritten
    assert cache.path.stat().st_mtime_ns == stamp
    assert not [p.name for p in cache.path.parent.iterdir() if p.name != "hashing.npz"]  # no temporary left


def test_files_of_the_format_simulate_always_wrote_stay_valid(tmp_path):
    texts = ["one", "two"]
    rows = hashing_embed(texts).astype(np.float32)
    keys = {hashlib.blake2b(t.encode("utf-8"), digest_size=12).hexdigest(): r for t, r in zip(texts, rows, strict=True)}
    np.savez(tmp_path / "mpnet.npz", **keys, __embedder__=np.array("mpnet"))
    np.savez(tmp_path / "old.npz", **keys)  # before identities: MiniLM's
    for path, identity in ((tmp_path / "mpnet.npz", "mpnet"), (tmp_path / "old.npz", "minilm")):
        cache = EmbeddingCache(never, path, identity=identity)
        np.testing.assert_array_equal(cache(texts), rows.astype(np.float64))
    grown = EmbeddingCache(hashing_embed, tmp_path / "mpnet.npz")  # no identity given: the file's is kept
    grown(["three"])
    grown.save()
    with np.load(tmp_path / "mpnet.npz") as data:
        assert str(data["__embedder__"]) == "mpnet" and len(data.files) == 4


# ----- damaged files ------------------------------------------------------------------------------
def _saved(path):
    cache = EmbeddingCache(hashing_embed, path, identity="hashing")
    expected = cache(TEXTS)
    cache.save()
    return expected


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty", "nan row", "stray member"])
def test_a_damaged_file_is_detected_and_embedded_again_with_the_right_numbers(tmp_path, damage):
    path = tmp_path / "hashing.npz"
    expected = _saved(path)
    data = bytearray(path.read_bytes())
    if damage == "flipped byte":  # inside a vector: the member's CRC fails
        with np.load(path) as npz:
            offset = data.index(npz[EmbeddingCache.key(TEXTS[1])].tobytes())
        data[offset + 5] ^= 0xFF
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    if damage in ("nan row", "stray member"):
        with np.load(path) as npz:
            members = {k: npz[k] for k in npz.files}
        if damage == "nan row":
            members[EmbeddingCache.key(TEXTS[0])] = np.full(256, np.nan, dtype=np.float32)
        else:
            members["not a text hash"] = np.zeros(3, dtype=np.float32)
        np.savez(path, **members)
    else:
        path.write_bytes(bytes(data))
    calls: list[list[str]] = []
    with pytest.warns(UserWarning, match="is damaged"):
        cache = EmbeddingCache(counting(calls), path, identity="hashing")
    assert cache.discarded and not cache.vectors
    np.testing.assert_array_equal(cache(TEXTS), expected)
    assert calls  # embedded again, nothing read from the damaged file
    cache.save()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(EmbeddingCache(never, path, identity="hashing")(TEXTS), expected)


def test_a_file_that_is_no_cache_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"a": 1}\n', encoding="utf-8")
    with pytest.raises(AscpError, match="is not an .npz file written by ascp; pass another --cache file"):
        EmbeddingCache(hashing_embed, path, identity="hashing")
    assert path.read_text(encoding="utf-8") == '{"a": 1}\n'


# ----- embedders never share vectors ----------------------------------------------------------------
def test_the_ids_of_different_embedders_never_collide(tmp_path):
    a, b = tmp_path / "a" / "model", tmp_path / "b" / "model"
    ids = [embedder_id(s) for s in ("minilm", "mpnet", "hashing", str(a), str(b), str(tmp_path / "minilm"))]
    assert len(set(ids)) == len(ids) and embedder_id("default") == "minilm"
    files = {cache_file(i, tmp_path) for i in ids}
    assert len(files) == len(ids)
    doubled = EmbeddingCache(lambda t: 2 * hashing_embed(t), identity=ids[3], folder=tmp_path)
    plain = EmbeddingCache(hashing_embed, identity=ids[4], folder=tmp_path)
    doubled(["x"]), plain(["x"])
    doubled.save(), plain.save()
    np.testing.assert_array_equal(EmbeddingCache(never, identity=ids[3], folder=tmp_path)(["x"]),
                                  2 * EmbeddingCache(never, identity=ids[4], folder=tmp_path)(["x"]))
    with pytest.raises(AscpError, match=f"holds vectors of embedder {ids[3]!r}, not of --embedder {ids[4]!r}"):
        EmbeddingCache(hashing_embed, doubled.path, identity=ids[4])


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="identity"):
        EmbeddingCache(hashing_embed, folder="x")
    with pytest.raises(ValueError, match="persistent"):
        EmbeddingCache(hashing_embed, "x.npz", whole_calls=True)


def test_an_embedding_cache_the_disk_refuses_is_skipped_with_a_warning(tmp_path, small_disk):
    import numpy as np
    from conftest import fill_disk

    from ascp.embed.cache import EmbeddingCache

    disk = small_disk("64k")
    cache = EmbeddingCache(lambda texts: np.ones((len(texts), 4096)), path=disk / "cache.npz")
    cache(["a", "b", "c", "d"])
    fill_disk(disk, leave=0)
    with pytest.warns(UserWarning, match=r"could not write .*cache\.npz: no space is left on the device; .* The "
                                         r"embedding cache was not saved"):
        cache.save()
    assert sorted(p.name for p in disk.iterdir()) == [".filler"]  # no partial cache entry
