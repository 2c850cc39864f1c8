"""The closed loop with the generator and probe replaced by a model-free consumer (`ascp simulate`).

Each case's pool is embedded once into a `PoolView` (facets, similarities), shared by every
policy; with a persistent `ascp.embed.cache.EmbeddingCache` the vectors also persist across runs,
so after the first run a simulation costs only the schedulers. Per case and round: the scheduler picks the context, the
consumer (`ascp.loop.consumers`) reads it, and its reading is fed back exactly as the probe's is in
`ascp.loop.portfolios`. Rounds are `Round` records with an empty response; per case the metrics that need
no generator: offered, used, ECR (Eq. 2), the evidence ceiling of the offered passages
(`ceiling`) and of the used ones (`used_ceiling`: what an ideal reader of the used passages
could recover).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ascp.embed.cache import EmbeddingCache as EmbeddingCache  # the one cache, at its old import path
from ascp.lm.sampling import derive_seed
from ascp.loop.consumers import Consumer
from ascp.metrics.portfolio import evidence_ceiling, evidence_coverage_rate, offered_count, used_count
from ascp.reading import Reading
from ascp.schedulers import make_scheduler
from ascp.schedulers.base import EmbedFn, PoolView, RoundFeedback
from ascp.schedulers.facets import build_pool_view
from ascp.types import Case, Portfolio, Round

SIMULATION_METRICS = ("offered", "used", "ecr", "ceiling", "used_ceiling")


def pool_views(cases: Sequence[Case], embed_fn: EmbedFn) -> dict[str, PoolView]:
    """One `PoolView` per case (embeddings, facets, similarities), to share across policies."""
    return {case.id: build_pool_view(case, embed_fn) for case in cases}


def simulation_metrics(case: Case, portfolio: Portfolio) -> dict[str, float]:
    """offered, used, ECR, and the evidence ceilings (nan without gold units, or with claim units,
    which need an NLI matcher)."""
    rounds = portfolio.rounds
    offered = [case.passage(d) for d in portfolio.offered]
    used = [case.passage(d) for d in dict.fromkeys(d for r in rounds for d in r.used)]
    lexical = bool(case.units) and all(u.aliases for u in case.units)
    return {
        "offered": float(offered_count(rounds)),
        "used": float(used_count(rounds)),
        "ecr": evidence_coverage_rate(rounds),
        "ceiling": evidence_ceiling(case.units, offered) if lexical else math.nan,
        "used_ceiling": evidence_ceiling(case.units, used) if lexical else math.nan,
    }


def simulate_portfolios(
    cases: Sequence[Case], policy: str, k: int, T: int, consumer: Consumer, views: dict[str, PoolView],
    seed: int = 0, progress: Callable[[int], None] | None = None, **scheduler_options,
) -> list[Portfolio]:
    """T rounds of `policy` per case with `consumer` in place of the generator and the probe.

    A consumer with a `prepare(cases)` method (the `fit` consumer) is given the cases first."""
    prepare = getattr(consumer, "prepare", None)
    if callable(prepare):
        prepare(cases)
    portfolios = []
    for case in cases:
        start = time.perf_counter()
        rng = np.random.default_rng(derive_seed(seed, case.id, "scheduler"))
        scheduler = make_scheduler(policy, views[case.id], k, T, rng, **scheduler_options)
        history: list[RoundFeedback] = []
        rounds = []
        for t in range(1, T + 1):
            context = scheduler.select(t, tuple(history)).ids
            reading = consumer.consume(case, t, context, history)
            consumed = Reading(scores=dict(reading.normalized), normalized=dict(reading.normalized), used=reading.used,
                               threshold=None)  # a consumer's reading: no probe threshold behind it
            rounds.append(Round(round=t, context=tuple(context), response="", response_tokens=0, reading=consumed,
                                seconds=0.0))
            history.append(RoundFeedback(tuple(context), dict(reading.normalized), reading.used, ""))
        seconds = time.perf_counter() - start
        timed = tuple(Round(**{**r.__dict__, "seconds": seconds / T}) for r in rounds)
        portfolio = Portfolio(case.id, scheduler.name, timed)
        portfolios.append(Portfolio(case.id, scheduler.name, timed, simulation_metrics(case, portfolio)))
        if progress:
            progress(1)
    return portfolios


def split_policies(spec: str) -> list[str]:
    """`vanilla,ascp(kappa=1,lam=0.5),rotate` -> the three policy names (commas inside parentheses stay)."""
    out, depth, current = [], 0, ""
    for ch in spec:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    return [p for p in out if p]


def policy_folder(name: str) -> str:
    """A file-name-safe folder for a policy's canonical name."""
    return re.sub(r"[^A-Za-z0-9=._-]+", "_", name).strip("_")


def compare(results: dict[str, list[Portfolio]], n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Per policy the mean of every simulation metric and, against the first policy, the paired
    bootstrap of the per-case difference (95% percentile interval); and App. A.2's independence
    test across the policies (rows: rounds; shown = |C_t|, used = |U_t|)."""
    from ascp.stats import consumption_independence, paired_bootstrap

    names = list(results)
    base = names[0]
    table: dict[str, Any] = {}
    for name in names:
        row: dict[str, Any] = {}
        for metric in SIMULATION_METRICS:
            values = np.array([p.metrics[metric] for p in results[name]], dtype=float)
            row[metric] = float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
            if name != base:
                other = np.array([p.metrics[metric] for p in results[base]], dtype=float)
                keep = np.isfinite(values) & np.isfinite(other)
                if keep.sum() >= 2:
                    est = paired_bootstrap(values[keep], other[keep], n_boot, rng=np.random.default_rng(seed))
                    row[f"{metric}_vs_{base}"] = {"mean": est.mean, "lo": est.lo, "hi": est.hi, "p": est.p}
        table[name] = row
    rounds = [{"policy": name, "shown": len(r.context), "used": len(r.used)}
              for name in names for p in results[name] for r in p.rounds if r.context]
    independence = consumption_independence(
        {k: np.array([row[k] for row in rounds]) for k in ("policy", "shown", "used")}).to_dict() \
        if len(names) > 1 and rounds else None
    return {"baseline": base, "policies": table, "independence": independence}


def write_simulation(out: Path, cases: Sequence[Case], results: dict[str, list[Portfolio]],
                     config: dict[str, Any], comparison: dict[str, Any]) -> None:
    """One run folder per policy (the files of `ascp run`) and `comparison.json`, all or nothing."""
    from ascp.jsonio import staged_folder
    from ascp.loop.runfolder import write_run_files
    from ascp.loop.runner import case_row

    with staged_folder(out, whole=True) as tmp:
        for name, portfolios in results.items():
            folder = tmp / policy_folder(name)
            folder.mkdir()
            rows = [case_row(case, p) for case, p in zip(cases, portfolios, strict=True)]
            write_run_files(folder, portfolios, rows, {**config, "policy": name})
        (tmp / "comparison.json").write_text(json.dumps({"config": config, **comparison}, indent=2) + "\n",
                                             encoding="utf-8")
