"""Batched sampling: seeded, batch-invariant per prompt, greedy at temperature 0, length-limited."""

from __future__ import annotations

import pytest
import torch

from ascp.attribution.probe import ProbeConfig, prepare_inputs
from ascp.errors import AscpError
from ascp.lm.hf import SamplingConfig, derive_seed, generate
from ascp.types import AttributionRequest, Passage

PASSAGES = (
    Passage(id="a", title="Author", text="Passage one says the author was born in 1850 in a small town."),
    Passage(id="b", title="Edition", text="Passage two names the first edition of 1899."),
    Passage(id="c", text="The quick brown fox jumps over the lazy dog."),
)


@pytest.fixture(scope="module")
def prompts(tiny_lm):
    """Three prompts of different lengths (so batching left-pads two of them)."""
    return [
        tiny_lm.encode_prompt("Who wrote the novel and when was it published?", PASSAGES).ids,
        tiny_lm.encode_prompt("When?", PASSAGES[:1]).ids,
        tiny_lm.encode_prompt("Which edition was first?", PASSAGES[1:]).ids,
    ]


CONFIG = SamplingConfig(max_new_tokens=10)


def test_same_seed_same_text(tiny_lm, prompts):
    a = generate(tiny_lm, prompts[:1], CONFIG, [123])[0]
    b = generate(tiny_lm, prompts[:1], CONFIG, [123])[0]
    assert a.token_ids and a.token_ids == b.token_ids and a.text == b.text
    assert a.text == tiny_lm.decode(a.token_ids)


def test_different_seeds_differ(tiny_lm, prompts):
    outs = {generate(tiny_lm, prompts[:1], CONFIG, [s])[0].token_ids for s in range(4)}
    assert len(outs) > 1


def test_sample_is_independent_of_the_batch(tiny_lm, prompts):
    seeds = [11, 22, 33]
    batched = generate(tiny_lm, prompts, CONFIG, seeds)
    reordered = generate(tiny_lm, prompts[::-1], CONFIG, seeds[::-1])[::-1]
    for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        alone = generate(tiny_lm, [prompt], CONFIG, [seed])[0]
        assert batched[i].token_ids == alone.token_ids
        assert reordered[i].token_ids == alone.token_ids
    # batch_size smaller than the number of prompts gives the same samples
    chunked = generate(tiny_lm, prompts, CONFIG, seeds, batch_size=2)
    assert [g.token_ids for g in chunked] == [g.token_ids for g in batched]


def greedy_reference(lm, prompt, max_new_tokens):
    """Argmax continuation by repeated plain full forward passes (no cache, no ascp code)."""
    ids, out = list(prompt), []
    for _ in range(max_new_tokens):
        with torch.no_grad():
            token = int(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        if token in lm.eos_token_ids:
            return tuple(out), True
        out.append(token)
        ids.append(token)
    return tuple(out), False


def test_temperature_zero_is_greedy(tiny_lm, prompts):
    config = SamplingConfig(temperature=0.0, max_new_tokens=10)
    batched = generate(tiny_lm, prompts, config, [1, 2, 3])
    for prompt, gen in zip(prompts, batched, strict=True):
        ids, finished = greedy_reference(tiny_lm, prompt, 10)
        assert gen.token_ids == ids
        assert gen.finished == finished
    # The seed is irrelevant when decoding greedily.
    assert generate(tiny_lm, prompts[:1], config, [999])[0].token_ids == batched[0].token_ids


@pytest.mark.parametrize("limit", [1, 3, 7])
def test_max_new_tokens_is_respected(tiny_lm, prompts, limit):
    gens = generate(tiny_lm, prompts, SamplingConfig(max_new_tokens=limit), [5, 6, 7])
    assert any(not g.finished for g in gens), "test precondition: some sample runs to the limit"
    for g in gens:
        assert len(g.token_ids) <= limit
        if not g.finished:
            assert len(g.token_ids) == limit
        assert not set(g.token_ids) & tiny_lm.eos_token_ids


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -1},
        {"max_new_tokens": 0},
        {"repetition_penalty": 0.0},
    ],
)
def test_sampling_config_rejects_bad_values(kwargs):
    with pytest.raises(AscpError):
        SamplingConfig(**kwargs)


def test_sampling_config_accepts_edge_values():
    SamplingConfig(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=1, repetition_penalty=1.0)


def test_top_k_one_is_greedy(tiny_lm, prompts):
    greedy = generate(tiny_lm, prompts, SamplingConfig(temperature=0.0, max_new_tokens=6), [0, 0, 0])
    topk1 = generate(tiny_lm, prompts, SamplingConfig(temperature=1.0, top_k=1, max_new_tokens=6), [4, 5, 6])
    assert [g.token_ids for g in topk1] == [g.token_ids for g in greedy]


def test_one_seed_per_prompt_is_required(tiny_lm, prompts):
    with pytest.raises(ValueError):
        generate(tiny_lm, prompts, CONFIG, [1])


def test_derive_seed():
    assert derive_seed(0, "q1") == derive_seed(0, "q1")
    assert derive_seed(0, "q1") != derive_seed(0, "q2")
    assert derive_seed(0, "q1") != derive_seed(1, "q1")
    assert all(0 <= derive_seed(s, "x") < 2**63 for s in range(20))


def test_free_protocol_response_depends_only_on_seed_and_request(tiny_lm):
    requests = [
        AttributionRequest(id=f"r{i}", question=q, passages=PASSAGES[: i + 1], response=None)
        for i, q in enumerate(["Who wrote it?", "When was it published?", "Which edition?"])
    ]
    config = ProbeConfig(sampling=SamplingConfig(max_new_tokens=8), seed=3)
    together = prepare_inputs(tiny_lm, requests, config)
    again = prepare_inputs(tiny_lm, requests, config)
    alone = prepare_inputs(tiny_lm, requests[1:2], config)[0]
    assert [t.response_ids for t in together] == [a.response_ids for a in again]
    assert together[1].response_ids == alone.response_ids
    assert together[1].response_text == alone.response_text
    for item in together:  # scored as tokenizer(text) of the response text it reports
        assert len(item.response_ids) > 0
        assert list(item.response_ids) == tiny_lm.tokenizer(item.response_text, add_special_tokens=False)["input_ids"]
        assert item.response_text == tiny_lm.decode(item.response_ids)
    other_seed = prepare_inputs(tiny_lm, requests, ProbeConfig(sampling=SamplingConfig(max_new_tokens=8), seed=4))
    assert [t.response_ids for t in other_seed] != [t.response_ids for t in together]
