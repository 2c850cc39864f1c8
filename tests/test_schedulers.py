"""Schedulers: the contract every policy meets, exact rotation windows, Eq. (6) and its greedy, feedback.

Pool views are built from synthetic embeddings (no model); the whole file runs in a few seconds.
"""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ascp.errors import AscpError
from ascp.schedulers import (
    SCHEDULER_NAMES,
    RoundFeedback,
    Scheduler,
    ascp_greedy,
    ascp_objective,
    build_pool_view,
    induce_facets,
    make_scheduler,
    parse_scheduler,
    pool_view_from_embeddings,
)
from ascp.schedulers.facets import n_facets_rule, rank_relevance
from ascp.schedulers.feedback import feedback_state
from ascp.schedulers.mmr import mmr_order
from ascp.schedulers.pm2 import pm2_order
from ascp.types import Case, Passage

DIM = 16


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def text_embed(texts) -> np.ndarray:
    """A deterministic stand-in embedder: a unit vector seeded by the text's hash."""
    rows = []
    for t in texts:
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
        rows.append(np.random.default_rng(seed).normal(size=DIM))
    return unit(np.array(rows))


def make_case(n: int, name: str = "c") -> Case:
    return Case(name, "which one?", tuple(Passage(f"p{i}", f"passage {i}") for i in range(n)), ())


def clustered_view(n: int, seed: int = 0, clusters: int = 4, spread: float = 0.35, embed_fn=text_embed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, DIM))
    e = unit(centers[rng.integers(0, clusters, n)] + spread * rng.normal(size=(n, DIM)))
    q = unit(e[: min(3, n)].mean(axis=0))
    return pool_view_from_embeddings(make_case(n, f"c{seed}"), e, q, embed_fn=embed_fn)


def probe_feedback(ids: tuple[str, ...], t: int, n_used: int = 2) -> RoundFeedback:
    """A fake probe reading: the first `n_used` passages of the context are used."""
    used = ids[:n_used]
    normalized = {i: (1.0 / len(used) if i in used else 0.0) for i in ids}
    return RoundFeedback(ids, normalized, used, f"response {t}: " + " ".join(used))


def run(sched: Scheduler, T: int, n_used: int = 2) -> list[tuple[str, ...]]:
    history: list[RoundFeedback] = []
    contexts = []
    for t in range(1, T + 1):
        sel = sched.select(t, tuple(history))
        contexts.append(sel.ids)
        history.append(probe_feedback(sel.ids, t, n_used))
    return contexts


# ----------------------------------------------------------------------------------------------
# The contract every registered scheduler meets
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
class TestSchedulerContract:
    @pytest.mark.parametrize(("n", "k"), [(12, 1), (12, 5), (40, 5), (3, 2)])
    def test_k_distinct_ids_from_the_pool_every_round(self, name: str, n: int, k: int) -> None:
        view = clustered_view(n, seed=n + k)
        sched = make_scheduler(name, view, k, 6, np.random.default_rng(0))
        for ids in run(sched, 6):
            assert len(ids) == min(k, n)
            assert len(set(ids)) == len(ids)
            assert set(ids) <= set(view.ids)

    def test_deterministic_under_a_seed(self, name: str) -> None:
        view = clustered_view(30, seed=3)
        a = run(make_scheduler(name, view, 5, 5, np.random.default_rng(7)), 5)
        b = run(make_scheduler(name, view, 5, 5, np.random.default_rng(7)), 5)
        assert a == b

    @pytest.mark.parametrize("k", [6, 9])
    def test_k_at_least_n_returns_the_pool(self, name: str, k: int) -> None:
        view = clustered_view(6, seed=1)
        for ids in run(make_scheduler(name, view, k, 3, np.random.default_rng(0)), 3):
            assert sorted(ids) == sorted(view.ids)

    def test_empty_history_and_feedback(self, name: str) -> None:
        view = clustered_view(20, seed=5)
        sched = make_scheduler(name, view, 4, 3, np.random.default_rng(0))
        first = sched.select(1, ())
        assert len(first.ids) == 4
        history = (probe_feedback(first.ids, 1),)
        second = sched.select(2, history)
        assert len(second.ids) == 4
        assert all(isinstance(o, str) for o in second.earlier_outputs)

    def test_open_loop_policies_ignore_history(self, name: str) -> None:
        """A policy that does not read feedback gives the same rounds without history (the loop may batch it)."""
        view = clustered_view(25, seed=9)
        with_history = run(make_scheduler(name, view, 4, 5, np.random.default_rng(0)), 5)
        sched = make_scheduler(name, view, 4, 5, np.random.default_rng(0))
        without = [sched.select(t, ()).ids for t in range(1, 6)]
        assert sched.reads_feedback or without == with_history


