"""Exactness of the shared-prefix (KV-cache) scorer against naive and independent references.

The reference in this module uses nothing from `ascp.lm.scoring`: it runs one plain full forward
pass of `lm.model` over prompt + response ids and reads the log-probability of each response
token from the position before it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ascp.attribution.loo import LeaveOneOut
from ascp.lm.scoring import AblationScorer, exact_loo_floor_tokens

TOL = 1e-5  # nats per response token (float32 model, float64 log-softmax)


def reference_logprobs(lm, prompt_ids, response_ids) -> np.ndarray:
    """Per-token log p(response | prompt) from one plain forward pass (no cache, no ascp code)."""
    prompt_ids, response_ids = list(prompt_ids), list(response_ids)
    ids = torch.tensor([prompt_ids + response_ids], dtype=torch.long)
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0].to(torch.float64)
    logp = torch.log_softmax(logits, dim=-1)
    n = len(prompt_ids)
    rows = torch.arange(n - 1, n - 1 + len(response_ids))
    return logp[rows, torch.tensor(response_ids)].numpy()


def apply_edit(prompt, edit) -> list[int]:
    """The token ids of the prompt with `edit` (segment index -> replacement ids) applied."""
    return [t for s, seg in enumerate(prompt.segments) for t in edit.get(s, seg)]


def reference_loo(lm, item) -> np.ndarray:
    """LOO from scratch: re-render the prompt without each passage and run full forward passes."""
    full = reference_logprobs(lm, item.prompt.ids, item.response_ids).mean()
    scores = []
    for i in range(len(item.passages)):
        kept = item.passages[:i] + item.passages[i + 1 :]
        ablated = lm.encode_prompt(item.question, kept)
        # Immutable identifiers: the re-rendered prompt is the full prompt minus one block.
        assert ablated.ids == apply_edit(item.prompt, {i + 1: ()})
        scores.append(full - reference_logprobs(lm, ablated.ids, item.response_ids).mean())
    return np.array(scores)


def test_tiny_model_supports_the_prefix_cache(tiny_lm):
    # Otherwise every "cached" test below would silently compare naive against naive.
    assert tiny_lm.supports_prefix_cache


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("seed", [0, 1])
def test_cached_loo_equals_naive_and_reference(tiny_lm, random_item, k, seed):
    item = random_item(tiny_lm, k, seed)
    cached_est, naive_est = LeaveOneOut(), LeaveOneOut(reuse_prefix=False)
    cached = cached_est.score(tiny_lm, item)
    naive = naive_est.score(tiny_lm, item)
    reference = reference_loo(tiny_lm, item)

    assert cached.shape == naive.shape == (k,)
    np.testing.assert_allclose(cached, naive, rtol=0, atol=TOL)
    np.testing.assert_allclose(cached, reference, rtol=0, atol=TOL)
    np.testing.assert_allclose(naive, reference, rtol=0, atol=TOL)
    # The random model does react to passages: the scores are not trivially zero.
    assert np.abs(reference).max() > 1e-3


@pytest.mark.parametrize("k", [1, 3, 6])
def test_cached_loo_feeds_exactly_the_floor(tiny_lm, random_item, k):
    item = random_item(tiny_lm, k, seed=10 + k)
    n = len(item.response_ids)
    cached_est, naive_est = LeaveOneOut(), LeaveOneOut(reuse_prefix=False)
    cached_est.score(tiny_lm, item)
    naive_est.score(tiny_lm, item)

    floor = exact_loo_floor_tokens(item.prompt, n)
    assert cached_est.last_tokens_processed == floor
    # Naive: one full pass plus one pass per ablated prompt, the last response token never fed.
    N = item.prompt.num_tokens
    blocks = item.prompt.passage_token_counts()
    assert naive_est.last_tokens_processed == (k + 1) * (N + n - 1) - sum(blocks)
    assert cached_est.last_tokens_processed < naive_est.last_tokens_processed


def test_floor_by_hand(tiny_lm, random_item):
    # Hand count for k = 2: full pass, then (after block 1) and (after block 2) re-run.
    item = random_item(tiny_lm, 2, seed=3)
    p, n = item.prompt, len(item.response_ids)
    prefix, b1, b2, tail = (len(s) for s in p.segments)
    expected = (prefix + b1 + b2 + tail + n - 1) + (b2 + tail + n - 1) + (tail + n - 1)
    assert exact_loo_floor_tokens(p, n) == expected


def test_full_logprobs_match_reference(tiny_lm, random_item):
    item = random_item(tiny_lm, 4, seed=5)
    ref = reference_logprobs(tiny_lm, item.prompt.ids, item.response_ids)
    for reuse in (True, False):
        scorer = AblationScorer(tiny_lm, item.prompt, item.response_ids, reuse_prefix=reuse)
        assert scorer.full_logprobs.shape == (len(item.response_ids),)
        np.testing.assert_allclose(scorer.full_logprobs, ref, rtol=0, atol=1e-4)
        assert scorer.full_logprob == pytest.approx(ref.sum(), abs=1e-3)


def test_empty_edit_returns_full_logprobs(tiny_lm, random_item):
    item = random_item(tiny_lm, 3, seed=6)
    scorer = AblationScorer(tiny_lm, item.prompt, item.response_ids)
    before = scorer.tokens_processed
    out = scorer.score([{}, {2: ()}, {}])
    np.testing.assert_array_equal(out[0], scorer.full_logprobs)
    np.testing.assert_array_equal(out[2], scorer.full_logprobs)
    assert not np.allclose(out[1], scorer.full_logprobs)  # the deletion really changed something
    # The empty edits cost nothing; the deletion of block 2 re-feeds only what follows it.
    after_block_2 = sum(len(s) for s in item.prompt.segments[3:])
    assert scorer.tokens_processed - before == after_block_2 + len(item.response_ids) - 1


def _random_edits(rng: np.random.Generator, prompt, vocab: int, count: int) -> list[dict[int, list[int]]]:
    """Deletions of passage subsets (ContextCite masks), replacements (any length, any segment),
    edits of the prefix and of the tail, no-op replacements and empty edits."""
    k = len(prompt.segments) - 2
    last = k + 1
    edits: list[dict[int, list[int]]] = [
        {},
        {last: []},  # delete the tail: the first response token is predicted by the last passage
        {k: [], last: []},  # delete everything after the second-to-last passage
        {0: list(rng.integers(3, vocab, size=5))},  # replace the prefix
        {0: []},  # delete the prefix
        {1: list(prompt.segments[1])},  # replace a block by itself (a no-op)
        {last: list(rng.integers(3, vocab, size=3))},  # replace the tail
    ]
    while len(edits) < count:
        if rng.random() < 0.5:  # ContextCite-style: drop a random subset of passages
            keep = rng.random(k) < 0.5
            edits.append({i + 1: [] for i in range(k) if not keep[i]})
        else:  # replace one or more random segments by random ids of random length
            segs = rng.choice(np.arange(0, k + 2), size=int(rng.integers(1, 3)), replace=False)
            edits.append({int(s): list(rng.integers(3, vocab, size=int(rng.integers(0, 9)))) for s in segs})
    order = rng.permutation(len(edits))
    return [edits[i] for i in order]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_arbitrary_edits_equal_naive_and_reference(tiny_lm, random_item, seed):
    rng = np.random.default_rng(100 + seed)
    item = random_item(tiny_lm, 5, seed=20 + seed)
    edits = _random_edits(rng, item.prompt, len(tiny_lm.tokenizer), count=16)

    cached = AblationScorer(tiny_lm, item.prompt, item.response_ids).score(edits)
    naive = AblationScorer(tiny_lm, item.prompt, item.response_ids, reuse_prefix=False).score(edits)
    assert len(cached) == len(naive) == len(edits)
    for edit, c, v in zip(edits, cached, naive, strict=True):
        ref = reference_logprobs(tiny_lm, apply_edit(item.prompt, edit), item.response_ids)
        assert c.shape == v.shape == ref.shape
        assert abs(c.mean() - v.mean()) < TOL, edit
        assert abs(c.mean() - ref.mean()) < TOL, edit
        np.testing.assert_allclose(c, ref, rtol=0, atol=1e-4)


def test_repeated_calls_on_one_scorer_stay_exact(tiny_lm, random_item):
    # The cache state carried between calls (cropped, extended, overwritten) must never leak.
    item = random_item(tiny_lm, 5, seed=30)
    cached = AblationScorer(tiny_lm, item.prompt, item.response_ids)
    naive = AblationScorer(tiny_lm, item.prompt, item.response_ids, reuse_prefix=False)
    batches = [
        [{4: []}],
        [{1: []}],
        [{5: [7, 8, 9]}, {2: []}],
        [{}],
        [{6: []}, {3: [], 4: []}],
        [{0: [11, 12]}],
        [{5: []}],
    ]
    for edits in batches:
        for c, v in zip(cached.score(edits), naive.score(edits), strict=True):
            np.testing.assert_allclose(c, v, rtol=0, atol=1e-4)
            assert abs(c.mean() - v.mean()) < TOL


def test_single_token_response(tiny_lm, random_item):
    item = random_item(tiny_lm, 3, seed=40)
    response = item.response_ids[:1]
    edits = [{1: []}, {3: []}, {2: [5, 6]}]
    cached = AblationScorer(tiny_lm, item.prompt, response).score(edits)
    for edit, c in zip(edits, cached, strict=True):
        ref = reference_logprobs(tiny_lm, apply_edit(item.prompt, edit), response)
        assert c.shape == (1,)
        np.testing.assert_allclose(c, ref, rtol=0, atol=1e-4)


def test_empty_response_is_rejected(tiny_lm, random_item):
    item = random_item(tiny_lm, 2, seed=41)
    with pytest.raises(ValueError):
        AblationScorer(tiny_lm, item.prompt, ())
