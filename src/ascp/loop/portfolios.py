"""The closed portfolio loop: schedule -> generate -> probe -> feed back, for T rounds.

For every case and round t = 1..T: the scheduler picks a context of k passages, the model
samples one response (seed derived from the run seed, the case id and t, so every policy sees
the same random stream for the same case and round: common random numbers for paired
contrasts), the estimator scores the fixed response against that context, and the reading is
fed back. The probe runs for every policy so ECR is comparable across policies.

Batching: policies that read no feedback have rounds that do not depend on each other, so all
(case, round) generations go out in one batched call; feedback policies batch across cases
round by round.

Steering (`LoopConfig.steer`, Sec. 6.3): round t >= 2 of a case whose over-used set O_t (every
passage the probe flagged `used` in rounds 1..t-1) is not empty is decoded with Eq. 5 + APC
(`ascp.lm.steering`); other rounds decode ordinarily. O depends on earlier probe readings, so a
steered run goes round by round even for open-loop policies, unless the steering is the
identity (alpha = 0, eta = 0), which changes no round and keeps ordinary batching, so such a run
reproduces the unsteered run exactly. Each round records `steered` and `overused` = |O_t|.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ascp.attribution.base import Estimator, ProbeInput
from ascp.attribution.probe import ProbeReading, ProbeSettings, probe_response
from ascp.attribution.spans import read_sentences
from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prefixes import fresh_prefixes
from ascp.lm.prompts import PromptTemplate
from ascp.lm.protocol import LanguageModel
from ascp.lm.sampling import SamplingConfig, derive_seed
from ascp.lm.steering import SteerConfig, SteerStreams, generate_steered, overused_set, steer_prompts
from ascp.params import is_whole
from ascp.schedulers import check_scheduler, make_scheduler
from ascp.schedulers.base import RoundFeedback, Scheduler, Selection
from ascp.schedulers.facets import build_pool_view
from ascp.types import Case, Portfolio, Round

MAX_ROUNDS = 10_000
"""The most rounds per case a run accepts: open-loop policies plan every round before the first
generation, so an absurd T would fill memory before any work; the paper's T is 5."""


@dataclass(frozen=True)
class LoopConfig:
    """One policy's run: the scheduler spec, k, T, the probe's settings, generation and steering.
    Building it checks every field (one `AscpError` sentence), so the edges build it first."""

    policy: str
    k: int
    T: int
    probe: ProbeSettings = field(default_factory=ProbeSettings)  # estimator, its options, used threshold
    seed: int = 0
    sampling: SamplingConfig = SamplingConfig()
    template: PromptTemplate = PromptTemplate()
    batch_size: int = 8
    scheduler_options: dict = field(default_factory=dict)
    steer: SteerConfig | None = None  # None: ordinary decoding in every round

    def __post_init__(self) -> None:
        if not (is_whole(self.k) and is_whole(self.T)) or self.k < 1 or self.T < 1:
            raise AscpError(f"k and T must be whole numbers of at least 1 (got k={self.k!r}, T={self.T!r}).")
        if self.T > MAX_ROUNDS:
            raise AscpError(f"T={self.T} rounds per case is more than ascp runs (at most {MAX_ROUNDS}); give a "
                            "smaller T.")
        check_scheduler(self.policy)  # the name and its options, before any model loads
        if self.probe.sources != "passages":
            raise AscpError(f"the closed loop schedules passages, so its probe reads passages; sources "
                            f"{self.probe.sources!r} applies to ascp attribute and ascp cite only.")


def check_pools(cases: Sequence[Case], k: int, where: str = "") -> None:
    """Refuse, in one sentence, a case whose pool holds fewer than k passages. The edges call it once,
    where cases meet k, before any model loads (`ascp run`, `ascp.run_portfolios`, an experiment's plan);
    `where` prefixes the sentence ("task asqa, condition ...: ")."""
    for case in cases:
        if len(case.pool) < k:
            raise AscpError(f"{where}case {case.id!r}: its pool has {len(case.pool)} passages, fewer than k={k}; "
                            "lower k or drop the case.")


@dataclass
class _Job:
    case: Case
    round: int
    selection: Selection
    overused: tuple[str, ...] = ()  # O of this round when it is decoded steered, else empty