# ----------------------------------------------------------------------------------------------
# Open-loop policies
# ----------------------------------------------------------------------------------------------


def test_vanilla_is_the_top_k_every_round() -> None:
    view = clustered_view(10)
    assert run(make_scheduler("vanilla", view, 3, 4, np.random.default_rng(0)), 4) == [("p0", "p1", "p2")] * 4
    assert make_scheduler("fixed", view, 3, 4, np.random.default_rng(0)).name == "vanilla"


def test_rotate_exact_disjoint_windows() -> None:
    view = clustered_view(15)
    ids = run(make_scheduler("rotate", view, 5, 3, np.random.default_rng(0)), 3)
    assert ids == [tuple(f"p{i}" for i in range(a, a + 5)) for a in (0, 5, 10)]


def test_rotate_wraps_to_the_head_when_the_pool_runs_out() -> None:
    view = clustered_view(12)
    ids = run(make_scheduler("rotate", view, 5, 4, np.random.default_rng(0)), 4)
    windows = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [0, 1, 2, 10, 11], [3, 4, 5, 6, 7]]
    assert ids == [tuple(f"p{i}" for i in w) for w in windows]
    # the paper's N = 30, k = 24 case: round 2 shows ranks 25..30 and tops up with ranks 1..18
    view = clustered_view(30)
    second = make_scheduler("rotate", view, 24, 2, np.random.default_rng(0)).select(2, ())
    assert set(second.ids) == {f"p{i}" for i in [*range(24, 30), *range(18)]}


@pytest.mark.parametrize("name", ["mmr", "xquad", "pm2", "ascp-nofeedback"])
def test_static_policies_repeat_one_context(name: str) -> None:
    contexts = run(make_scheduler(name, clustered_view(30, seed=2), 5, 5, np.random.default_rng(0)), 5)
    assert len(set(contexts)) == 1


def test_mmr_skips_a_near_duplicate() -> None:
    e = unit(np.array([[1.0, 0.0, 0.0], [1.0, 0.01, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0]]))
    q = unit(np.array([1.0, 0.3, 0.0]))
    assert mmr_order(e @ q, e @ e.T, 2, 0.5) == [1, 2]  # 1 is most relevant; 0 is its duplicate


def test_pm2_allocates_seats_in_proportion() -> None:
    W = np.array([[1.0, 0.0]] * 5 + [[0.0, 1.0]] * 5)
    order = pm2_order(np.ones(10), W, np.array([0.7, 0.3]), 4)
    assert [int(W[d, 1]) for d in order] == [0, 1, 0, 0]


def test_dpp_varies_across_rounds_and_diversifies() -> None:
    view = clustered_view(30, seed=4)
    contexts = run(make_scheduler("dpp", view, 5, 5, np.random.default_rng(0)), 5)
    assert len({i for c in contexts for i in c}) > 5
    first = [view.index[i] for i in contexts[0]]
    assert first[0] == 0  # the best-quality passage opens the greedy MAP


def test_carriage_lists_earlier_outputs_and_slides() -> None:
    view = clustered_view(30, seed=6, embed_fn=None)  # passage-level fallback penalty
    sched = make_scheduler("carriage", view, 5, 3, np.random.default_rng(0))
    history: list[RoundFeedback] = []
    for t in range(1, 4):
        sel = sched.select(t, tuple(history))
        assert sel.earlier_outputs == tuple(fb.response for fb in history)
        if history:
            assert sel.ids != history[-1].context
        history.append(probe_feedback(sel.ids, t))
    narrow = make_scheduler("carriage-narrow", view, 5, 3, np.random.default_rng(0))
    assert (
        narrow.select(1, ()).ids == make_scheduler("carriage", view, 5, 3, np.random.default_rng(0)).select(1, ()).ids
    )
    assert narrow.stride == 0


