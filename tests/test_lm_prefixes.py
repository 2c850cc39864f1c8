"""The prefix store (`ascp.lm.prefixes`): a prompt prefilled once per process, in generation and in the
probe, with every number equal to the path without it (and to a naive leave-one-out)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ascp.attribution import make_estimator
from ascp.errors import AscpError
from ascp.lm.hf import length_groups
from ascp.lm.prefixes import PrefixEntry, PrefixStore, prefix_store_from_env
from ascp.lm.sampling import SamplingConfig
from ascp.types import Passage

ESTIMATORS = ("loo", "replace", "hierarchical", "contextcite")
QUESTION = "When was the tower built and who designed it?"


def context(k: int) -> tuple[Passage, ...]:
    facts = ["The tower was built from 1887 to 1889 for the World's Fair in Paris.",
             "Gustave Eiffel's company designed and built the tower on the Champ de Mars.",
             "The Louvre is the world's most-visited art museum, in the centre of Paris.",
             "About seven million people visit the tower every year, most of them tourists.",
             "The tower was the tallest man-made structure in the world until 1930."]
    return tuple(Passage(id=f"d{i}", title=f"Doc {i}", text=facts[i]) for i in range(k))


RESPONSES = ["It was built from 1887 to 1889 by Eiffel's company.", "Gustave Eiffel designed it; it opened in 1889.",
             "The tower went up between 1887 and 1889."]


def test_the_store_evicts_least_recently_used_beyond_its_bytes():
    store = PrefixStore(max_bytes=100)
    for i in range(3):
        store.put((i,), PrefixEntry(f"s{i}", 1, 40))
    assert len(store) == 2 and (0,) not in store and store.stats.evictions == 1
    assert store.get((1,)).state == "s1"  # now the most recent
    store.put((3,), PrefixEntry("s3", 1, 40))
    assert (2,) not in store and (1,) in store and store.bytes == 80
    assert store.get((9,)) is None and (store.stats.hits, store.stats.misses) == (1, 1)
    store.put((4,), PrefixEntry("huge", 1, 101))  # larger than the whole store: never kept
    assert (4,) not in store and store.bytes == 80
    assert store.get((1,), need_logits=True) is None  # a scoring entry cannot start a generation
    store.put((1,), PrefixEntry("s1+logits", 1, 40, logits=[0.0]))
    store.put((1,), PrefixEntry("s1 again", 1, 40))  # an entry without logits never replaces one with them
    assert store.get((1,), need_logits=True).state == "s1+logits"


def test_the_limit_comes_from_the_environment_or_is_one_sentence(monkeypatch):
    monkeypatch.setenv("ASCP_PREFIX_CACHE_MB", "0")
    assert prefix_store_from_env() is None
    monkeypatch.setenv("ASCP_PREFIX_CACHE_MB", "1.5")
    assert prefix_store_from_env().max_bytes == int(1.5 * 2**20)
    for bad in ("lots", "-1", "nan", "inf"):
        monkeypatch.setenv("ASCP_PREFIX_CACHE_MB", bad)
        with pytest.raises(AscpError, match="ASCP_PREFIX_CACHE_MB") as info:
            prefix_store_from_env()
        assert "\n" not in str(info.value)


def without_store(lm):
    return dataclasses.replace(lm, prefixes=None)


def probe_all(lm, make_item, name: str, k: int):
    estimator = make_estimator(name, **({"seed": 3} if name == "contextcite" else {}))
    out = []
    for response in RESPONSES:
        item = make_item(lm, QUESTION, context(k), response)
        out.append(np.asarray(estimator.score(lm, item).values))
    return out


def fed(lm, make_item, k: int) -> list[int]:
    """Tokens each of the three probes (loo) fed."""
    counts = []
    for response in RESPONSES:
        item = make_item(lm, QUESTION, context(k), response)
        variants = [item.prompt.ids] + [lm.encode(item.prompt.edited_text({i + 1: ""})) for i in range(k)]
        counts.append(lm.score(variants, item.response_ids).tokens_processed)
    return counts


@pytest.mark.parametrize("name", ESTIMATORS)
def test_probes_of_one_context_share_each_variants_prompt_and_equal_the_path_without(tiny_lm, make_item, name):
    lm = dataclasses.replace(tiny_lm, prefixes=PrefixStore(2**30))
    got = probe_all(lm, make_item, name, k=4)
    ref = probe_all(without_store(tiny_lm), make_item, name, k=4)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert lm.prefixes.stats.hits > 0


def test_loo_with_the_store_equals_a_naive_loo_and_feeds_the_responses_only(tiny_lm, make_item):
    k = 3
    lm = dataclasses.replace(tiny_lm, prefixes=PrefixStore(2**30))
    got = probe_all(lm, make_item, "loo", k)
    for response, values in zip(RESPONSES, got, strict=True):
        item = make_item(tiny_lm, QUESTION, context(k), response)

        def mean_logp(passages, response=item.response_ids) -> float:
            ids = list(tiny_lm.encode_prompt(QUESTION, passages).ids)
            return float(tiny_lm.score([ids], response, reuse_prefix=False).logprobs[0].mean())

        full = mean_logp(context(k))
        naive = [full - mean_logp(context(k)[:i] + context(k)[i + 1:]) for i in range(k)]
        np.testing.assert_allclose(values, naive, atol=1e-5)
    plain = fed(without_store(tiny_lm), make_item, k)
    stored = fed(dataclasses.replace(tiny_lm, prefixes=PrefixStore(2**30)), make_item, k)
    assert stored[0] == plain[0]  # the first probe fills the store
    for i in (1, 2):  # later probes feed, per variant, its last prompt token and the response
        response = make_item(tiny_lm, QUESTION, context(k), RESPONSES[i]).response_ids
        assert stored[i] == (k + 1) * len(response) < plain[i]


def prompts_of(lm, k: int) -> list[list[int]]:
    return [list(lm.encode_prompt(QUESTION, context(k)[i:i + 2]).ids) for i in range(k - 1)]


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_generation_prefills_a_prompt_once_and_keeps_every_seeds_text(tiny_lm, batch_size):
    prompts = prompts_of(tiny_lm, 4)
    rows = [prompts[i % 3] for i in range(9)]  # each prompt three times, each time its own seed
    seeds = list(range(100, 109))
    config = SamplingConfig(max_new_tokens=12)
    plain = without_store(tiny_lm).generate(rows, config, seeds, batch_size=batch_size)
    lm = dataclasses.replace(tiny_lm, prefixes=PrefixStore(2**30))
    assert lm.generate(rows, config, seeds, batch_size=batch_size) == plain
    assert lm.prefixes.stats.hits == 6 and lm.prefixes.stats.tokens_saved == 2 * sum(len(p) for p in prompts)
    again = lm.generate(rows[::-1], config, seeds[::-1], batch_size=batch_size)  # a later call: all stored
    assert again == plain[::-1] and lm.prefixes.stats.hits == 15


def test_the_probe_starts_from_the_prompt_generation_prefilled(tiny_lm, make_item):
    lm = dataclasses.replace(tiny_lm, prefixes=PrefixStore(2**30))
    prompt = lm.encode_prompt(QUESTION, context(3))
    gen = lm.generate([list(prompt.ids)], SamplingConfig(max_new_tokens=10), [7])[0]
    item = make_item(lm, QUESTION, context(3), gen.text)
    before = lm.prefixes.stats.hits
    got = make_estimator("loo").score(lm, item).values
    assert lm.prefixes.stats.hits == before + 1  # the full variant's prompt side came from generation
    np.testing.assert_allclose(got, make_estimator("loo").score(without_store(tiny_lm), item).values, atol=1e-5)


def test_a_small_store_evicts_and_stays_exact(tiny_lm, make_item):
    lm = dataclasses.replace(tiny_lm, prefixes=PrefixStore(200_000))  # holds about one tiny prompt
    got = probe_all(lm, make_item, "loo", k=4)
    ref = probe_all(without_store(tiny_lm), make_item, "loo", k=4)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert lm.prefixes.stats.evictions > 0 and lm.prefixes.bytes <= 200_000


# ----- llama.cpp --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lcpp():
    from ascp.lm import llamacpp
    from ascp.lm.resolve import embedded_gguf, load_language_model

    if not llamacpp.available() or embedded_gguf() is None:
        pytest.skip("needs llama-cpp-python (make setup builds it) and the embedded model")
    return load_language_model("default", device="cpu", backend="llamacpp")


@pytest.mark.real_model
@pytest.mark.parametrize("name", ["loo", "contextcite"])
def test_llamacpp_probes_share_prompts_and_equal_the_path_without(lcpp, make_item, name):
    lcpp.prefixes = None
    ref = probe_all(lcpp, make_item, name, k=3)
    lcpp.prefixes = PrefixStore(2**30)
    try:
        got = probe_all(lcpp, make_item, name, k=3)
        assert lcpp.prefixes.stats.hits > 0
    finally:
        lcpp.prefixes = None
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.real_model
def test_llamacpp_generation_keeps_its_own_prefill_and_the_probe_fills_the_store(lcpp, make_item):
    """llama.cpp's numbers move with where a sequence's cells lie among others' (up to 2e-3 nats per
    token measured on the embedded model), so its generation never takes a prefill from the store;
    its probes share their prompt sides, exactly."""
    prompts = prompts_of(lcpp, 4)
    rows = [prompts[i % 3] for i in range(9)]
    seeds = list(range(100, 109))
    config = SamplingConfig(max_new_tokens=16)
    lcpp.prefixes = None
    plain = lcpp.generate(rows, config, seeds, batch_size=4)
    lcpp.prefixes = PrefixStore(2**30)
    try:
        assert [g.text for g in lcpp.generate(rows, config, seeds, batch_size=4)] == [g.text for g in plain]
        assert lcpp.prefixes.stats.hits == lcpp.prefixes.stats.tokens_saved == 0 and len(lcpp.prefixes) == 0
        item = make_item(lcpp, QUESTION, context(3)[:2], plain[0].text)
        got = [make_estimator("loo").score(lcpp, item).values for _ in range(2)]
        # the second probe's full prompt came from the first; its cut variants already reuse as much as
        # a pass of at least 64 tokens allows (MIN_SCORING_FEED) from the full one
        assert lcpp.prefixes.stats.hits == 1 and lcpp.prefixes.stats.tokens_saved > 0
    finally:
        lcpp.prefixes = None
    np.testing.assert_allclose(got[1], got[0], atol=1e-5)
    np.testing.assert_allclose(got[0], make_estimator("loo").score(lcpp, item).values, atol=1e-5)


def test_length_groups_close_a_batch_before_padding_exceeds_the_slack():
    assert length_groups([1000, 1010, 7282, 990, 1020]) == [[3, 0, 1, 4], [2]]  # the long prompt alone
    assert length_groups([500] * 6) == [list(range(6))] and length_groups([]) == []
    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(1, 3000, size=int(rng.integers(1, 20))).tolist()
        groups = length_groups(lengths, slack=1.25)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))  # every prompt once
        for g in groups:  # padded area within the slack, unless the batch is one prompt
            assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 1.25 * sum(lengths[i] for i in g)


def test_prompts_of_very_different_lengths_prefill_apart_and_generate_as_alone(tiny_lm):
    short = list(tiny_lm.encode_prompt(QUESTION, context(1)).ids)
    long = list(tiny_lm.encode_prompt(QUESTION, context(5) * 3).ids)
    assert len(long) > 2 * len(short)  # two length groups
    rows, seeds = [short, long, short[:-1]], [7, 8, 9]
    config = SamplingConfig(max_new_tokens=10)
    alone = [without_store(tiny_lm).generate([row], config, [seed])[0] for row, seed in zip(rows, seeds, strict=True)]
    lm = dataclasses.replace(tiny_lm, prefixes=PrefixStore(2**30))
    assert lm.generate(rows, config, seeds, batch_size=8) == alone
    assert without_store(tiny_lm).generate(rows, config, seeds, batch_size=8) == alone  # one padded pass agrees