def run_loop(
    lm: LanguageModel,
    cases: Sequence[Case],
    config: LoopConfig,
    embed_fn: Callable[[Sequence[str]], np.ndarray],
    progress: Callable[[int], None] | None = None,
    estimator: Estimator | None = None,
) -> list[Portfolio]:
    """Run T rounds of `config.policy` on every case; `progress(n)` is called per finished round.
    The cases' pools were checked where they met k (`check_pools`). The estimator is `config.probe`'s,
    a seeded one drawing a stream of its own per case and round (`ProbeSettings.estimator_for`),
    unless `estimator` gives an instance of one's own."""
    fresh_prefixes(lm)  # prompts are shared within this run, which computes the same whatever ran before
    schedulers: dict[str, Scheduler] = {}
    for case in cases:
        view = build_pool_view(case, embed_fn)
        rng = np.random.default_rng(derive_seed(config.seed, case.id, "scheduler"))
        options = dict(config.scheduler_options)
        schedulers[case.id] = make_scheduler(config.policy, view, config.k, config.T, rng, **options)
    history: dict[str, list[RoundFeedback]] = {c.id: [] for c in cases}
    rounds: dict[str, list[Round]] = {c.id: [] for c in cases}
    steering = config.steer is not None and not config.steer.is_identity
    open_loop = not steering and not any(s.reads_feedback for s in schedulers.values())
    stages = [list(range(1, config.T + 1))] if open_loop else [[t] for t in range(1, config.T + 1)]
    for stage in stages:
        jobs = [
            _Job(case, t, schedulers[case.id].select(t, tuple(history[case.id])),
                 overused_set(h.used for h in history[case.id]) if steering else ())
            for t in stage for case in cases
        ]
        for job, rnd in zip(jobs, _run_jobs(lm, jobs, config, estimator, progress), strict=True):
            rounds[job.case.id].append(rnd)
            history[job.case.id].append(RoundFeedback(rnd.context, rnd.normalized, rnd.used, rnd.response))
    portfolios = []
    for case in cases:
        ordered = sorted(rounds[case.id], key=lambda r: r.round)
        if config.steer is not None:  # O_t from rounds 1..t-1: the set the decoder steered with
            marked = []
            for t, r in enumerate(ordered):
                overused = overused_set(e.used for e in ordered[:t])
                marked.append(replace(r, steered=bool(overused), overused=len(overused)))
            ordered = marked
        portfolios.append(Portfolio(case.id, config.policy, tuple(ordered)))
    return portfolios


def _run_jobs(lm: LanguageModel, jobs: list[_Job], config: LoopConfig, estimator: Estimator | None,
              progress) -> list[Round]:
    prompts: list[EncodedPrompt] = []
    items: list[EncodedPrompt | SteerStreams] = []
    for job in jobs:
        passages = [job.case.passage(pid) for pid in job.selection.ids]
        what = f"case {job.case.id!r} round {job.round}"
        item: EncodedPrompt | SteerStreams
        if job.overused:
            item = steer_prompts(lm, job.case.question, passages, [job.case.passage(pid) for pid in job.overused],
                                 config.template, job.selection.earlier_outputs)
            contrast = config.steer is not None and config.steer.runs_contrast
            streams = (item.full, item.without, item.only) if contrast else (item.full,)
            for name, p in zip(("", " (C without O)", " (O only)"), streams, strict=False):
                lm.check_fits(what + name, p.num_tokens, config.sampling.max_new_tokens)
            prompt = item.full
        else:
            item = prompt = lm.encode_prompt(job.case.question, passages, config.template,
                                             job.selection.earlier_outputs)
            lm.check_fits(what, prompt.num_tokens, config.sampling.max_new_tokens)
        prompts.append(prompt)
        items.append(item)
    start = time.perf_counter()
    seeds = [derive_seed(config.seed, job.case.id, job.round) for job in jobs]
    gens = generate_steered(lm, items, config.sampling, seeds, config.steer or SteerConfig(), config.batch_size)
    gen_share = (time.perf_counter() - start) / max(1, len(jobs))  # batched: each round gets an equal share
    def probe(i: int) -> tuple[int, ProbeReading, float]:
        job, prompt, gen = jobs[i], prompts[i], gens[i]
        t0 = time.perf_counter()
        response_ids = tuple(lm.encode(gen.text))  # canonical: tokenizer(text) of the response it reports
        context = tuple(job.case.passage(pid) for pid in job.selection.ids)
        item = ProbeInput(job.case.question, context, prompt, gen.text, response_ids)
        own = estimator or config.probe.estimator_for(config.seed, f"{job.case.id}|round{job.round}")
        result = probe_response(lm, own, item, config.probe.threshold)
        return len(response_ids), result, time.perf_counter() - t0

    # A served model (`ascp.lm.engine`) batches concurrent requests itself: keep several cases'
    # probes in flight; in-process backends score one at a time.
    in_flight = lm.in_flight
    if in_flight > 1 and len(jobs) > 1:
        from concurrent.futures import ThreadPoolExecutor

        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(in_flight, len(jobs))) as pool:
            probed = list(pool.map(probe, range(len(jobs))))
        share = (time.perf_counter() - t0) / len(jobs)  # overlapped: each round gets an equal share
        probed = [(n, reading, share) for n, reading, _ in probed]
    else:
        probed = [probe(i) for i in range(len(jobs))]
    out = []
    for job, prompt, gen, (response_tokens, probe_reading, probe_seconds) in zip(jobs, prompts, gens, probed,
                                                                              strict=True):
        reading = probe_reading.reading
        spans = (read_sentences(list(job.selection.ids), probe_reading, gen.text, reading.threshold,
                                f"case {job.case.id!r} round {job.round}", getattr(lm, "name", "?"))
                 if config.probe.spans == "sentences" and gen.text.strip() else ())  # an empty response: none
        out.append(Round(
            round=job.round,
            context=tuple(job.selection.ids),
            response=gen.text,
            response_tokens=response_tokens,
            reading=reading,
            seconds=gen_share + probe_seconds,
            prompt_tokens=prompt.num_tokens,
            generation_seconds=gen_share,
            probe_tokens=probe_reading.tokens_processed,
            probe_extra=probe_reading.extra,
            spans=spans,
        ))
        if progress:
            progress(1)
    return out