def test_carriage_with_an_embedder_penalises_earlier_outputs() -> None:
    view = clustered_view(30, seed=6)
    sched = make_scheduler("carriage-narrow", view, 5, 2, np.random.default_rng(0))
    first = sched.select(1, ())
    # a response that sits on the first passage pushes that passage out of a non-sliding window
    echo = {"echo": view.embeddings[view.index[first.ids[0]]]}
    sched = make_scheduler(
        "carriage-narrow",
        view,
        5,
        2,
        np.random.default_rng(0),
        embed_fn=lambda ts: np.array([echo.get(t, text_embed([t])[0]) for t in ts]),
    )
    second = sched.select(2, (RoundFeedback(first.ids, {}, (), "echo"),))
    assert first.ids[0] not in second.ids


# ----------------------------------------------------------------------------------------------
# Facets, relevance and the pool view
# ----------------------------------------------------------------------------------------------


def test_relevance_and_facet_count_rules() -> None:
    r = rank_relevance(30)
    assert r[0] == 1.0 and np.all(np.diff(r) < 0) and np.all(r > 0)
    assert [n_facets_rule(n) for n in (1, 4, 30, 400, 10_000)] == [1, 2, 6, 20, 20]


@pytest.mark.parametrize("n", [1, 2, 7, 30, 120])
def test_facets_are_well_formed(n: int) -> None:
    view = clustered_view(n, seed=n)
    f = view.facets
    assert f is not None
    assert f.W.shape == (n, n_facets_rule(n))
    assert np.all((f.W >= 0) & (f.W <= 1))
    assert np.all(f.W[np.arange(n), f.labels] > 0)  # every passage covers its own facet
    assert np.all((f.W > 0).sum(axis=1) <= f.m_max)
    assert math.isclose(f.pi.sum(), 1.0) and np.all(f.pi >= 0)
    assert f.labels[0] == 0
    again = induce_facets(view.embeddings, view.relevance)
    assert np.array_equal(again.labels, f.labels) and np.allclose(again.W, f.W)


def test_gamma_gates_secondary_memberships() -> None:
    view = clustered_view(40, seed=2, spread=0.8)
    wide = induce_facets(view.embeddings, view.relevance, gamma=0.0, m_max=3)
    single = induce_facets(view.embeddings, view.relevance, gamma=0.0, m_max=1)
    strict = induce_facets(view.embeddings, view.relevance, gamma=1.01, m_max=3)
    assert (wide.W > 0).sum() > (strict.W > 0).sum() == (single.W > 0).sum() == 40


def test_build_pool_view_embeds_once() -> None:
    calls = []

    def embed_fn(texts):
        calls.append(list(texts))
        return text_embed(texts)

    case = Case("c", "who?", (Passage("a", "x", title="T"), Passage("b", "y")), ())
    view = build_pool_view(case, embed_fn)
    assert calls == [["who?", "T: x", "y"]]
    assert view.embed_fn is embed_fn and view.embeddings.shape == (2, DIM)
    assert np.allclose(view.similarity, view.embeddings @ view.embeddings.T)


# ----------------------------------------------------------------------------------------------
# Eq. (6): value, monotonicity, submodularity, greedy
# ----------------------------------------------------------------------------------------------


@st.composite
def instances(draw):
    n = draw(st.integers(1, 6))
    z = draw(st.integers(1, 4))
    unit_floats = st.floats(0.0, 1.0)
    return dict(
        W=draw(arrays(np.float64, (n, z), elements=unit_floats)),
        pi=draw(arrays(np.float64, (z,), elements=unit_floats)),
        r=draw(arrays(np.float64, (n,), elements=unit_floats)),
        u=draw(arrays(np.float64, (n,), elements=st.floats(0.0, 3.0))),
        n=draw(arrays(np.float64, (z,), elements=st.floats(0.0, 3.0))),
        beta=draw(unit_floats),
        beta_doc=draw(unit_floats),
        lam=draw(unit_floats),
        k=draw(st.integers(1, 6)),
    )


def brute_force(C, W, pi, r, u, n, beta, beta_doc, lam, k) -> float:
    """Eq. (6) term by term, with plain Python loops."""
    total = 0.0
    for z in range(W.shape[1]):
        miss = 1.0
        for d in C:
            miss *= 1.0 - beta_doc ** u[d] * W[d, z]
        total += pi[z] * beta ** n[z] * (1.0 - miss)
    return total + lam * sum(r[d] / (k * (1.0 + u[d])) for d in C)


def subsets(n: int):
    for size in range(n + 1):
        yield from itertools.combinations(range(n), size)


