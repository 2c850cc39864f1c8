"""Relevance density (paper Table 3 / Table 8): how answer evidence is spread down a ranked pool.

Over the cases of one task, with pools in rank order (`Passage.rank`), cut at `max_rank` (N=30)
and A[i, u] = "the passage at rank i attests gold unit u" (`ascp.metrics.attestation`):

- rho(i) = (# cases whose rank-i passage attests some unit) / (# cases with a rank-i passage);
- rho(band) for bands 1-5, 6-10, 11-N: the same ratio pooled over every (case, rank) pair in the
  band (equal to the mean of rho(i) over the band when every pool reaches N);
- head-5 share (any) = (# answer-attesting passages at ranks 1-5) / (# answer-attesting passages
  at ranks 1-N), pooled over cases (ratio of sums), so it equals sum_{i<=5} rho(i) s(i) /
  sum_{i<=N} rho(i) s(i) with s(i) the support of rank i (Table 3's "any" column is consistent
  with this: 5 x 0.469 / 0.290 ~ sum of rho for ASQA);
- head-5 share (new): new answer mass n(i) = # units the rank-i passage attests that no passage
  ranked above it attests (so sum_i n(i) = # units attested in the pool); share = sum_{i<=5} n(i) /
  sum_{i<=N} n(i) pooled over cases = the fraction of pool-attested units first attested in the
  top 5 ("counts only answer mass not attested earlier");
- head-5 share (mass), JSON only: the same with all answer mass m(i) = # units the rank-i
  passage attests, repeats included;
- gold units per query (all loaded units) and attested units per query (attested within N);
- slope = least-squares slope of log rho(i) on log i over the ranks with rho(i) > 0.

Which cases count: a case enters rho only if its pool is non-empty and it has at least one
attestable unit (string units that are not bare yes/no, `lexically_attestable`; claim units only
when a matcher is given: `ascp density --nli-model` loads the one NLI matcher of `ascp.metrics.nli`,
the rule `ascp run` recalls claims with); only attestable units enter the attestation matrix. The
others are counted in `skipped` (e.g. gold-only ALCE files, HotpotQA yes/no questions, ELI5
without NLI).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ascp.metrics.answers import Matcher
from ascp.metrics.attestation import attestation_matrix, lexically_attestable
from ascp.types import Case

BANDS = ((1, 5), (6, 10), (11, None))


@dataclass(frozen=True)
class Density:
    """Relevance density of one task (definitions in the module docstring); nan where undefined."""

    task: str
    cases: int  # cases loaded for this task
    used: int  # cases that entered rho
    skipped: int
    max_rank: int
    mean_pool: float  # mean pool depth (within max_rank) of the used cases
    gold_units: float  # mean gold units per loaded case
    attested_units: float  # mean units attested within max_rank, per used case
    rho: tuple[float, ...]  # rho(1..max_rank)
    support: tuple[int, ...]  # cases with a passage at each rank
    bands: dict[str, float]
    head5_any: float
    head5_new: float
    head5_mass: float
    slope: float

    def to_json(self) -> dict[str, object]:
        def clean(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {
            "task": self.task, "cases": self.cases, "used": self.used, "skipped": self.skipped,
            "max_rank": self.max_rank, "mean_pool": clean(self.mean_pool), "gold_units": clean(self.gold_units),
            "attested_units": clean(self.attested_units), "bands": {k: clean(v) for k, v in self.bands.items()},
            "head5_any": clean(self.head5_any), "head5_new": clean(self.head5_new),
            "head5_mass": clean(self.head5_mass), "slope": clean(self.slope),
            "rho": [clean(x) for x in self.rho], "support": list(self.support),
        }


def band_label(lo: int, hi: int | None, max_rank: int) -> str:
    if hi is None:
        return f"{lo}-{max_rank}" if max_rank >= lo else f"{lo}+"
    return f"{lo}-{hi}"


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den else float("nan")


def loglog_slope(rho: Sequence[float]) -> float:
    """Least-squares slope of log rho(i) on log i (i = 1-based rank) over ranks with rho(i) > 0."""
    points = [(math.log(i), math.log(r)) for i, r in enumerate(rho, start=1) if r > 0 and not math.isnan(r)]
    if len(points) < 2:
        return float("nan")
    x, y = np.array(points).T
    return float(np.polyfit(x, y, 1)[0])


def relevance_density(cases: Sequence[Case], max_rank: int = 30, matcher: Matcher | None = None,
                      task: str | None = None) -> Density:
    """Density over `cases` (treated as one task; see `density_by_task` to split by `Case.task`)."""
    if max_rank < 5:
        raise ValueError("max_rank must be at least 5 (head-5 share)")
    hits = np.zeros(max_rank)
    support = np.zeros(max_rank, dtype=int)
    head = np.zeros((3, 2))  # rows: attesting passages, new mass, all mass; columns: top 5, all
    attested, depths = [], []
    for case in cases:
        units = [u for u in case.units if lexically_attestable(u) or (u.claim and not u.aliases and matcher)]
        pool = sorted(case.pool, key=lambda p: p.rank if p.rank is not None else math.inf)[:max_rank]
        if not pool or not units:
            continue
        a = attestation_matrix(pool, units, matcher)  # [rank, unit]
        n = len(pool)
        support[:n] += 1
        hits[:n] += a.any(axis=1)
        depths.append(n)
        mass = a.sum(axis=1)
        first = a.argmax(axis=0)[a.any(axis=0)]  # first attesting rank (0-based) of each attested unit
        attested.append(len(first))
        head += np.array([[np.count_nonzero(mass[:5]), np.count_nonzero(mass)],
                          [np.count_nonzero(first < 5), len(first)],
                          [mass[:5].sum(), mass.sum()]], dtype=float)
    rho = tuple(float(h / s) if s else float("nan") for h, s in zip(hits, support, strict=True))
    bands = {}
    for lo, hi in BANDS:
        top = min(hi or max_rank, max_rank)
        bands[band_label(lo, hi, max_rank)] = _ratio(hits[lo - 1:top].sum(), support[lo - 1:top].sum())
    used = len(depths)
    return Density(
        task=task or (cases[0].task if cases else ""), cases=len(cases), used=used, skipped=len(cases) - used,
        max_rank=max_rank, mean_pool=float(np.mean(depths)) if depths else float("nan"),
        gold_units=float(np.mean([len(c.units) for c in cases])) if cases else float("nan"),
        attested_units=float(np.mean(attested)) if attested else float("nan"),
        rho=rho, support=tuple(int(s) for s in support), bands=bands,
        head5_any=_ratio(*head[0]), head5_new=_ratio(*head[1]), head5_mass=_ratio(*head[2]),
        slope=loglog_slope(rho),
    )


def density_by_task(cases: Sequence[Case], max_rank: int = 30, matcher: Matcher | None = None) -> list[Density]:
    """One `Density` per `Case.task`, in order of first appearance."""
    tasks: dict[str, list[Case]] = {}
    for case in cases:
        tasks.setdefault(case.task, []).append(case)
    return [relevance_density(group, max_rank, matcher, task) for task, group in tasks.items()]
