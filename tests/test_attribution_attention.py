"""The one-pass attention estimators: pooled features, the fitted map file, the gate, the fit verb."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ascp.attribution import make_estimator
from ascp.attribution.attention import attention_model
from ascp.attribution.attention_map import FEATURE, SHIPPED, AttentionMap, load_map, map_for, model_digest
from ascp.attribution.base import ProbeInput
from ascp.attribution.gated import EXACT_UP_TO, GatedEstimator, GatedScores, gate, unsettled
from ascp.attribution.loo import LeaveOneOut
from ascp.errors import AscpError
from ascp.fitprobe.fit import (
    ReadContext,
    agreement,
    draw_contexts,
    fit_weights,
    gated_reading,
    size_band,
)
from ascp.lm.attention import passage_token_spans
from ascp.lm.tiny import tiny_language_model
from ascp.reading import free_threshold, normalize, used_mask
from ascp.types import Case, Passage

TINY_MAP = SHIPPED / "tiny-random-0.json"


@pytest.fixture(scope="module")
def lm():
    """The tiny random model (seed 0: the shipped test map's), without a prefix store."""
    model = tiny_language_model(seed=0)
    model.prefixes = None
    return model


def eager_reference(lm, item: ProbeInput, tokens: list[int] | None = None) -> np.ndarray:
    """AT2's feature by hand: eager attention weights kept whole, pooled per passage block (over the rows
    predicting `tokens` only, when given)."""
    import torch

    model = lm.model
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        sequence = [*item.prompt.ids, *item.response_ids[:-1]]
        with torch.no_grad():
            out = model(input_ids=torch.tensor([sequence]), output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    start, rows = item.prompt.num_tokens - 1, len(item.response_ids)
    spans = passage_token_spans(lm, item.prompt)
    ref = np.zeros((len(spans), len(out.attentions), out.attentions[0].shape[1]))
    for layer, weights in enumerate(out.attentions):
        w = weights[0, :, start:start + rows, :].double().numpy()  # (heads, response rows, T)
        if tokens is not None:
            w = w[:, tokens]
        for j, (a, b) in enumerate(spans):
            ref[j, layer] = w[:, :, a:b].sum(-1).mean(-1)
    return ref


def test_pooled_features_equal_the_eager_reference(lm, random_item):
    """Grouped-query heads (4 query heads over 2 key/value heads), the causal mask and the scaling:
    the inline pooling equals output_attentions=True with eager attention, pooled by hand."""
    for k, seed in ((1, 3), (4, 5), (6, 8)):
        item = random_item(lm, k, seed)
        read = lm.read_attention(item.prompt, item.response_ids)
        assert read.features.shape == (k, 2, 4)
        np.testing.assert_allclose(read.features, eager_reference(lm, item), atol=1e-5, rtol=0)
        assert read.features.sum(axis=0).max() <= 1 + 1e-6  # blocks are disjoint parts of each softmax row
        full = LeaveOneOut().score(lm, item).full_logprobs
        np.testing.assert_allclose(read.full_logprobs, full, atol=1e-4)  # the same pass scores the response
        # the pass over prompt + response, then k knockout passes of the response's length
        assert read.tokens_processed == item.prompt.num_tokens + len(item.response_ids) - 1 + k * len(item.response_ids)


def knockout_reference(lm, item: ProbeInput, tokens: list[int] | None = None) -> np.ndarray:
    """Knockout by hand: one uncached pass of prompt + response per passage with eager attention and
    an explicit mask that hides the block from the rows predicting the response, and only from them
    (the drop read over `tokens` only, when given)."""
    import torch

    model = lm.model
    sequence = [*item.prompt.ids, *item.response_ids[:-1]]
    start, rows, n = item.prompt.num_tokens - 1, len(item.response_ids), len(sequence)
    target = torch.tensor(list(item.response_ids))[:, None]

    def mean_logprob(hidden: tuple[int, int] | None) -> float:
        allowed = torch.ones(n, n).tril().bool()
        if hidden is not None:
            allowed[start:, hidden[0]:hidden[1]] = False
        mask = torch.zeros(1, 1, n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)
        previous = model.config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([sequence]), attention_mask=mask).logits[0, start:]
        finally:
            model.set_attn_implementation(previous)
        picked = torch.log_softmax(logits.double(), -1).gather(-1, target)[:, 0]
        return float(picked[tokens].mean() if tokens is not None else picked.mean())

    full = mean_logprob(None)
    assert rows == n - start
    return np.array([full - mean_logprob(span) for span in passage_token_spans(lm, item.prompt)])


def test_knockout_equals_an_uncached_masked_pass(lm, random_item):
    """The knockout passes run over the cached prompt with an additive mask; the reference feeds the
    whole sequence again with eager attention and the block hidden from the response rows."""
    for k, seed in ((1, 3), (4, 5), (6, 8)):
        item = random_item(lm, k, seed)
        read = lm.read_attention(item.prompt, item.response_ids)
        assert read.knockout.shape == (k,)
        np.testing.assert_allclose(read.knockout, knockout_reference(lm, item), atol=1e-4)
        assert np.abs(read.knockout).max() > 1e-3  # hiding a block changes something
        some = lm.read_attention(item.prompt, item.response_ids, knockout_of=[0])
        np.testing.assert_allclose(some.knockout[:1], read.knockout[:1], atol=1e-6)
        assert np.isnan(some.knockout[1:]).all()
        assert read.tokens_processed - some.tokens_processed == (k - 1) * len(item.response_ids)


def test_a_sentence_source_holds_the_tokens_of_its_own_words(lm):
    """Byte-level BPE folds the space before a word into the word's token (" A"), so a source's tokens
    are those anchored on its own characters: the tokenizer's decoding of each source's token span spells
    the source's text, and a one-word last sentence ("A", as an ASQA passage ending in "Since" had)
    keeps its token instead of leaving its source with none."""
    from ascp.attribution.sources import sentence_pieces, sentence_sources
    from ascp.lm.prompts import PromptTemplate

    passages = [Passage("a", "Mary Shelley wrote the novel. It was published in 1818.", "Mary Shelley"),
                Passage("d", "It was first held in 1963. A")]
    assert sentence_pieces(passages[1].text) == ["It was first held in 1963. ", "A"]
    assert [lm.tokenizer.decode([t]) for t in lm.encode("in 1963. A")][-1] == " A"  # the case being tested
    prompt, _ = sentence_sources(lm.encode_prompt("who?", passages), passages, PromptTemplate(), "r")
    for (a, b), (lo, hi) in zip(passage_token_spans(lm, prompt), prompt.passage_char_spans().values(), strict=True):
        assert b > a and lm.tokenizer.decode(list(prompt.ids[a:b])).strip() == prompt.text[lo:hi].strip()


def test_a_source_with_no_token_of_its_own_reads_nothing_and_costs_no_pass(lm):
    """A source cut inside one token ("o" inside the token "rot" of " w", "rot", "e") anchors no token: it gets an
    empty span, no attention mass, a knockout of exactly 0 with no pass fed, and the other sources read
    as the same prompt cut without it reads them."""
    from dataclasses import replace

    passages = [Passage("a", "Mary Shelley wrote the novel. It was published in 1818.", "Mary Shelley"),
                Passage("b", "The quick brown fox jumps over the lazy dog.")]
    prompt = lm.encode_prompt("who wrote it?", passages)
    head, block_a = prompt.segment_texts[:2]
    assert [lm.tokenizer.decode([t]) for t in lm.encode(" wrote")] == [" w", "rot", "e"]
    cut_at = block_a.index("rote") + 1
    segments = (head, block_a[:cut_at], block_a[cut_at:cut_at + 1], block_a[cut_at + 1:], *prompt.segment_texts[2:])
    split = replace(prompt, segment_texts=segments, passage_ids=("a1", "a2", "a3", "b"), source_segments=(1, 2, 3, 4),
                    source_passages=("a", "a", "a", "b"))
    assert split.text == prompt.text
    spans = passage_token_spans(lm, split)
    assert spans[1][0] == spans[1][1] and all(b > a for j, (a, b) in enumerate(spans) if j != 1)
    response = lm.encode("Mary Shelley wrote it.")
    read = lm.read_attention(split, response)
    assert read.knockout[1] == 0.0 and np.all(read.features[1] == 0.0)
    whole = lm.read_attention(prompt, response)  # block a unsplit: its mass is its three pieces' mass
    np.testing.assert_allclose(read.features[[0, 1, 2]].sum(0), whole.features[0], atol=1e-6)
    np.testing.assert_allclose(read.knockout[3], whole.knockout[1], atol=1e-6)
    assert read.tokens_processed == whole.tokens_processed + len(response)  # 3 knockouts fed, not 4


def test_a_part_of_the_response_reads_its_own_rows_and_knockouts(lm, random_item):
    """`AttentionPass.over(tokens)`: the attention of the rows predicting those tokens only, and the
    knockout's drop over those tokens, against eager attention and the masked pass written by hand."""
    item = random_item(lm, 4, 5)
    read = lm.read_attention(item.prompt, item.response_ids)
    n = len(item.response_ids)
    for tokens in (list(range(n // 3)), list(range(n // 3, n)), [0, n - 1]):
        features, knockout = read.over(tokens)
        np.testing.assert_allclose(features, eager_reference(lm, item, tokens), atol=1e-5, rtol=0)
        np.testing.assert_allclose(knockout, knockout_reference(lm, item, tokens), atol=1e-4)
    whole = read.over(range(n))
    np.testing.assert_allclose(whole[0], read.features, atol=1e-6)
    np.testing.assert_allclose(whole[1], read.knockout, atol=1e-9)


def test_attention_and_gated_read_each_sentence_from_their_one_pass(lm, make_item):
    """Per sentence, `attention` is the map over the sentence's rows and knockouts (so the sentences'
    token-weighted mean is the whole reading: the map is linear), and `gated` reads a verified passage
    exactly as `loo` reads it per sentence and the others as `attention` does; no token more is fed."""
    import ascp

    passages = [Passage(id=f"d{i}", title="", text=f"the quick brown fox {i} jumps over the lazy dog number {i}")
                for i in range(5)]
    response = "the author was born in 1850. the fox jumps over the dog. it was lazy."
    fitted = load_map(TINY_MAP)
    item = make_item(lm, "who wrote it?", passages, response)
    read = lm.read_attention(item.prompt, item.response_ids)
    loo = ascp.attribute("who wrote it?", passages, response, model=lm, spans="sentences")
    for estimator in ("attention", "gated(band=0.01)"):
        whole = ascp.attribute("who wrote it?", passages, response, model=lm, estimator=estimator)
        split = ascp.attribute("who wrote it?", passages, response, model=lm, estimator=estimator, spans="sentences")
        assert len(split.spans) == 3 and split.scores == whole.scores
        assert split.tokens_processed == whole.tokens_processed
        for pid, score in split.scores.items():
            weighted = sum(s.tokens * s.reading.scores[pid] for s in split.spans) / split.response_tokens
            assert weighted == pytest.approx(score, abs=1e-6)
        verified = set(split.extra.get("verified_ids", ()))
        assert estimator == "attention" or 0 < len(verified) < len(passages)
        first = 0
        for span, exact in zip(split.spans, loo.spans, strict=True):
            tokens = list(range(first, first + span.tokens))
            first += span.tokens
            predicted = fitted.predict(*read.over(tokens))
            for j, pid in enumerate(span.reading.scores):
                expected = exact.reading.scores[pid] if pid in verified else predicted[j]
                assert span.reading.scores[pid] == pytest.approx(expected, abs=1e-5), (estimator, pid)


def test_pooling_on_a_stored_prompt_feeds_the_response_only(random_item):
    """After a cached prefix the queries sit at offset positions: the mask must say so."""
    from ascp.lm.prefixes import PrefixStore

    model = tiny_language_model(seed=0)
    model.prefixes = PrefixStore(max_bytes=50_000_000)
    item = random_item(model, 3, 11)
    first = model.read_attention(item.prompt, item.response_ids)
    again = model.read_attention(item.prompt, item.response_ids)
    assert again.tokens_processed == 4 * len(item.response_ids)  # the last prompt token and the response, 1 + k times
    np.testing.assert_allclose(again.knockout, first.knockout, atol=1e-5)
    np.testing.assert_allclose(again.features, eager_reference(model, item), atol=1e-5, rtol=0)
    np.testing.assert_allclose(again.full_logprobs, first.full_logprobs, atol=1e-4)


def test_bad_input_is_one_sentence(lm, random_item):
    item = random_item(lm, 2, 1)
    with pytest.raises(AscpError, match="response has no tokens"):
        lm.read_attention(item.prompt, ())

    small = tiny_language_model(seed=0, context_window=64)
    long_item = random_item(small, 6, 2)
    with pytest.raises(AscpError, match="window"):
        small.read_attention(long_item.prompt, long_item.response_ids)

    class Served:  # a backend that gives no attention (llama.cpp, a served engine)
        backend = "llamacpp"
        name = "some.gguf"

    with pytest.raises(AscpError, match=r"only the transformers backend \(--backend hf\)"):
        attention_model(Served(), "gated")
    with pytest.raises(AscpError, match="transformers backend"):
        make_estimator("attention").score(Served(), item)  # type: ignore[arg-type]


def test_attention_is_a_capability_the_wrappers_forward(lm, random_item, tmp_path):
    """The request cache and the seam's defaults forward `read_attention` exactly when the wrapped model
    has it: the same features through the wrapper, and no attention where the model has none."""
    from ascp.lm.protocol import as_language_model, reads_attention
    from ascp.lm.request_cache import cached_model

    item = random_item(lm, 3, 5)
    cached = cached_model(lm, tmp_path / "requests.sqlite")
    assert reads_attention(lm) and reads_attention(cached) and cached.parameter_digest == lm.parameter_digest
    np.testing.assert_allclose(cached.read_attention(item.prompt, item.response_ids).features,
                               lm.read_attention(item.prompt, item.response_ids).features, atol=1e-6)

    class Plain:  # a model of one's own with the seam but no attention
        def __getattr__(self, name):
            return getattr(lm, name) if name in ("encode", "decode", "encode_prompt", "check_fits", "generate",
                                                 "score", "context_window") else object.__getattribute__(self, name)

    assert not reads_attention(as_language_model(Plain()))


# ----- the map file ---------------------------------------------------------------------------
def small_map(lm, band: float = 0.05, **changes) -> AttentionMap:
    rng = np.random.default_rng(0)
    fields = {"weights": rng.normal(size=(2, 4)), "knockout_weight": 0.9, "intercept": 0.01, "band": band,
              "model_name": "tiny",
              "fingerprint": lm.fingerprint, "digest": model_digest(lm), "fit": {"train_positions": "0-9"}}
    fields.update(changes)
    return AttentionMap(**fields)


def test_map_file_round_trip(lm, tmp_path):
    fitted = small_map(lm)
    path = fitted.save(tmp_path / "map.json")
    back = load_map(path)
    np.testing.assert_array_equal(back.weights, fitted.weights)
    assert (back.knockout_weight, back.intercept, back.band, back.fingerprint, back.digest) == (
        0.9, 0.01, 0.05, lm.fingerprint, model_digest(lm))
    assert back.fit == {"train_positions": "0-9"}
    assert json.loads(path.read_text())["feature"] == FEATURE
    features, knockout = np.random.default_rng(1).random((3, 2, 4)), np.array([0.1, -0.2, 0.3])
    np.testing.assert_allclose(back.predict(features, knockout),
                               features.reshape(3, -1) @ fitted.weights.reshape(-1) + 0.9 * knockout + 0.01)
    back.check_model(lm, "map.json")


def test_map_of_another_model_is_refused(lm, tmp_path):
    path = small_map(lm).save(tmp_path / "map.json")
    other = tiny_language_model(seed=1)
    with pytest.raises(AscpError, match=r"fitted on model 'tiny', not on 'tiny-random-1'"):
        map_for(other, str(path), "attention")
    # The fingerprint names files by path and time; the parameters' digest still recognises the model.
    moved = small_map(lm, fingerprint="elsewhere").save(tmp_path / "moved.json")
    assert map_for(lm, str(moved), "attention").fingerprint == "elsewhere"
    with pytest.raises(AscpError, match="no attention map ships for model 'tiny-random-1'"):
        map_for(other, None, "gated")


def test_damaged_or_foreign_map_files_are_one_sentence(lm, tmp_path):
    good = json.loads(small_map(lm).save(tmp_path / "map.json").read_text())
    cases = {
        "cut.json": ("{\"format\": ", "is damaged \\(not readable JSON"),
        "edited.json": (json.dumps({**good, "band": 0.5}), "checksum does not match"),
        "old.json": (json.dumps({**good, "version": 1, "feature": "at2-response-rows-v1"}),
                     "version 1 of feature 'at2-response-rows-v1'; this ascp reads version 2"),
        "other.json": (json.dumps({"format": "something"}), "is not an ascp attention map"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_text(content)
        with pytest.raises(AscpError, match=message):
            load_map(tmp_path / name)
    with pytest.raises(AscpError, match="does not exist"):
        load_map(tmp_path / "missing.json")
    with pytest.raises(AscpError, match="2 x 4 .* weights but the model gives 3 x 4"):
        small_map(lm).predict(np.zeros((2, 3, 4)), np.zeros(2))


def test_the_shipped_test_map_is_the_tiny_models():
    fitted = load_map(TINY_MAP)
    assert fitted.weights.shape == (2, 4) and fitted.band >= 0
    assert fitted.fit["dev_positions"] and fitted.fit["train_positions"]


# ----- the gate -------------------------------------------------------------------------------
def brute_force_settled(raw: np.ndarray, verified: np.ndarray, tau: float, band: float) -> np.ndarray:
    """Whether each decision holds at every corner of the box of unverified scores (+-band): the
    decision as a function of one score, the others fixed, changes once, so the corners bound it."""
    import itertools

    free = [i for i in range(len(raw)) if not verified[i]]
    decisions = []
    for signs in itertools.product((-1.0, 1.0), repeat=len(free)):
        corner = raw.copy()
        corner[free] += band * np.asarray(signs)
        decisions.append(used_mask(normalize(corner), tau))
    decisions = np.array(decisions)
    return (decisions == decisions[0]).all(axis=0)


def test_a_settled_decision_holds_at_every_corner_of_the_band():
    rng = np.random.default_rng(4)
    for _ in range(300):
        k = int(rng.integers(2, 7))
        raw = rng.normal(0.05, 0.15, size=k)
        verified = rng.random(k) < 0.3
        tau, band = free_threshold(k), float(rng.choice([0.0, 0.01, 0.05, 0.2]))
        open_ = unsettled(raw, verified, tau, band)
        settled = brute_force_settled(raw, verified, tau, band)
        assert not (~open_ & ~settled).any()  # what the gate leaves alone cannot flip in the band, verified or not
        if band == 0:
            assert not open_.any()


def test_the_gate_leaves_no_decision_open_verified_passages_included():
    """Replayed against the corner check: after the gate, no passage's decision (a verified one's
    included, whose normalised score moves with its unverified neighbours) can flip within the band,
    and with exact scores within the band of the predictions the decisions are the exact ones."""
    rng = np.random.default_rng(11)
    for _ in range(400):
        k = int(rng.integers(3, 8))
        truth = rng.normal(0.05, 0.15, size=k)
        band = float(rng.choice([0.01, 0.05, 0.1]))
        predicted = truth + rng.uniform(-band, band, size=k)  # within the band, as the map's band promises
        for tau in (free_threshold(k), 0.35):
            raw, verified = gate(predicted, tau, band, lambda idx, truth=truth: truth[idx])
            assert brute_force_settled(raw, verified, tau, band).all()
            np.testing.assert_array_equal(used_mask(normalize(raw), tau), used_mask(normalize(truth), tau))


def test_a_verified_passage_unsettled_by_its_neighbours_gets_them_scored():
    # k = 10: the last passage is verified at 1.0; the nine others are predicted 0.75 +- 0.1, each
    # settled as not used, but their sum (5.85 to 7.65) straddles the 6.74 at which the last one's
    # normalised score crosses tau(10): only their exact scores can settle it
    predicted = np.array([0.75] * 9 + [1.0])
    truth = np.array([0.66] * 9 + [1.0])  # exact sum 5.94: the last passage is used
    calls = []

    def exact(indices):
        calls.append(list(indices))
        return truth[indices]

    tau = free_threshold(10)
    assert not unsettled(np.r_[predicted[:9], 1.0], np.arange(10) == 9, tau, 0.1)[:9].any()
    raw, verified = gate(predicted, tau, 0.1, exact)
    assert calls == [[9], list(range(9))] and verified.all()
    np.testing.assert_array_equal(used_mask(normalize(raw), tau), used_mask(normalize(truth), tau))
    assert used_mask(normalize(truth), tau)[9] and not used_mask(normalize(predicted), tau)[9]


def test_gated_equals_loo_on_every_verified_passage(lm, random_item, tmp_path):
    path = str(small_map(lm).save(tmp_path / "map.json"))
    loo = LeaveOneOut()
    for k, seed in ((3, 21), (5, 22), (6, 23)):
        item = random_item(lm, k, seed)
        exact = np.asarray(loo.score(lm, item).values)
        everything = GatedEstimator(weights=path, band=float("inf")).score(lm, item)
        assert isinstance(everything, GatedScores) and everything.extra["verified"] == k
        np.testing.assert_allclose(everything.values, exact, atol=1e-6)
        cut = free_threshold(k)
        np.testing.assert_array_equal(used_mask(normalize(everything.values), cut), used_mask(normalize(exact), cut))
        narrow = GatedEstimator(weights=path, band=0.1).score(lm, item)
        ids = [p.id for p in item.passages]
        verified = [ids.index(pid) for pid in narrow.extra["verified_ids"]]
        assert narrow.extra["verified"] == len(verified)
        np.testing.assert_allclose(np.asarray(narrow.values)[verified], exact[verified], atol=1e-6)
        assert narrow.tokens_processed == narrow.extra["attention_tokens"] + narrow.extra["exact_tokens"]
        if not verified:
            assert narrow.extra["exact_tokens"] == 0


def test_gated_scores_two_passages_exactly_without_the_attention_pass(lm, random_item, tmp_path):
    path = str(small_map(lm).save(tmp_path / "map.json"))
    for k in range(1, EXACT_UP_TO + 1):
        item = random_item(lm, k, 30 + k)
        exact = LeaveOneOut().score(lm, item)
        scored = GatedEstimator(weights=path, band=0.0).score(lm, item)  # a band of 0 would verify the last only
        np.testing.assert_allclose(scored.values, exact.values, atol=1e-6)
        assert scored.extra["verified"] == k and scored.extra["attention_tokens"] == 0
        assert scored.tokens_processed == scored.extra["exact_tokens"] > 0


def test_gated_scores_stored_deletions_exactly_first_and_skips_their_knockouts(random_item, make_item, tmp_path):
    """A context probed before (a fixed context's later rounds): a deletion the prefix store holds
    costs the response's tokens, what its knockout costs, so it is scored exactly before the gate
    reads a prediction; with every deletion stored no attention pass runs and the result is loo's."""
    from ascp.attribution.ablation import Ablations
    from ascp.lm.prefixes import PrefixStore

    model = tiny_language_model(seed=0)
    model.prefixes = PrefixStore(max_bytes=200_000_000)
    path = str(small_map(model).save(tmp_path / "map.json"))
    k = 6
    earlier = random_item(model, k, 41)
    item = make_item(model, earlier.question, earlier.passages, earlier.response_text + " And more of it.")
    naive = np.asarray(LeaveOneOut(reuse_prefix=False).score(model, item).values)
    model.prefixes.clear()
    n = len(item.response_ids)

    Ablations(model, earlier.prompt, earlier.response_ids).score([{1: ""}, {3: ""}])  # stores full, -d0, -d2
    partial = GatedEstimator(weights=path, band=0.0).score(model, item)
    ids = [p.id for p in item.passages]
    assert partial.extra["stored"] == 2
    assert partial.extra["verified_ids"] == [ids[0], ids[2], ids[k - 1]]  # a band of 0 leaves the rest predicted
    np.testing.assert_allclose(np.asarray(partial.values)[[0, 2, k - 1]], naive[[0, 2, k - 1]], atol=1e-6)
    # the stored prompt side: the last prompt token and the response once, then the k - 3 knockouts
    assert partial.extra["attention_tokens"] == n + (k - 3) * n

    GatedEstimator(weights=path, band=float("inf")).score(model, earlier)  # every deletion is stored now
    repeat = GatedEstimator(weights=path, band=0.0).score(model, item)
    assert repeat.extra["stored"] == repeat.extra["verified"] == k and repeat.extra["attention_tokens"] == 0
    np.testing.assert_allclose(repeat.values, naive, atol=1e-6)
    assert repeat.tokens_processed == (k + 1) * n  # each of the k + 1 prompts from the store: loo's warm price

    stateless = GatedEstimator(weights=path, band=0.0, reuse_prefix=False).score(model, item)
    assert stateless.extra["stored"] == 0 and stateless.extra["attention_tokens"] > 0  # naive passes read no store


def test_gated_through_the_api_the_probe_and_the_cli(lm, tmp_path, cli, tiny_model_dir):
    import ascp

    passages = [Passage(id=f"d{i}", title="", text=f"the quick brown fox {i} jumps over the lazy dog")
                for i in range(3)]
    response = "the author was born in 1850."
    loo = ascp.attribute("who wrote it?", passages, response, model=lm, estimator="loo")
    gated = ascp.attribute("who wrote it?", passages, response, model=lm, estimator="gated", band=float("inf"))
    assert gated.estimator == "gated" and gated.unit == "nats/token"
    np.testing.assert_allclose(list(gated.scores.values()), list(loo.scores.values()), atol=1e-6)
    assert gated.used == loo.used
    assert gated.extra["verified"] == 3  # an infinite band verifies every passage, and the result says so
    probe = ascp.Probe(lm, "gated")  # the shipped map of the tiny test model and its band
    assert set(probe.attribute("who wrote it?", passages, response).scores) == {"d0", "d1", "d2"}
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "r1", "question": "who wrote it?", "response": response,
                                    "passages": [{"id": p.id, "text": p.text} for p in passages]}) + "\n")
    out = tmp_path / "out.jsonl"
    result = cli("attribute", "--input", requests, "--out", out, "--model", tiny_model_dir, "--backend", "hf",
                 "--estimator", "gated")
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert record["estimator"] == "gated" and set(record["scores"]) == {"d0", "d1", "d2"}
    assert 0 <= record["verified"] <= 3 and "exact_tokens" in record  # what the gate did, in the record


def test_gated_settles_the_probes_own_threshold(lm, random_item, tmp_path):
    """A fixed threshold reaches the gate: it settles the decisions the reading makes, not tau(k)'s, and
    the record states the threshold; the estimator has no threshold of its own to disagree with."""
    import ascp

    path = str(small_map(lm).save(tmp_path / "map.json"))
    item = random_item(lm, 5, 41)
    for threshold in (None, 0.1, 0.35):
        result = ascp.attribute(item.question, list(item.passages), item.response_text, model=lm,
                                estimator=f"gated(weights={path},band=0.05)", threshold=threshold)
        expected = free_threshold(5) if threshold is None else threshold
        assert result.threshold == pytest.approx(expected) and result.to_json()["threshold"] == pytest.approx(expected)
    with pytest.raises(AscpError, match="unknown option.*threshold"):
        ascp.Probe(lm, "gated", threshold_of_gate=0.3)
    with pytest.raises(AscpError, match="unknown option.*threshold"):
        ascp.ProbeSettings("gated(threshold=0.3)")


# ----- fitting --------------------------------------------------------------------------------
def synthetic_contexts(n: int, seed: int, noise: float = 0.0) -> tuple[list[ReadContext], np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=(2, 3))
    out = []
    for i in range(n):
        k = int(rng.choice([3, 5]))
        features = rng.random((k, 2, 3)) / k
        knockout = rng.normal(scale=0.1, size=k)
        loo = (features.reshape(k, -1) @ weights.reshape(-1) + 0.8 * knockout + 0.02
               + noise * rng.normal(size=k))
        out.append(ReadContext(f"c{i}", i, tuple(f"p{j}" for j in range(k)), features, loo, 5, 50, 0.1, 0.5,
                               54, 300, knockout=knockout))
    return out, weights


def test_fit_recovers_a_linear_map_and_the_band_reaches_its_target(lm):
    train, weights = synthetic_contexts(80, 0)
    fitted_weights, knockout_weight, intercept, _ = fit_weights(train)
    np.testing.assert_allclose(fitted_weights, weights, atol=0.05)
    assert abs(knockout_weight - 0.8) < 0.05 and abs(intercept - 0.02) < 0.02
    noisy, _ = synthetic_contexts(40, 1, noise=0.05)
    fitted = small_map(lm, weights=fitted_weights, knockout_weight=knockout_weight, intercept=intercept)
    band = size_band(fitted, noisy, 0.99)
    reached, verified = agreement(fitted, noisy, band)
    assert reached >= 0.99 and 0 < verified <= 1
    if band > 0:
        assert agreement(fitted, noisy, band - 0.0025)[0] < 0.99  # the smallest band of the grid
    for c in noisy:  # the replayed gate reads exact scores wherever it verifies
        raw, verified_mask = gated_reading(fitted, c, band)
        np.testing.assert_array_equal(raw[verified_mask], c.loo[verified_mask])


def test_contexts_are_drawn_from_widths_the_pool_allows():
    pool = tuple(Passage(id=f"p{j}", title="", text="text") for j in range(10))
    cases = [(i, Case(id=f"c{i}", question="q?", pool=pool[: 2 + i], units=())) for i in range(8)]
    drawn = draw_contexts(cases, 0, (3, 5, 10, 24))
    assert [position for position, _, _ in drawn] == [1, 2, 3, 4, 5, 6, 7]  # pool of 2 allows no width
    for _, case, passages in drawn:
        assert len(passages) in (3, 5, 10) and len(passages) <= len(case.pool)
        assert len({p.id for p in passages}) == len(passages)
    assert draw_contexts(cases, 0, (3, 5, 10, 24)) == drawn  # reproducible


def test_fit_probe_writes_a_map_keyed_by_the_model(cli, tiny_model_dir, tmp_path):
    rng = np.random.default_rng(0)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "author", "born", "in", "1850"]
    data = tmp_path / "cases.jsonl"
    with data.open("w") as handle:
        for i in range(14):
            pool = [{"id": f"p{i}-{j}", "text": " ".join(rng.choice(words, size=8))} for j in range(5)]
            handle.write(json.dumps({"id": f"q{i}", "question": "who wrote it?", "answers": ["1850"],
                                     "pool": pool}) + "\n")
    out = tmp_path / "fit.json"
    result = cli("fit-probe", "--data", data, "--out", out, "--model", tiny_model_dir, "--train-positions", "0-9",
                 "--dev-positions", "10-13", "--widths", "3,5", "--max-new-tokens", "6")
    assert result.exit_code == 0, result.output
    fitted = load_map(out)
    assert fitted.fit["train_positions"] == "0-9" and fitted.fit["dev_positions"] == "10-13"
    assert set(fitted.fit["positions_used"]["dev"]) <= {10, 11, 12, 13}
    assert "spearman_attention" in fitted.fit["dev"] and fitted.band >= 0
    from ascp.api import load_model

    fitted.check_model(load_model(str(tiny_model_dir), backend="hf"), str(out))
    overlap = cli("fit-probe", "--data", data, "--out", out, "--model", tiny_model_dir, "--train-positions", "0-9",
                  "--dev-positions", "5-13")
    assert overlap.exit_code == 2 and "overlap" in overlap.output


def test_fit_readings_resume_and_divide_to_the_uninterrupted_reading(lm, tmp_path):
    from ascp.fitprobe.fit import read_contexts
    from ascp.fitprobe.readings import READINGS_FEATURE, FitReadings
    from ascp.lm.sampling import SamplingConfig

    rng = np.random.default_rng(3)
    words = ["river", "author", "born", "in", "1850", "city", "wrote", "novel", "the", "of"]
    cases = [(i, Case(id=f"c{i}", question="who wrote it?", units=(),
                      pool=tuple(Passage(id=f"c{i}-{j}", title="", text=" ".join(rng.choice(words, size=6)))
                                 for j in range(5)))) for i in range(12)]
    drawn = draw_contexts(cases, 0, (3, 5))
    sampling = SamplingConfig(max_new_tokens=4)
    whole, _ = read_contexts(lm, drawn, sampling, seed=0, batch_size=4)
    identity = {"feature": READINGS_FEATURE, "model": model_digest(lm), "seed": 0}
    path = tmp_path / "readings.jsonl"
    readings = FitReadings(path, identity)
    first = [d for d in drawn if d[0] < 8]  # two runs on ranges aligned to the batch size share one file
    read_contexts(lm, [d for d in drawn if d[0] >= 8], sampling, seed=0, batch_size=4, readings=readings)
    read_contexts(lm, first[:3], sampling, seed=0, batch_size=4, readings=readings)  # cut inside a batch
    with path.open("a") as handle:
        handle.write('{"identity": {"feature"')  # and a line torn by the crash
    resumed, _ = read_contexts(lm, drawn, sampling, seed=0, batch_size=4, readings=readings)
    assert [c.position for c in resumed] == [c.position for c in whole] and whole
    for a, b in zip(resumed, whole, strict=True):
        assert (a.case_id, a.passage_ids, a.response_ids, a.spans) == (b.case_id, b.passage_ids,
                                                                       b.response_ids, b.spans)
        assert len(a.response_ids) == a.response_tokens > 0
        np.testing.assert_allclose(a.features, b.features, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(a.loo, b.loo, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a.knockout, b.knockout, rtol=1e-6, atol=1e-9)
    lines = path.read_text().splitlines()
    assert len(lines) == len(whole)  # each context once; the torn line was cut by the next append
    again, _ = read_contexts(lm, drawn, sampling, seed=0, batch_size=4, readings=readings)
    assert path.read_text().splitlines() == lines and len(again) == len(whole)  # nothing read twice

    # readings made before knockout scores existed (no knockout, no response ids) are completed: the
    # response sampled again, its knockout read, its exact loo kept; the completed line is what counts
    older = tmp_path / "older.jsonl"
    stripped = []
    for line in lines:
        row = json.loads(line)
        row["context"].pop("knockout")
        row["context"].pop("response_ids")
        row["context"]["loo"] = [value + 1.0 for value in row["context"]["loo"]]  # marks the loo as the file's
        stripped.append(json.dumps(row))
    older.write_text("\n".join(stripped) + "\n")
    completed, _ = read_contexts(lm, drawn, sampling, seed=0, batch_size=4, readings=FitReadings(older, identity))
    for a, b in zip(completed, whole, strict=True):
        np.testing.assert_allclose(a.knockout, b.knockout, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(a.loo, b.loo + 1.0, rtol=1e-9, atol=1e-12)  # not read again
        assert a.response_ids == b.response_ids
    assert len(older.read_text().splitlines()) == 2 * len(whole)
    reloaded = FitReadings(older, identity).load()
    assert all(c.knockout is not None for c in reloaded.values()) and len(reloaded) == len(whole)

    with pytest.raises(AscpError, match="seed differ"):
        FitReadings(path, {**identity, "seed": 1}).load()
    lines.insert(1, "not json")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(AscpError, match="line 2"):
        readings.load()
    with pytest.raises(AscpError, match="does not exist"):
        FitReadings(tmp_path / "absent" / "r.jsonl", identity)


def test_gated_in_a_run_and_an_experiment(cli, tiny_model_dir, tmp_path):
    import yaml

    from ascp.experiments.run import run_experiment

    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps({
        "id": f"c{i}", "question": f"when was author {i} born?", "answers": [["1850"]],
        "pool": [{"id": f"d{j}", "title": "T", "text": f"born in {1850 + j} near the river"} for j in range(4)],
    }) + "\n" for i in range(2)))
    out = tmp_path / "run"
    result = cli("run", "--data", data, "--policy", "vanilla", "--k", "3", "--T", "1", "--out", out,
                 "--model", tiny_model_dir, "--backend", "hf", "--max-new-tokens", "3", "--estimator", "gated")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["config"]["estimator"] == "gated"
    spec = {"name": "gated-grid", "tasks": [{"name": "toy", "data": str(data), "format": "jsonl"}],
            "models": [str(tiny_model_dir)], "backend": "hf", "seeds": [0], "embedder": "hashing",
            "grid": {"policy": ["vanilla"], "k": [3], "T": [1], "estimator": ["gated"]},
            "sampling": {"max_new_tokens": 3}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    store = run_experiment(tmp_path / "spec.yaml", tmp_path / "store")
    assert store.done == 2
    units = [json.loads(line) for line in (tmp_path / "store" / "units.jsonl").read_text().splitlines()]
    assert len(units) == 2 and all("gated" in json.dumps(unit["condition"]) for unit in units)
    for unit in units:  # each round records what the gate did: passages verified exactly and tokens fed
        for r in (r for r in unit["rounds"] if r["response_tokens"]):  # an empty response is not probed
            extra = r["probe_extra"]
            assert 1 <= extra["verified"] == len(extra["verified_ids"]) <= 3
            assert set(extra["verified_ids"]) <= set(r["context"]) and r["context"][-1] in extra["verified_ids"]
            assert r["probe_tokens"] == extra["attention_tokens"] + extra["exact_tokens"] > 0


def test_the_embedded_models_map_records_its_splits():
    fitted = load_map(SHIPPED / "smollm2-135m-instruct.json")
    assert fitted.weights.shape == (30, 9)  # SmolLM2-135M: 30 layers x 9 heads
    assert (fitted.fit["train_positions"], fitted.fit["dev_positions"]) == ("0-127", "200-249")
    assert all(0 <= p <= 127 for p in fitted.fit["positions_used"]["train"])
    assert all(200 <= p <= 249 for p in fitted.fit["positions_used"]["dev"])
    assert fitted.fit["dev"]["used_agreement_gated"] >= fitted.fit["target_agreement"]


@pytest.mark.real_model
@pytest.mark.skipif(__import__("ascp.lm.resolve", fromlist=["embedded_gguf"]).embedded_gguf() is None,
                    reason="the embedded model is not installed")
def test_the_shipped_map_is_found_for_the_embedded_model():
    from ascp.api import load_model

    lm = load_model("default", backend="hf")
    assert map_for(lm, None, "gated").digest == load_map(SHIPPED / "smollm2-135m-instruct.json").digest
