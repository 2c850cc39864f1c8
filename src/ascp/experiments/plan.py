"""A validated spec plus its loaded cases: the units, their keys, and the work chunks.

A unit is one (task, model, seed, case, condition); its key is `UnitKey`. Work is cut into
chunks of `batch_cases` consecutive cases of one (task, model, seed, condition), always from
the full case list, so a chunk's composition (and hence every batched generation inside it)
does not depend on which units are already done. That is what makes a resumed run reproduce
an uninterrupted one exactly: a chunk that was half written when the run died is run again
whole, and only its missing units are written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ascp.errors import AscpError
from ascp.experiments.condition import Condition
from ascp.experiments.spec import ExperimentSpec, ModelSpec, Settings
from ascp.records.format import UnitKey  # the key of a unit record, beside its format
from ascp.types import Case


@dataclass(frozen=True)
class Chunk:
    """Consecutive cases of one (task, model, seed, condition): the unit of scheduling."""

    task: str
    model: ModelSpec
    seed: int
    condition: Condition
    cases: tuple[Case, ...]
    settings: Settings

    def unit_keys(self) -> list[UnitKey]:
        return [UnitKey(self.task, self.model.name, self.seed, c.id, self.condition.name) for c in self.cases]

    @property
    def rounds(self) -> int:
        return len(self.cases) * self.condition.T


@dataclass(frozen=True)
class Plan:
    spec: ExperimentSpec
    cases: dict[str, tuple[Case, ...]]  # task name -> cases in file order
    orders: dict[str, str] = field(default_factory=dict)  # task name -> pool order used (given | dense | bm25)

    def chunks(self) -> Iterator[Chunk]:
        """All chunks, in execution order: model (loaded once), seed, task, block of cases, condition; so a
        run stopped early holds every condition of the blocks it finished (paired contrasts on them), and
        every task at the first seed before a second seed starts (a second seed is the first thing a
        short budget gives up, a second task the last)."""
        size = self.spec.settings.batch_cases
        for model in self.spec.models:
            for seed in self.spec.seeds:
                for task in self.spec.tasks:
                    cases = self.cases[task.name]
                    for lo in range(0, len(cases), size):
                        for condition in self.spec.conditions:
                            yield Chunk(task.name, model, seed, condition, cases[lo : lo + size], self.spec.settings)

    def unit_keys(self) -> list[UnitKey]:
        return [key for chunk in self.chunks() for key in chunk.unit_keys()]

    @property
    def total(self) -> int:
        n_cases = sum(len(c) for c in self.cases.values())
        return n_cases * len(self.spec.models) * len(self.spec.seeds) * len(self.spec.conditions)

    def manifest(self) -> dict[str, Any]:
        """Everything that determines the records, as canonical JSON (stored as plan.json)."""
        spec = self.spec
        return {
            "name": spec.name,
            "tasks": [{"name": t.name, "data": t.data_record, "format": t.format, "limit": t.limit,
                       "rank_by": t.rank_by, "depth": t.depth,
                       # the order `auto` resolved to (explicit orders name themselves)
                       **({"order": self.orders[t.name]} if t.rank_by == "auto" and t.name in self.orders else {}),
                       **({} if t.min_pool is None else {"min_pool": t.min_pool}),  # absent: older stores resume
                       **({} if t.positions is None else {"positions": t.positions_text}),
                       "cases": [c.id for c in self.cases[t.name]]}
                      for t in spec.tasks],
            "models": [{"name": m.name, "source": _portable_source(m.source)} for m in spec.models],
            "seeds": list(spec.seeds),
            "conditions": [c.name for c in spec.conditions],
            # template/system/nli_model only when set and backend only when not auto, so stores made
            # before they existed still resume (each record names the backend that actually ran)
            "settings": {k: v for k, v in spec.settings.__dict__.items()
                         if (k not in ("template", "system", "nli_model", "spans") or v)
                         and (k != "backend" or v != "auto")
                         and k != "prefix_cache_mb"},  # a memory limit changes no record
            "units": self.total,
            # seeded estimators (ContextCite's masks) draw per case and round (`ProbeSettings.estimator_for`);
            # stated only where a condition has one, so stores of other conditions resume as before
            **({"probe_seeds": "per case and round"} if any(_seeded(c.estimator) for c in spec.conditions) else {}),
        }


def _portable_source(source: str) -> str:
    """A local model file or folder as the plan records it: relative to the current folder, so the plan
    names no folder of this machine (a resume runs from the same folder, as every documented command
    does); engine specs, hub ids and `default` as they are."""
    from pathlib import Path

    from ascp.caching.files import relative_path

    path = Path(source)
    return relative_path(path, Path.cwd()) if path.is_absolute() and path.exists() else source


def _seeded(estimator: str) -> bool:
    from ascp.attribution import estimator_facts

    return estimator_facts(estimator).needs_seed


def make_plan(spec: ExperimentSpec) -> Plan:
    """Load every task's cases and check every condition against them; raises AscpError before any work."""
    from ascp.data import load_cases_with_order
    from ascp.experiments.embedders import resolve_embedder
    from ascp.loop.portfolios import check_pools

    cases: dict[str, tuple[Case, ...]] = {}
    orders: dict[str, str] = {}
    embed_fn = resolve_embedder(spec.settings.embedder)  # dense re-ranking uses the spec's embedder
    for i, task in enumerate(spec.tasks):
        try:
            ordered, orders[task.name] = load_cases_with_order(
                task.data, format=task.format, rank_by=task.rank_by, limit=task.limit, depth=task.depth,
                min_pool=task.min_pool, embed_fn=embed_fn, positions=task.positions)
            loaded = tuple(ordered)
        except AscpError as exc:
            raise AscpError(f"spec field tasks[{i}].data: {exc}") from None
        if not loaded:
            extra = f" with a pool of at least {task.min_pool} passages" if task.min_pool else ""
            at = f" at positions {task.positions_text}" if task.positions else ""
            raise AscpError(f"spec field tasks[{i}].data: {task.data} holds no cases{extra}{at}.")
        ids = [c.id for c in loaded]
        if len(set(ids)) != len(ids):
            raise AscpError(f"spec field tasks[{i}].data: case ids in {task.data} are not unique.")
        for condition in spec.conditions:
            check_pools(loaded, condition.k, f"task {task.name}, condition {condition.name}: ")
        cases[task.name] = loaded
    from ascp.metrics.nli import require_matcher

    for name, loaded in cases.items():  # claim units (ELI5) need a matcher: fail before any model loads
        require_matcher(loaded, spec.settings.nli_model is not None, prefix=f"spec field nli_model: task {name}: ")
    for condition in spec.conditions:
        check_condition(condition, spec.settings)
    return Plan(spec, cases, orders)