def assert_monotone_submodular(F: dict, N: int) -> None:
    """F maps every sorted subset of range(N) to its value: gains are >= 0 and shrink as the set grows."""
    for A in F:
        for B in F:
            if not set(A) <= set(B):
                continue
            for d in set(range(N)) - set(B):
                gain_a = F[tuple(sorted((*A, d)))] - F[A]
                gain_b = F[tuple(sorted((*B, d)))] - F[B]
                assert gain_a >= -1e-12  # monotone
                assert gain_a >= gain_b - 1e-12  # diminishing returns


@settings(max_examples=150, deadline=None)
@given(instances())
def test_objective_equals_brute_force_and_is_zero_on_empty(inst) -> None:
    assert ascp_objective((), **inst) == 0.0
    for C in subsets(inst["W"].shape[0]):
        assert math.isclose(ascp_objective(C, **inst), brute_force(C, **inst), rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=150, deadline=None)
@given(instances())
def test_objective_is_monotone_and_submodular(inst) -> None:
    N = inst["W"].shape[0]
    F = {C: ascp_objective(C, **inst) for C in subsets(N)}
    assert_monotone_submodular(F, N)


@settings(max_examples=150, deadline=None)
@given(instances(), st.integers(0, 2), st.booleans())
def test_greedy_takes_the_best_marginal_gain_each_step(inst, kappa, check_bound) -> None:
    N = inst["W"].shape[0]
    pinned = list(range(min(kappa, N, inst["k"])))
    order = ascp_greedy(
        inst["W"],
        inst["pi"],
        inst["r"],
        inst["u"],
        inst["n"],
        inst["k"],
        inst["beta"],
        inst["beta_doc"],
        inst["lam"],
        pinned=pinned,
    )
    assert order[: len(pinned)] == pinned and len(order) == len(set(order)) == min(inst["k"], N)
    for step in range(len(pinned), len(order)):
        base = order[:step]
        gains = {
            d: ascp_objective([*base, d], **inst) - ascp_objective(base, **inst) for d in range(N) if d not in base
        }
        assert gains[order[step]] >= max(gains.values()) - 1e-9
    if check_bound and not pinned:
        best = max(ascp_objective(C, **inst) for C in itertools.combinations(range(N), len(order)))
        assert ascp_objective(order, **inst) >= (1 - 1 / math.e) * best - 1e-9


def test_modular_ranks_by_singleton_value() -> None:
    W = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    pi, r = np.array([0.7, 0.3]), np.array([1.0, 0.9, 0.5])
    zeros_d, zeros_z = np.zeros(3), np.zeros(2)
    assert ascp_greedy(W, pi, r, zeros_d, zeros_z, 2) == [0, 2]
    assert ascp_greedy(W, pi, r, zeros_d, zeros_z, 2, submodular=False) == [0, 1]


# ----------------------------------------------------------------------------------------------
# Feedback: a used facet gets discounted; the uniform, similarity and none variants
# ----------------------------------------------------------------------------------------------

# Three tight facets along the axes; pool (rank) order a1 b1 a2 c1 b2 a3 c2.
FACET_OF = {"a1": 0, "b1": 1, "a2": 0, "c1": 2, "b2": 1, "a3": 0, "c2": 2}


def facet_view(embed_fn=None):
    rng = np.random.default_rng(0)
    e = unit(np.eye(3)[list(FACET_OF.values())] + 0.01 * rng.normal(size=(7, 3)))
    case = Case("f", "q", tuple(Passage(i, f"text of {i}") for i in FACET_OF), ())
    view = pool_view_from_embeddings(case, e, unit(np.ones(3)), embed_fn=embed_fn, n_facets=3)
    assert view.facets is not None and view.facets.n_facets == 3
    return view


def feedback(context: tuple[str, ...], used: tuple[str, ...], response: str = "r") -> RoundFeedback:
    return RoundFeedback(context, {i: (1.0 / len(used) if i in used else 0.0) for i in context}, used, response)


def test_feedback_discounts_a_used_facet() -> None:
    view = facet_view()
    sched = make_scheduler("ascp", view, 2, 3, np.random.default_rng(0))
    first = sched.select(1, ())
    assert first.ids == ("a1", "b1")
    second = sched.select(2, (feedback(first.ids, ("a1",)),))
    assert "a1" not in second.ids and "b1" in second.ids  # the used passage leaves, the unused one stays
    assert all(FACET_OF[i] != 0 for i in second.ids)  # facet a is discounted: its other passages wait
    assert second.ids != first.ids
    silent = sched.select(2, (feedback(first.ids, ()),))
    assert silent.ids == first.ids  # nothing used: nothing to discount


