"""Exactness of the shared-prefix (KV-cache) scorer against naive and independent references.

The reference in this module uses nothing from `ascp.lm.scoring`: it cuts the edited prompt out
of the prompt text by character spans, tokenizes that text as a whole with the tokenizer itself
(`tokenizer(text)`, what a user's own stack feeds), runs one plain full forward pass of
`lm.model` over prompt + response ids and reads the log-probability of each response token from
the position before it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_text

from ascp.attribution.ablation import Ablations
from ascp.attribution.loo import LeaveOneOut
from ascp.lm.scoring import exact_loo_floor_tokens

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


def user_ids(lm, text: str) -> list[int]:
    """What a user's own stack feeds for a prompt text: the tokenizer on the whole string."""
    return list(lm.tokenizer(text, add_special_tokens=False)["input_ids"])


def segment_bounds(prompt) -> list[tuple[int, int]]:
    """Character span of every segment: the prefix, each passage block (from the output's
    `passage_char_spans`) and the tail."""
    spans = list(prompt.passage_char_spans().values())
    first = spans[0][0] if spans else len(prompt.segment_texts[0])
    last = spans[-1][1] if spans else first
    return [(0, first), *spans, (last, len(prompt.text))]


def apply_edit(lm, prompt, edit) -> list[int]:
    """`tokenizer(text)` of the prompt text with `edit` (segment index -> replacement text) applied."""
    text = prompt.text
    for s, (start, end) in sorted(enumerate(segment_bounds(prompt)), reverse=True):
        if s in edit:
            text = text[:start] + edit[s] + text[end:]
    return user_ids(lm, text)


def reference_loo(lm, item) -> np.ndarray:
    """LOO from scratch: re-render the prompt without each passage and run full forward passes."""
    full = reference_logprobs(lm, item.prompt.ids, item.response_ids).mean()
    scores = []
    for i in range(len(item.passages)):
        kept = item.passages[:i] + item.passages[i + 1 :]
        ablated = lm.encode_prompt(item.question, kept)
        # Immutable identifiers: the re-rendered prompt is the full prompt text minus one block.
        assert list(ablated.ids) == apply_edit(lm, item.prompt, {i + 1: ""})
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
    cached = cached_est.score(tiny_lm, item).values
    naive = naive_est.score(tiny_lm, item).values
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
    cached = cached_est.score(tiny_lm, item)
    naive = naive_est.score(tiny_lm, item)

    floor = exact_loo_floor_tokens(tiny_lm, item.prompt, n)
    assert cached.tokens_processed == floor
    # Naive: one full pass plus one pass per ablated prompt, the last response token never fed.
    ablated = [apply_edit(tiny_lm, item.prompt, {i + 1: ""}) for i in range(k)]
    N = item.prompt.num_tokens
    assert naive.tokens_processed == (N + n - 1) + sum(len(a) + n - 1 for a in ablated)
    assert cached.tokens_processed < naive.tokens_processed


