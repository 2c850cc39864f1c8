"""Experiment records as one tidy pandas row per unit, plus paired contrasts between conditions.

A unit is one (task, model, seed, query, condition). Every contrast in the report is a difference
of a per-unit metric between two conditions, **paired** within (task, model, seed, query), then
estimated by `estimate_difference`: the query bootstrap when the run has one task and one seed,
the crossed seeds x queries bootstrap with equal task weights otherwise (docs/statistics.md).
Models are averaged within (task, seed, query) first (a fixed model set, as in the paper).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ascp.attribution import recorded_facts
from ascp.metrics.portfolio import thresholded_coverage, thresholded_used
from ascp.reading import USED_THRESHOLD
from ascp.stats import Estimate, crossed_bootstrap, paired_bootstrap, seed_means, seed_t_interval
from ascp.types import Round

PAIR_KEYS = ("task", "model", "seed", "query")
CONDITION_FIELDS = ("condition", "policy", "scheduler", "k", "T", "arm", "estimator", "instruction", "steer", "eta")


def on_nats_scale(estimator: Any) -> bool:
    """Whether the estimator recorded as `estimator` declares scores in nats per token (False for a name
    not registered in this process)."""
    facts = recorded_facts(estimator)
    return facts is not None and facts.nats_per_token


def unit_frame(records: Sequence[dict[str, Any]], used_threshold: float | None = None):
    """One row per unit: key, condition fields, every per-case metric and the derived cost columns.

    `ecr_thresholded` and `used_thresholded` (the tables' ECR and used count) are recomputed from
    the stored rounds at `used_threshold` (None: `ascp.validation.calibration.USED_THRESHOLD`), so a report
    states one threshold for every unit, including units of stores written before the metric. They
    are NaN for units probed by an estimator that does not declare `nats_per_token` (the threshold's
    scale: relevance proxies and ContextCite's surrogate weights are not on it).

    Derived columns (from the rounds): `query` (the case id), `tokens` (prompt plus response tokens
    summed over rounds: the cost axis of Fig. 6; NaN for records written before prompt tokens were
    recorded), `latency` (seconds of generation summed over rounds, probe excluded: sequential
    latency; NaN likewise), `words` (whitespace words over all responses of the portfolio) and
    `used_fraction` (mean over rounds of |used_t| / |context_t|: the utilisation statistic q whose
    width elasticity Fig. 4 plots, under the run's live threshold, tau(k) by default) and
    `used_fraction_invariant` (the same at the width-invariant `used_threshold`: Sec. 4.4's criterion).
    """
    import pandas as pd

    rows = []
    for rec in records:
        rounds = [Round.from_json(r) for r in rec.get("rounds", [])]
        row = {k: v for k, v in rec.items() if k not in ("rounds", "pool")}
        row["query"] = rec["case_id"]
        on_scale = on_nats_scale(rec.get("estimator"))
        if rounds:
            row["ecr_thresholded"] = thresholded_coverage(rounds, used_threshold) if on_scale else math.nan
            row["used_thresholded"] = float(len(thresholded_used(rounds, used_threshold))) if on_scale else math.nan
        has_cost = bool(rounds) and all(r.prompt_tokens > 0 for r in rounds)
        row["tokens"] = float(sum(r.prompt_tokens + r.response_tokens for r in rounds)) if has_cost else math.nan
        row["latency"] = float(sum(r.generation_seconds for r in rounds)) if has_cost else math.nan
        row["words"] = float(sum(len(r.response.split()) for r in rounds))
        fractions = [len(r.used) / len(r.context) for r in rounds if r.context]
        row["used_fraction"] = float(np.mean(fractions)) if fractions else math.nan
        invariant = [len(thresholded_used([r], used_threshold)) / len(r.context)
                     for r in rounds if r.context and on_scale]
        row["used_fraction_invariant"] = float(np.mean(invariant)) if invariant else math.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs["used_threshold"] = USED_THRESHOLD if used_threshold is None else float(used_threshold)
    if not frame.empty:
        frame["steer"] = frame["steer"].astype(float)
        frame["eta"] = frame["eta"].astype(float)
    return frame


def conditions(frame):
    """One row per distinct condition with its fields (the condition name is the key)."""
    return frame[list(CONDITION_FIELDS)].drop_duplicates("condition").set_index("condition", drop=False)


def paired(frame, a: str, b: str, metric: str):
    """Rows (task, model, seed, query, a, b, diff) for conditions `a` and `b` of `metric`, inner-joined
    on the pair keys (a unit missing on either side drops its pair)."""
    left = frame.loc[frame["condition"] == a, [*PAIR_KEYS, metric]].rename(columns={metric: "a"})
    right = frame.loc[frame["condition"] == b, [*PAIR_KEYS, metric]].rename(columns={metric: "b"})
    out = left.merge(right, on=list(PAIR_KEYS), how="inner").dropna(subset=["a", "b"])
    out["diff"] = out["a"] - out["b"]
    return out


def paired_sum(frame, plus: Sequence[str], minus: Sequence[str], metric: str):
    """Like `paired`, for a contrast of several conditions: a = the sum of `metric` over `plus`,
    b = the sum over `minus`, diff = a - b, on the units every one of them has (e.g. the
    interaction (full + off) - (apc + contrast))."""
    merged = None
    for i, name in enumerate([*plus, *minus]):
        part = frame.loc[frame["condition"] == name, [*PAIR_KEYS, metric]].rename(columns={metric: f"m{i}"})
        merged = part if merged is None else merged.merge(part, on=list(PAIR_KEYS), how="inner")
    assert merged is not None
    cols = [f"m{i}" for i in range(len(plus) + len(minus))]
    merged = merged.dropna(subset=cols)
    out = merged[list(PAIR_KEYS)].copy()
    out["a"] = merged[cols[: len(plus)]].sum(axis=1)
    out["b"] = merged[cols[len(plus):]].sum(axis=1)
    out["diff"] = out["a"] - out["b"]
    return out


def estimate_difference(pairs, rng: np.random.Generator, n_boot: int = 10_000) -> Estimate | None:
    """Mean paired difference with a 95% bootstrap interval and p, or None with fewer than 2 queries.

    One task and one seed: `paired_bootstrap` by query (models averaged per query). Otherwise
    `crossed_bootstrap` over seeds x within-task queries with equal task weights (cells missing a
    seed are dropped so the design is complete).
    """
    if pairs.empty:
        return None
    cells = pairs.groupby(["task", "seed", "query"], as_index=False)[["a", "b", "diff"]].mean()
    if cells["task"].nunique() == 1 and cells["seed"].nunique() == 1:
        if len(cells) < 2:
            return None
        return paired_bootstrap(cells["a"].to_numpy(), cells["b"].to_numpy(), n_boot, rng=rng)
    n_seeds = cells["seed"].nunique()
    complete = cells.groupby(["task", "query"])["seed"].transform("nunique") == n_seeds
    cells = cells[complete]
    if cells.groupby("task")["query"].nunique().min() < 2:
        return None
    return crossed_bootstrap(cells, n_boot, rng=rng, value="diff")


def seed_t_difference(pairs) -> Estimate | None:
    """Mean paired difference with a t interval over seed means (Table 12), or None with < 2 seeds."""
    if pairs.empty or pairs["seed"].nunique() < 2:
        return None
    _, means = seed_means(pairs, value="diff")
    return seed_t_interval(means)


def task_weighted_mean(frame, condition: str, metric: str) -> float:
    """The equal-task-weight mean of `metric` under `condition` (queries, seeds, models averaged per task)."""
    if metric not in frame.columns:  # a metric older stores did not record
        return math.nan
    rows = frame.loc[frame["condition"] == condition, ["task", metric]].dropna()
    if rows.empty:
        return math.nan
    return float(rows.groupby("task")[metric].mean().mean())