def test_feedback_state_counts() -> None:
    view = facet_view()
    W = view.facets.W
    ctx = [[0, 1], [1, 3]]
    hist = [feedback(("a1", "b1"), ("a1",)), feedback(("b1", "c1"), ("b1", "c1"))]
    u, n = feedback_state(view, W, ctx, hist, "probe")
    assert u.tolist() == [1, 1, 0, 1, 0, 0, 0]
    assert np.allclose(n, W[0] + W[1] + W[3])
    u, n = feedback_state(view, W, ctx, hist, "uniform")
    assert u.tolist() == [1, 2, 0, 1, 0, 0, 0]
    u, n = feedback_state(view, W, ctx, hist, "none")
    assert not u.any() and not n.any()
    u, _ = feedback_state(view, W, ctx, hist, "probe", signal="mass")
    assert np.allclose(u, [1.0, 0.5, 0, 0.5, 0, 0, 0])


def test_uniform_counts_every_offered_passage_as_used() -> None:
    view = facet_view()
    uniform = make_scheduler("ascp-uniform", view, 2, 3, np.random.default_rng(0))
    probe = make_scheduler("ascp", view, 2, 3, np.random.default_rng(0))
    assert not uniform.reads_feedback
    c1 = probe.select(1, ())
    c2 = probe.select(2, (feedback(c1.ids, c1.ids),))
    c3 = probe.select(3, (feedback(c1.ids, c1.ids), feedback(c2.ids, c2.ids)))
    assert [uniform.select(t, ()).ids for t in (1, 2, 3)] == [c1.ids, c2.ids, c3.ids]
    assert not set(c1.ids) & set(c2.ids)


def test_none_never_changes_the_context() -> None:
    view = facet_view()
    sched = make_scheduler("ascp-nofeedback", view, 2, 3, np.random.default_rng(0))
    first = sched.select(1, ())
    assert sched.select(2, (feedback(first.ids, first.ids),)).ids == first.ids
    assert first.ids == make_scheduler("ascp", view, 2, 3, np.random.default_rng(0)).select(1, ()).ids


def test_similarity_feedback_uses_response_passage_cosine() -> None:
    view = facet_view()
    on_a = {"about a": np.array([1.0, 0.0, 0.0])}
    sched = make_scheduler(
        "ascp-similarity",
        view,
        2,
        3,
        np.random.default_rng(0),
        embed_fn=lambda texts: np.array([on_a[t] for t in texts]),
    )
    probe = make_scheduler("ascp", view, 2, 3, np.random.default_rng(0))
    first = sched.select(1, ())
    assert (
        sched.select(2, (feedback(first.ids, (), "about a"),)).ids
        == probe.select(2, (feedback(first.ids, ("a1",)),)).ids
    )
    with pytest.raises(AscpError, match="embed_fn"):
        make_scheduler("ascp-similarity", facet_view(), 2, 3, np.random.default_rng(0))


def test_pinning_keeps_the_top_ranks() -> None:
    view = facet_view()
    for kappa in (1, 2):
        sched = make_scheduler(f"ascp-pin{kappa}", view, 3, 3, np.random.default_rng(0))
        history: list[RoundFeedback] = []
        for t in range(1, 4):
            sel = sched.select(t, tuple(history))
            assert sel.ids[:kappa] == ("a1", "b1")[:kappa]
            history.append(feedback(sel.ids, sel.ids))


# ----------------------------------------------------------------------------------------------
# Names and options
# ----------------------------------------------------------------------------------------------


def test_unknown_names_and_options_are_one_sentence_errors() -> None:
    view = clustered_view(8)
    with pytest.raises(AscpError) as err:
        make_scheduler("nope", view, 2, 2, np.random.default_rng(0))
    message = str(err.value)
    assert all(name in message for name in SCHEDULER_NAMES) and message.count(".") >= 1
    with pytest.raises(AscpError, match="unknown option"):
        make_scheduler("mmr", view, 2, 2, np.random.default_rng(0), beta=0.1)
    with pytest.raises(AscpError, match="feedback"):
        make_scheduler("ascp(feedback=oracle)", view, 2, 2, np.random.default_rng(0))
    with pytest.raises(AscpError, match="k >= 1"):
        make_scheduler("vanilla", view, 0, 2, np.random.default_rng(0))
    with pytest.raises(AscpError, match="malformed"):
        make_scheduler("ascp(kappa)", view, 2, 2, np.random.default_rng(0))