def test_a_later_call_feeds_each_edited_prompts_tail_as_one_call_does(random_item):
    """Deletions scored over two calls (as `gated` verifies: the last passage, then the open ones):
    the full prompt leads the later call from the prefix store, so each deletion still re-feeds
    only what follows its common prefix with the full prompt; the values are the naive passes'."""
    from ascp.lm.prefixes import PrefixStore
    from ascp.lm.tiny import tiny_language_model

    model = tiny_language_model(seed=0)
    model.prefixes = PrefixStore(max_bytes=200_000_000)
    k = 5
    item = random_item(model, k, seed=44)
    n = len(item.response_ids)
    split = Ablations(model, item.prompt, item.response_ids)
    values = split.score([{k: ""}]) + split.score([{i + 1: ""} for i in range(k - 1)])
    # one call's floor, plus the full prompt re-fed from the store to lead the later call
    assert split.tokens_processed == exact_loo_floor_tokens(model, item.prompt, n) + n
    naive = Ablations(model, item.prompt, item.response_ids, reuse_prefix=False)
    expected = naive.score([{k: ""}, *({i + 1: ""} for i in range(k - 1))])
    for got, want in zip(values, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    assert split.score([]) == []


def common_prefix_length(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_floor_by_hand(tiny_lm, random_item):
    # Hand count for k = 2: the full pass, then each ablated prompt after its common token
    # prefix with the full prompt; that prefix reaches the deleted block's start (within one
    # token: the separator before a block may tokenize differently from the text before it alone).
    item = random_item(tiny_lm, 2, seed=3)
    p, n = item.prompt, len(item.response_ids)
    full = user_ids(tiny_lm, p.text)
    expected = len(full) + n - 1
    for i, (start, _) in enumerate(p.passage_char_spans().values()):
        ablated = apply_edit(tiny_lm, p, {i + 1: ""})
        shared = common_prefix_length(full, ablated)
        assert shared >= len(user_ids(tiny_lm, p.text[:start])) - 1
        expected += len(ablated) - shared + n - 1
    assert exact_loo_floor_tokens(tiny_lm, p, n) == expected


def test_full_logprobs_match_reference(tiny_lm, random_item):
    item = random_item(tiny_lm, 4, seed=5)
    ref = reference_logprobs(tiny_lm, item.prompt.ids, item.response_ids)
    for reuse in (True, False):
        scorer = Ablations(tiny_lm, item.prompt, item.response_ids, reuse_prefix=reuse)
        assert scorer.full_logprobs.shape == (len(item.response_ids),)
        np.testing.assert_allclose(scorer.full_logprobs, ref, rtol=0, atol=1e-4)
        assert scorer.full_logprobs.sum() == pytest.approx(ref.sum(), abs=1e-3)


def test_empty_edit_returns_full_logprobs(tiny_lm, random_item):
    item = random_item(tiny_lm, 3, seed=6)
    scorer = Ablations(tiny_lm, item.prompt, item.response_ids)
    out = scorer.score([{}, {2: ""}, {}])
    np.testing.assert_array_equal(out[0], scorer.full_logprobs)
    np.testing.assert_array_equal(out[2], scorer.full_logprobs)
    assert not np.allclose(out[1], scorer.full_logprobs)  # the deletion really changed something
    # The full pass, then nothing for the empty edits; the deletion of block 2 re-feeds only
    # what follows the common prefix of the two prompts.
    full, ablated = list(item.prompt.ids), apply_edit(tiny_lm, item.prompt, {2: ""})
    fed = len(ablated) - common_prefix_length(full, ablated)
    n = len(item.response_ids)
    assert scorer.tokens_processed == (len(full) + n - 1) + fed + n - 1


def _random_edits(rng: np.random.Generator, prompt, count: int) -> list[dict[int, str]]:
    """Deletions of passage subsets (ContextCite masks), replacements (any length, any segment),
    edits of the prefix and of the tail, no-op replacements and empty edits."""
    k = len(prompt.passage_ids)
    last = k + 1
    edits: list[dict[int, str]] = [
        {},
        {last: ""},  # delete the tail: the first response token is predicted by the last passage
        {k: "", last: ""},  # delete everything after the second-to-last passage
        {0: random_text(rng, 2, 6)},  # replace the prefix
        {1: prompt.segment_texts[1]},  # replace a block by itself (a no-op)
        {last: random_text(rng, 1, 4) + "\n"},  # replace the tail
    ]
    while len(edits) < count:
        if rng.random() < 0.5:  # ContextCite-style: drop a random subset of passages
            keep = rng.random(k) < 0.5
            edits.append({i + 1: "" for i in range(k) if not keep[i]})
        else:  # replace one or more random passage blocks or the tail by random text
            segs = rng.choice(np.arange(1, k + 2), size=int(rng.integers(1, 3)), replace=False)
            edits.append({int(s): random_text(rng, 0, 9) + rng.choice(["", "\n\n", " "]) for s in segs})
    order = rng.permutation(len(edits))
    return [edits[i] for i in order]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_arbitrary_edits_equal_naive_and_reference(tiny_lm, random_item, seed):
    rng = np.random.default_rng(100 + seed)
    item = random_item(tiny_lm, 5, seed=20 + seed)
    edits = _random_edits(rng, item.prompt, count=16)

    cached = Ablations(tiny_lm, item.prompt, item.response_ids).score(edits)
    naive = Ablations(tiny_lm, item.prompt, item.response_ids, reuse_prefix=False).score(edits)
    assert len(cached) == len(naive) == len(edits)
    for edit, c, v in zip(edits, cached, naive, strict=True):
        ref = reference_logprobs(tiny_lm, apply_edit(tiny_lm, item.prompt, edit), item.response_ids)
        assert c.shape == v.shape == ref.shape
        assert abs(c.mean() - v.mean()) < TOL, edit
        assert abs(c.mean() - ref.mean()) < TOL, edit
        np.testing.assert_allclose(c, ref, rtol=0, atol=1e-4)


def test_repeated_calls_on_one_scorer_stay_exact(tiny_lm, random_item):
    # The cache state carried between calls (cropped, extended, overwritten) must never leak.
    item = random_item(tiny_lm, 5, seed=30)
    cached = Ablations(tiny_lm, item.prompt, item.response_ids)
    naive = Ablations(tiny_lm, item.prompt, item.response_ids, reuse_prefix=False)
    batches = [
        [{4: ""}],
        [{1: ""}],
        [{5: "the quick fox\n\n"}, {2: ""}],
        [{}],
        [{6: ""}, {3: "", 4: ""}],
        [{0: "answer it "}],
        [{5: ""}],
    ]
    for edits in batches:
        for c, v in zip(cached.score(edits), naive.score(edits), strict=True):
            np.testing.assert_allclose(c, v, rtol=0, atol=1e-4)
            assert abs(c.mean() - v.mean()) < TOL


def test_single_token_response(tiny_lm, random_item):
    item = random_item(tiny_lm, 3, seed=40)
    response = item.response_ids[:1]
    edits = [{1: ""}, {3: ""}, {2: "dog dog\n\n"}]
    cached = Ablations(tiny_lm, item.prompt, response).score(edits)
    for edit, c in zip(edits, cached, strict=True):
        ref = reference_logprobs(tiny_lm, apply_edit(tiny_lm, item.prompt, edit), response)
        assert c.shape == (1,)
        np.testing.assert_allclose(c, ref, rtol=0, atol=1e-4)


def test_empty_response_is_rejected(tiny_lm, random_item):
    item = random_item(tiny_lm, 2, seed=41)
    with pytest.raises(ValueError):
        Ablations(tiny_lm, item.prompt, ())
