"""The paper's signed claims, checked against a run: does each reproduce, and how clearly?

A claim is a paired contrast a - b of one metric between two conditions (short names such as
`rotate(k=2,T=12)`, parsed to canonical names) with the paper's value and expected sign. The
verdict compares the run's estimate and 95% interval with the expected sign:

- `reproduced`: the interval excludes 0 on the paper's side;
- `same sign, not significant`: the point estimate has the paper's sign, the interval covers 0;
- `opposite sign`: the point estimate has the other sign (`significant` added when the interval
  excludes 0 on that side);
- for a claim of no difference (sign 0): `consistent` when the interval covers 0, else `differs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ascp.report.frame import estimate_difference, paired, task_weighted_mean
from ascp.report.tables import Table, ecr_note
from ascp.stats import Estimate
from ascp.stats.format import estimate_interval, num, signed


@dataclass(frozen=True)
class Claim:
    text: str  # what the paper says, in a few words
    a: str  # condition short name
    b: str
    metric: str  # a unit column: pr, ecr, groundedness, ...
    paper: str  # the paper's number, with its table
    sign: int  # +1, -1, or 0 for "no difference"


def verdict(est: Estimate | None, sign: int) -> str:
    if est is None:
        return "not estimable"
    covers = est.lo <= 0 <= est.hi
    if sign == 0:
        return "consistent" if covers else "differs"
    if est.mean * sign > 0:
        return "same sign, not significant" if covers else "reproduced"
    return "opposite sign" + ("" if covers else ", significant")


def claims_table(frame, claims: tuple[Claim, ...], rng: np.random.Generator, n_boot: int) -> Table | None:
    from dataclasses import replace

    from ascp.experiments.condition import Condition

    names = set(frame["condition"])
    # A run probed with one estimator throughout (`ascp reproduce --estimator`) answers the claims with its cells.
    probes = {Condition.parse(n).estimator for n in names}
    probe = probes.pop() if len(probes) == 1 else None
    rows, data = [], []
    for c in claims:
        first, second = (Condition.parse(x) for x in (c.a, c.b))
        if probe is not None:
            first, second = replace(first, estimator=probe), replace(second, estimator=probe)
        a, b = first.name, second.name
        if a not in names or b not in names:
            continue
        est = estimate_difference(paired(frame, a, b, c.metric), rng, n_boot)
        got = verdict(est, c.sign)
        means = [task_weighted_mean(frame, x, c.metric) for x in (a, b)]
        rows.append([c.text, f"{c.metric}: {c.a} - {c.b}", c.paper, num(means[0]), num(means[1]),
                     signed(est.mean if est else math.nan), estimate_interval(est), got])
        data.append({"claim": c.text, "a": a, "b": b, "metric": c.metric, "paper": c.paper, "sign": c.sign,
                     "mean_a": means[0], "mean_b": means[1], "verdict": got,
                     **({} if est is None else {f"delta_{k}": v for k, v in est.to_dict().items()})})
    if not rows:
        return None
    return Table("claims", "The paper's signs on this run",
                 "Each row is a paired contrast a - b (within task, model, seed and query; bootstrap by query). "
                 "Verdict: reproduced = 95% interval excludes 0 on the paper's side; same sign, not significant = "
                 "point estimate on the paper's side, interval covers 0; opposite sign; for a claim of no "
                 "difference, consistent = interval covers 0."
                 + (f" {ecr_note(frame)}" if any(c.metric == "ecr_thresholded" for c in claims) else ""),
                 ["paper claim", "contrast", "paper", "a", "b", "Δ (this run)", "95% CI", "verdict"], rows, data)