def test_parenthesised_options_match_registered_variants() -> None:
    assert parse_scheduler("ascp(feedback=uniform, kappa=1, submodular=false)") == (
        "ascp",
        {"feedback": "uniform", "kappa": 1, "submodular": False},
    )
    view = clustered_view(30, seed=8)
    a = run(make_scheduler("ascp(feedback=uniform)", view, 5, 4, np.random.default_rng(0)), 4)
    b = run(make_scheduler("ascp-uniform", view, 5, 4, np.random.default_rng(0)), 4)
    assert a == b
    sched = make_scheduler("ascp(kappa=2)", view, 5, 4, np.random.default_rng(0), embed_fn=text_embed)
    assert sched.name == "ascp(kappa=2)"
    assert make_scheduler("mmr", view, 5, 4, np.random.default_rng(0), embed_fn=text_embed).name == "mmr"


# ----------------------------------------------------------------------------------------------
# ascp-exposure: Eq. (6) with an online exposure discount
# ----------------------------------------------------------------------------------------------


@st.composite
def exposure_instances(draw):
    inst = draw(instances())
    inst["s"] = draw(arrays(np.float64, (inst["W"].shape[0],), elements=st.floats(0.0, 1.0)))
    return inst


def exposure_brute_force(C, W, pi, r, u, n, s, beta, beta_doc, lam, k) -> float:
    """The exposure objective term by term: Eq. (6) with W[d, :] and r(d) scaled by s(d)."""
    total = 0.0
    for z in range(W.shape[1]):
        miss = 1.0
        for d in C:
            miss *= 1.0 - s[d] * beta_doc ** u[d] * W[d, z]
        total += pi[z] * beta ** n[z] * (1.0 - miss)
    return total + lam * sum(s[d] * r[d] / (k * (1.0 + u[d])) for d in C)


@settings(max_examples=150, deadline=None)
@given(exposure_instances())
def test_exposure_objective_equals_brute_force_and_reduces_to_eq6(inst) -> None:
    from ascp.schedulers.ascp_exposure import exposure_objective

    assert exposure_objective((), **inst) == 0.0
    plain = {key: v for key, v in inst.items() if key != "s"}
    ones = np.ones_like(inst["s"])
    for C in subsets(inst["W"].shape[0]):
        assert math.isclose(exposure_objective(C, **inst), exposure_brute_force(C, **inst), rel_tol=1e-9,
                            abs_tol=1e-12)
        assert math.isclose(exposure_objective(C, **{**inst, "s": ones}), ascp_objective(C, **plain), rel_tol=1e-12,
                            abs_tol=1e-12)


@settings(max_examples=150, deadline=None)
@given(exposure_instances())
def test_exposure_objective_is_monotone_and_submodular(inst) -> None:
    from ascp.schedulers.ascp_exposure import exposure_objective

    N = inst["W"].shape[0]
    F = {C: exposure_objective(C, **inst) for C in subsets(N)}
    assert_monotone_submodular(F, N)


@settings(max_examples=150, deadline=None)
@given(exposure_instances(), st.booleans())
def test_exposure_greedy_takes_the_best_marginal_gain_each_step(inst, check_bound) -> None:
    from ascp.schedulers.ascp_exposure import exposure_greedy, exposure_objective

    N = inst["W"].shape[0]
    order = exposure_greedy(inst["W"], inst["pi"], inst["r"], inst["u"], inst["n"], inst["s"], inst["k"],
                            inst["beta"], inst["beta_doc"], inst["lam"])
    assert len(order) == len(set(order)) == min(inst["k"], N)
    for step in range(len(order)):
        base = order[:step]
        gains = {d: exposure_objective([*base, d], **inst) - exposure_objective(base, **inst)
                 for d in range(N) if d not in base}
        assert gains[order[step]] >= max(gains.values()) - 1e-9
    if check_bound:
        best = max(exposure_objective(C, **inst) for C in itertools.combinations(range(N), len(order)))
        assert exposure_objective(order, **inst) >= (1 - 1 / math.e) * best - 1e-9


