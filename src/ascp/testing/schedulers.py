"""The scheduler contract as tests a policy's author runs against their own class.

    from ascp.testing.schedulers import SchedulerContract

    class TestMine(SchedulerContract):
        scheduler_name = "mine"          # a registered name, or a spec such as "mine(alpha=0.3)"

pytest collects the subclass (its name starts with `Test`) and runs every `test_*` method; the
base class itself is not collected. The checks are the ones every built-in policy passes:
`min(k, N)` distinct pool ids per round, determinism under one rng seed, `k >= N` giving the
whole pool, feedback after each round accepted, open-loop policies ignoring history, a canonical
`name`, and declared, validated `params`. Pools are synthetic (clustered random embeddings and a
hash embedder): no model is loaded. Plain `assert`s; nothing here imports pytest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ascp.errors import raised_error
from ascp.params import Param, refused_value
from ascp.schedulers import (
    check_scheduler,
    make_scheduler,
    parse_scheduler,
    pool_view_from_embeddings,
    scheduler_names,
    scheduler_params,
)
from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection
from ascp.types import Case, Passage

_DIM = 16


def hash_embed(texts: Sequence[str]) -> np.ndarray:
    """A deterministic stand-in embedder: one unit vector per text, seeded by the text's hash."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        rows.append(np.random.default_rng(seed).normal(size=_DIM))
    e = np.array(rows)
    return e / np.linalg.norm(e, axis=-1, keepdims=True)


def synthetic_view(n: int, seed: int = 0, clusters: int = 4) -> PoolView:
    """A pool of n passages whose embeddings fall into a few clusters (pool order = rank order)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, _DIM))
    e = centers[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, _DIM))
    e /= np.linalg.norm(e, axis=-1, keepdims=True)
    q = e[: min(3, n)].mean(axis=0)
    case = Case(f"contract-{n}-{seed}", "which one?", tuple(Passage(f"p{i}", f"passage {i}") for i in range(n)), ())
    return pool_view_from_embeddings(case, e, q / np.linalg.norm(q), embed_fn=hash_embed)


def fake_feedback(ids: tuple[str, ...], round: int, n_used: int = 2) -> RoundFeedback:
    """A probe reading in which the first `n_used` passages of the context were used."""
    used = ids[:n_used]
    normalized = {i: (1.0 / len(used) if i in used else 0.0) for i in ids}
    return RoundFeedback(ids, normalized, used, f"response {round}: " + " ".join(used))


class SchedulerContract:
    """Subclass it as `Test...` and set `scheduler_name`; see the module docstring."""

    scheduler_name: str = ""

    # -- helpers ------------------------------------------------------------------------------
    def make(self, view: PoolView, k: int, T: int, seed: int = 0, **options: Any) -> Scheduler:
        assert self.scheduler_name, f"{type(self).__name__}: set scheduler_name to the policy under test"
        return make_scheduler(self.scheduler_name, view, k, T, np.random.default_rng(seed), **options)

    def run(self, scheduler: Scheduler, T: int) -> list[tuple[str, ...]]:
        """T rounds with fake probe feedback after each; the contexts."""
        history: list[RoundFeedback] = []
        contexts = []
        for t in range(1, T + 1):
            selection = scheduler.select(t, tuple(history))
            assert isinstance(selection, Selection), f"select returned a {type(selection).__name__}, not a Selection"
            contexts.append(tuple(selection.ids))
            history.append(fake_feedback(tuple(selection.ids), t))
        return contexts

    # -- the contract -------------------------------------------------------------------------
    def test_is_registered(self) -> None:
        base, _ = parse_scheduler(self.scheduler_name)
        assert base in scheduler_names()
        assert isinstance(self.make(synthetic_view(8), 2, 2), Scheduler)

    def test_k_distinct_pool_ids_every_round(self) -> None:
        for n, k in ((12, 1), (12, 5), (40, 5), (3, 2)):
            view = synthetic_view(n, seed=n + k)
            for t, ids in enumerate(self.run(self.make(view, k, 6), 6), start=1):
                assert len(ids) == min(k, n), f"n={n}, k={k}, round {t}: {len(ids)} ids"
                assert len(set(ids)) == len(ids), f"n={n}, k={k}, round {t}: repeated ids {ids}"
                assert set(ids) <= set(view.ids), f"n={n}, k={k}, round {t}: ids outside the pool {ids}"

    def test_deterministic_under_the_same_seed(self) -> None:
        view = synthetic_view(30, seed=3)
        assert self.run(self.make(view, 5, 5, seed=7), 5) == self.run(self.make(view, 5, 5, seed=7), 5)

    def test_k_at_least_the_pool_size_gives_the_pool(self) -> None:
        view = synthetic_view(6, seed=1)
        for k in (6, 9):
            for ids in self.run(self.make(view, k, 3), 3):
                assert sorted(ids) == sorted(view.ids), f"k={k} >= N=6 must give the whole pool, got {ids}"

    def test_accepts_feedback_after_each_round(self) -> None:
        view = synthetic_view(20, seed=5)
        scheduler = self.make(view, 4, 3)
        history: list[RoundFeedback] = []
        for t in range(1, 4):
            selection = scheduler.select(t, tuple(history))
            assert len(selection.ids) == 4
            assert all(isinstance(o, str) for o in selection.earlier_outputs)
            history.append(fake_feedback(tuple(selection.ids), t))

    def test_open_loop_policies_ignore_history(self) -> None:
        """`reads_feedback = False` must mean it: the loop batches such policies' rounds."""
        view = synthetic_view(25, seed=9)
        with_history = self.run(self.make(view, 4, 5), 5)
        scheduler = self.make(view, 4, 5)
        without = [tuple(scheduler.select(t, ()).ids) for t in range(1, 6)]
        assert scheduler.reads_feedback or without == with_history

    def test_name_is_canonical(self) -> None:
        canonical = check_scheduler(self.scheduler_name)
        assert self.make(synthetic_view(8), 2, 2).name == canonical
        assert check_scheduler(canonical) == canonical

    def test_params_are_declared_and_validated(self) -> None:
        base, _ = parse_scheduler(self.scheduler_name)
        scheduler = self.make(synthetic_view(8), 2, 2)
        params = type(scheduler).params
        assert isinstance(params, tuple) and all(isinstance(p, Param) for p in params)
        assert len({p.name for p in params}) == len(params), "parameter names must be unique"
        assert [p.name for p in scheduler_params(base)] == [p.name for p in params]
        for p in scheduler_params(base):
            assert p.type in (int, float, bool, str), f"{p.name}: type must be int, float, bool or str"
            assert p.help, f"{p.name}: give it a help text (ascp policies prints it)"
            assert p.coerce(base, p.default) == p.default, f"{p.name}: its default is not a valid value"
            self.make(synthetic_view(8), 2, 2, **{p.name: p.default})  # every option at its default builds
            wrong: dict[str, Any] = {p.name: refused_value(p)}
            error = raised_error(self.make, synthetic_view(8), 2, 2, **wrong)
            assert error is not None and p.name in str(error), f"{p.name}={refused_value(p)!r} was accepted"
        error = raised_error(self.make, synthetic_view(8), 2, 2, no_such_option=1)
        assert error is not None and "unknown option" in str(error)


__all__ = ["SchedulerContract", "fake_feedback", "hash_embed", "synthetic_view"]
