"""A probe's prompts as rows of one forward pass (`ascp.lm.batched`, the GPU path), checked on the CPU
with the tiny model against the sequential scorer, a naive pass per prompt and a plain forward pass
of `lm.model` (no ascp code)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_lm_prefixes import QUESTION, RESPONSES, context
from test_lm_scoring import reference_logprobs

from ascp.attribution import make_estimator
from ascp.lm.prefixes import PrefixStore

TOL = 1e-5  # nats per response token (float32 model, float64 log-softmax)


def sequential(lm):
    return dataclasses.replace(lm, prefixes=None, variant_rows=0)


def batched(lm, rows: int, store: PrefixStore | None = None):
    return dataclasses.replace(lm, prefixes=store, variant_rows=rows)


def loo_prompts(lm, item) -> list[tuple[int, ...]]:
    k = len(item.passages)
    return [item.prompt.ids, *(tuple(lm.encode(item.prompt.edited_text({i + 1: ""}))) for i in range(k))]


@pytest.mark.parametrize("name", ["loo", "replace", "hierarchical", "contextcite"])
@pytest.mark.parametrize("rows", [2, 5, 16])
def test_every_estimator_batched_equals_the_sequential_path(tiny_lm, make_item, name, rows):
    estimator = make_estimator(name, **({"seed": 3} if name == "contextcite" else {}))
    for response in RESPONSES[:2]:
        item = make_item(tiny_lm, QUESTION, context(5), response)
        got = estimator.score(batched(tiny_lm, rows), item)
        want = estimator.score(sequential(tiny_lm), item)
        np.testing.assert_allclose(got.values, want.values, atol=TOL)
        if got.full_logprobs is not None:
            np.testing.assert_allclose(got.full_logprobs, want.full_logprobs, atol=TOL)


def test_rows_equal_a_plain_forward_pass_and_feed_the_sequential_tokens(tiny_lm, make_item):
    item = make_item(tiny_lm, QUESTION, context(5), RESPONSES[0])
    prompts = [*loo_prompts(tiny_lm, item), tuple(tiny_lm.encode("an unrelated prompt that shares no prefix"))]
    got = batched(tiny_lm, 3).score(prompts, item.response_ids)
    want = sequential(tiny_lm).score(prompts, item.response_ids)
    for ids, logprobs in zip(prompts, got.logprobs, strict=True):
        assert np.isfinite(logprobs).all()
        np.testing.assert_allclose(logprobs, reference_logprobs(tiny_lm, ids, item.response_ids), atol=TOL)
    assert got.tokens_processed == want.tokens_processed  # real tokens only: padding is not counted


def test_repeated_prompts_come_back_in_order(tiny_lm, make_item):
    item = make_item(tiny_lm, QUESTION, context(3), RESPONSES[1])
    prompts = loo_prompts(tiny_lm, item)
    shuffled = [prompts[2], prompts[0], prompts[2], prompts[1]]
    got = batched(tiny_lm, 4).score(shuffled, item.response_ids)
    ref = sequential(tiny_lm).score(shuffled, item.response_ids)
    for a, b in zip(got.logprobs, ref.logprobs, strict=True):
        np.testing.assert_allclose(a, b, atol=TOL)
    np.testing.assert_array_equal(got.logprobs[0], got.logprobs[2])


def test_later_responses_start_from_each_variants_stored_prompt(tiny_lm, make_item):
    store = PrefixStore(2**30)
    lm = batched(tiny_lm, 4, store)
    for n, response in enumerate(RESPONSES):
        item = make_item(tiny_lm, QUESTION, context(4), response)
        prompts = loo_prompts(tiny_lm, item)
        got = lm.score(prompts, item.response_ids)
        want = sequential(tiny_lm).score(prompts, item.response_ids)
        for a, b in zip(got.logprobs, want.logprobs, strict=True):
            np.testing.assert_allclose(a, b, atol=TOL)
        if n:  # each variant: its last prompt token + the response but its last token
            assert got.tokens_processed == len(prompts) * len(item.response_ids)
    assert store.stats.hits == 2 * 5


def test_the_default_is_sequential_on_the_cpu(tiny_lm):
    assert dataclasses.replace(tiny_lm, variant_rows=None).rows_per_pass == 0
    assert batched(tiny_lm, 7).rows_per_pass == 7


@pytest.mark.parametrize("rows", [0, 4])
def test_the_stores_tokens_not_fed_are_what_a_pass_without_it_feeds_more(tiny_lm, make_item, rows):
    """One token-counting rule: the prefix store's "prompt tokens not fed" are exactly the tokens a
    scorer without the store feeds on top of one with it, sequential (rows = 0) and batched alike."""
    store = PrefixStore(2**30)
    lm = batched(tiny_lm, rows, store)
    for n, response in enumerate(RESPONSES[:3]):
        item = make_item(tiny_lm, QUESTION, context(4), response)
        prompts = loo_prompts(tiny_lm, item)
        before = store.stats.tokens_saved
        fed = lm.score(prompts, item.response_ids).tokens_processed
        without = batched(tiny_lm, rows).score(prompts, item.response_ids).tokens_processed
        assert fed + store.stats.tokens_saved - before == without
        assert (store.stats.tokens_saved > before) == (n > 0)