def check_condition(condition: Condition, settings: Settings) -> None:
    """Build the loop config, estimator and scheduler once on a dummy pool, so bad options fail now."""
    import numpy as np

    from ascp.experiments.embedders import hashing_embed
    from ascp.schedulers import make_scheduler, pool_view_from_embeddings
    from ascp.types import AnswerUnit, Passage

    n = condition.k + 3
    pool = tuple(Passage(id=f"d{i}", text=f"passage {i} on topic {i % 3}", rank=i + 1) for i in range(n))
    dummy = Case(id="check", question="which topic?", pool=pool, units=(AnswerUnit("u", ("topic",)),))
    vectors = hashing_embed([dummy.question, *(p.text for p in pool)])
    view = pool_view_from_embeddings(dummy, vectors[1:], vectors[0], hashing_embed)
    try:  # the loop config checks the scheduler spec and the probe settings; the scheduler its pool
        loop_config(condition, 0, settings)
        make_scheduler(condition.scheduler, view, condition.k, condition.T, np.random.default_rng(0))
    except AscpError as exc:
        raise AscpError(f"condition {condition.name}: {exc}") from None


def loop_config(condition: Condition, seed: int, settings: Settings):
    """The `LoopConfig` of one condition and seed. A structured single response (`budget` B) decodes up to
    B x the spec's max_new_tokens; the loop checks that prompt plus that many tokens fit the model's window."""
    from dataclasses import replace

    from ascp.attribution.probe import ProbeSettings
    from ascp.lm.prompts import prompt_template
    from ascp.loop.portfolios import LoopConfig

    sampling = settings.sampling()
    if condition.budget is not None:
        sampling = replace(sampling, max_new_tokens=settings.max_new_tokens * condition.budget)
    kwargs: dict[str, Any] = dict(
        policy=condition.scheduler, k=condition.k, T=condition.T,
        probe=ProbeSettings(condition.estimator, threshold=settings.threshold, spans=settings.spans), seed=seed,
        sampling=sampling,
        template=prompt_template(condition.instruction, settings.template, settings.system),
        batch_size=settings.batch_size,
    )
    if condition.steer is not None:
        from ascp.lm.steering import SteerConfig

        kwargs["steer"] = (SteerConfig(alpha=condition.steer) if condition.eta is None  # its default cutoff
                           else SteerConfig(alpha=condition.steer, eta=condition.eta))
    return LoopConfig(**kwargs)
