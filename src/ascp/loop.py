"""The closed portfolio loop: schedule -> generate -> probe -> feed back, for T rounds.

For every case and round t = 1..T: the scheduler picks a context of k passages, the model
samples one response (seed derived from the run seed, the case id and t, so every policy sees
the same random stream for the same case and round: common random numbers for paired
contrasts), the estimator scores the fixed response against that context, and the reading is
fed back. The probe runs for every policy so ECR is comparable across policies.

Batching: policies that read no feedback have rounds that do not depend on each other, so all
(case, round) generations go out in one batched call; feedback policies batch across cases
round by round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ascp.attribution import make_estimator
from ascp.attribution.base import Estimator, ProbeInput, free_threshold, normalize, used_mask
from ascp.errors import AscpError
from ascp.lm.generation import SamplingConfig, derive_seed, generate
from ascp.prompts import PromptTemplate
from ascp.schedulers import make_scheduler
from ascp.schedulers.base import RoundFeedback, Scheduler, Selection
from ascp.schedulers.facets import build_pool_view
from ascp.types import Case, Portfolio, Round


@dataclass(frozen=True)
class LoopConfig:
    policy: str
    k: int
    T: int
    estimator: str = "loo"
    seed: int = 0
    sampling: SamplingConfig = SamplingConfig()
    template: PromptTemplate = PromptTemplate()
    threshold: float | None = None  # None: tau(k) = 0.555 k^-0.633 on normalised scores
    batch_size: int = 8
    scheduler_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.k < 1 or self.T < 1:
            raise AscpError(f"k and T must be at least 1 (got k={self.k}, T={self.T}).")


@dataclass
class _Job:
    case: Case
    round: int
    selection: Selection


def run_portfolios(
    lm,
    cases: Sequence[Case],
    config: LoopConfig,
    embed_fn: Callable[[Sequence[str]], np.ndarray],
    progress: Callable[[int], None] | None = None,
    estimator: Estimator | None = None,
) -> list[Portfolio]:
    """Run T rounds of `config.policy` on every case; `progress(n)` is called per finished round."""
    estimator = estimator or make_estimator(config.estimator)
    schedulers: dict[str, Scheduler] = {}
    for case in cases:
        if len(case.pool) < config.k:
            raise AscpError(f"case {case.id!r}: its pool has {len(case.pool)} passages, fewer than k={config.k}.")
        view = build_pool_view(case, embed_fn)
        rng = np.random.default_rng(derive_seed(config.seed, case.id, "scheduler"))
        options = dict(config.scheduler_options)
        schedulers[case.id] = make_scheduler(config.policy, view, config.k, config.T, rng, **options)
    history: dict[str, list[RoundFeedback]] = {c.id: [] for c in cases}
    rounds: dict[str, list[Round]] = {c.id: [] for c in cases}
    open_loop = not any(s.reads_feedback for s in schedulers.values())
    stages = [list(range(1, config.T + 1))] if open_loop else [[t] for t in range(1, config.T + 1)]
    for stage in stages:
        jobs = [
            _Job(case, t, schedulers[case.id].select(t, tuple(history[case.id])))
            for t in stage for case in cases
        ]
        for job, rnd in zip(jobs, _run_jobs(lm, jobs, config, estimator, progress), strict=True):
            rounds[job.case.id].append(rnd)
            history[job.case.id].append(RoundFeedback(rnd.context, rnd.normalized, rnd.used, rnd.response))
    return [
        Portfolio(case.id, config.policy, tuple(sorted(rounds[case.id], key=lambda r: r.round))) for case in cases
    ]


def _run_jobs(lm, jobs: list[_Job], config: LoopConfig, estimator: Estimator, progress) -> list[Round]:
    prompts = []
    for job in jobs:
        passages = [job.case.passage(pid) for pid in job.selection.ids]
        prompt = lm.encode_prompt(job.case.question, passages, config.template, job.selection.earlier_outputs)
        lm.check_fits(f"case {job.case.id!r} round {job.round}", prompt.num_tokens, config.sampling.max_new_tokens)
        prompts.append(prompt)
    start = time.perf_counter()
    gens = generate(
        lm, [p.ids for p in prompts], config.sampling,
        [derive_seed(config.seed, job.case.id, job.round) for job in jobs], config.batch_size,
    )
    gen_share = (time.perf_counter() - start) / max(1, len(jobs))  # batched: each round gets an equal share
    out = []
    for job, prompt, gen in zip(jobs, prompts, gens, strict=True):
        t0 = time.perf_counter()
        ids = list(job.selection.ids)
        if gen.token_ids:
            passages = tuple(job.case.passage(pid) for pid in ids)
            raw = estimator.score(lm, ProbeInput(job.case.question, passages, prompt, gen.text, gen.token_ids))
        else:  # an empty generation relies on nothing
            raw = np.zeros(len(ids))
        norm = normalize(raw)
        threshold = free_threshold(len(ids)) if config.threshold is None else config.threshold
        used = used_mask(norm, threshold)
        out.append(Round(
            round=job.round,
            context=tuple(ids),
            response=gen.text,
            response_tokens=len(gen.token_ids),
            scores={d: float(s) for d, s in zip(ids, raw, strict=True)},
            normalized={d: float(s) for d, s in zip(ids, norm, strict=True)},
            used=tuple(d for d, u in zip(ids, used, strict=True) if u),
            seconds=gen_share + time.perf_counter() - t0,
        ))
        if progress:
            progress(1)
    return out