def test_exposure_state_counts_fresh_offers_and_re_offers() -> None:
    from ascp.schedulers.ascp_exposure import exposure_scale, exposure_state, facet_scale

    # round 1 offers 0, 1, 2 and uses 0; round 2 offers 0 (used before: neither, used again), 1 (ignored
    # before: a re-offer, used now), 3 (fresh, ignored); round 3 offers 2 (ignored once: re-offer, ignored)
    state = exposure_state(5, [[0, 1, 2], [0, 1, 3], [2]], [[0], [0, 1], []])
    assert state.ignored.tolist() == [0, 1, 2, 1, 0]
    assert (state.fresh_shown, state.fresh_used, state.again_shown, state.again_used) == (4, 1, 2, 1)
    p_fresh = 2 / 6
    assert math.isclose(state.rho(prior=0.5, strength=2.0), min(1.0, (1 + 2 * 0.5 * p_fresh) / (4 * p_fresh)))
    assert math.isclose(state.rho(prior=0.0, strength=0.0), 1.0)  # 1 of 2 re-offers used vs 1/3 fresh: capped
    assert exposure_scale(state, 0.5).tolist() == [1.0, 0.5, 0.25, 0.5, 1.0]
    assert exposure_scale(state, 0.0).tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
    W = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.0, 0.2], [1.0, 1.0]])
    m = state.ignored @ W  # facet 0: 1 * 0.5 + 2 * 0 + ... = 0.5; facet 1: 0.5 + 2 * 1 + 0.2 = 2.7
    assert np.allclose(facet_scale(state, W, 0.5), 0.5**m) and np.allclose(m, [0.5, 2.7])
    assert facet_scale(state, W, 1.0).tolist() == [1.0, 1.0]
    empty = exposure_state(3, [], [])
    assert math.isclose(empty.rho(prior=0.3), 0.3)  # no re-offer yet: the prior


def test_exposure_without_discount_is_eq6() -> None:
    """prior = 1 without learning never discounts an ignored passage: exactly ascp on any history."""
    view = clustered_view(30, seed=4)
    for n_used in (0, 1, 2):
        a = run(make_scheduler("ascp-exposure(prior=1,learn=false)", view, 5, 6, np.random.default_rng(0)), 6, n_used)
        b = run(make_scheduler("ascp", view, 5, 6, np.random.default_rng(0)), 6, n_used)
        assert a == b


def selective_run(name: str, view, k: int, T: int, usable: set[str]) -> list[tuple[str, ...]]:
    """Rounds under a consumer that uses exactly the passages in `usable` (the oracle's kind)."""
    sched = make_scheduler(name, view, k, T, np.random.default_rng(0))
    history: list[RoundFeedback] = []
    for t in range(1, T + 1):
        ids = sched.select(t, tuple(history)).ids
        history.append(feedback(ids, tuple(i for i in ids if i in usable)))
    return [fb.context for fb in history]


def test_exposure_leaves_ignored_passages_under_a_selective_consumer() -> None:
    view = clustered_view(40, seed=2)
    usable = {view.ids[0], view.ids[7], view.ids[20]}
    stalled = {i for ctx in selective_run("ascp", view, 5, 5, usable) for i in ctx}
    for prior in (0.5, 1.0):  # prior 1 starts as Eq. (6) and has to learn that ignored passages stay ignored
        name = f"ascp-exposure(prior={prior})"
        moving = selective_run(name, view, 5, 5, usable)
        assert moving[0] == selective_run("ascp", view, 5, 1, usable)[0]  # round 1: Eq. (6)'s context
        assert len({i for ctx in moving for i in ctx}) > len(stalled)
    sched = make_scheduler("ascp-exposure(prior=1)", view, 5, 5, np.random.default_rng(0))
    sched.select(5, tuple(feedback(ctx, tuple(i for i in ctx if i in usable)) for ctx in moving[:4]))
    assert sched.last_rho < 0.5  # its re-offers of ignored passages stayed unused: the ratio fell from 1


def test_exposure_options_are_checked() -> None:
    view = clustered_view(10)
    with pytest.raises(AscpError, match="prior"):
        make_scheduler("ascp-exposure(prior=1.5)", view, 2, 2, np.random.default_rng(0))
    assert make_scheduler("ascp-exposure(prior=0.25)", view, 2, 2, np.random.default_rng(0)).name == \
        "ascp-exposure(prior=0.25)"
