"""Calibration of the probe's used threshold and the width elasticity (Sec. 4.4, Fig. 4).

Input: the per-passage score rows (`scores.jsonl`) of `ascp validate-probe` runs on controlled
pools, with the `fixed` protocol (one target per case, held constant across widths) and, for the
free-generation fit, the `free` protocol, for one estimator (default `loo`). Two scales:
raw(d) (Eq. 3, nats per response token for `loo`) and normalised a(d) = [raw(d)]_+ / sum [raw]_+.

- Width-invariant threshold tau* (the paper's "fixed-response threshold"): the `quantile`
  (default 0.95) of **raw(d)** over the off-query padding passages of every fixed-protocol
  context, pooled across widths. Off-query padding was never in the prompt that produced the
  fixed target, so credit given to it is noise: tau* is the off-query 95th-percentile operating
  point of Fig. 3(e), one constant for every width. It lives on the raw scale because normalised
  scores sum to 1 over the context: at a constant tau on a(d) at most 1/tau passages can be used,
  so q <= 1/(k tau) and the width elasticity is pulled to -1 by the normalisation itself (measured
  on the committed ASQA validation run: -1.000 with se 0.000; docs/calibration.md). The same
  quantile of a(d) is reported as `width_invariant_normalised` for that comparison.
- Per-width thresholds tau_p(k): the quantile of a(d) within each width, per protocol.
- Free-generation fit: log tau_free(k) = log a + b log k, OLS over the widths of the free
  protocol's per-width thresholds (the paper: a = 0.555, b = -0.633).
- Utilisation q of a context under a criterion: the share of its passages counted as used.
  Criteria (Fig. 4(a)): `width-invariant` (raw >= tau*), the normalised width-invariant
  comparison (a >= tau*_a), `per-width` (a >= tau_fixed(k), shrinks with k), `paper tau_free(k)`
  (a >= 0.555 k^-0.633), `threshold-free` (a > 0); plus the free protocol read with tau_free(k)
  and with tau*. Elasticity: OLS slope of log q on log k, cluster-robust by case
  (`ascp.stats.width_elasticity`; contexts with q = 0 are dropped and counted).
- Redundancy strata (Fig. 4(b)): each case's natural pool is split at the median of a
  redundancy measure (answer attestation: the share of pool passages attesting a gold unit;
  embedding: the mean over passages of the largest cosine to another passage of the pool), and
  the width-invariant elasticity is fitted within each half. The paper's third measure,
  pairwise entailment (the share of ordered passage pairs where one entails the other), is
  computed when an NLI model is given (`ascp calibrate --nli-model`).

Intervals: percentile bootstrap over cases (a case's contexts resampled together; every
threshold re-estimated in every replicate).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ascp.reading import (  # noqa: F401  (re-exported: the calibration's constants)
    PAPER_FREE_EXPONENT,
    PAPER_FREE_SCALE,
    USED_THRESHOLD,
    free_threshold,
    resolve_used_threshold,
)
from ascp.stats.bootstrap import cluster_replicates, percentile_interval
from ascp.validation.analysis import Context

PAPER_ELASTICITY = -0.68
QUANTILE = 0.95


SCALES = ("raw", "normalized")


def values(ctx: Context, scale: str) -> np.ndarray:
    """The context's scores on `scale`: raw(d) or normalised a(d)."""
    return ctx.scores if scale == "raw" else ctx.normalized


def padding_scores(contexts: Sequence[Context], scale: str = "raw") -> np.ndarray:
    """The `scale` scores of every padding passage of `contexts` (one flat array)."""
    parts = [values(c, scale)[[r == "padding" for r in c.roles]] for c in contexts]
    return np.concatenate(parts) if parts else np.zeros(0)


def _quantile(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if values.size else math.nan


def select(contexts: Sequence[Context], *, protocol: str | None = None, padding: str | None = None,
           estimator: str | None = None) -> list[Context]:
    return [c for c in contexts if (protocol is None or c.protocol == protocol)
            and (padding is None or c.padding == padding) and (estimator is None or c.estimator == estimator)]


def width_invariant_threshold(contexts: Sequence[Context], quantile: float = QUANTILE, scale: str = "raw") -> float:
    """tau*: the quantile of the `scale` scores over off-query padding of fixed-protocol contexts, all
    widths pooled."""
    return _quantile(padding_scores(select(contexts, protocol="fixed", padding="off-query"), scale), quantile)


def per_width_thresholds(contexts: Sequence[Context], protocol: str, quantile: float = QUANTILE) -> dict[int, float]:
    """tau_protocol(k): the quantile of a(d) over off-query padding at each width."""
    by: dict[int, list[Context]] = defaultdict(list)
    for c in select(contexts, protocol=protocol, padding="off-query"):
        by[c.width].append(c)
    return {k: _quantile(padding_scores(cs, "normalized"), quantile) for k, cs in sorted(by.items())}


def fit_power_law(thresholds: dict[int, float]) -> tuple[float, float]:
    """(a, b) of tau(k) = a k^b by OLS of log tau on log k; nan unless >= 2 widths with tau > 0."""
    pts = [(k, t) for k, t in thresholds.items() if math.isfinite(t) and t > 0]
    if len({k for k, _ in pts}) < 2:
        return math.nan, math.nan
    x = np.log([k for k, _ in pts])
    y = np.log([t for _, t in pts])
    b, log_a = np.polyfit(x, y, 1)
    return float(math.exp(log_a)), float(b)


Criterion = Callable[[int], float]  # width -> threshold; a passage counts when its score >= it and > 0


def utilisation(ctx: Context, threshold: float, scale: str = "normalized") -> float:
    """q: the share of the context's passages whose positive `scale` score reaches `threshold`."""
    a = values(ctx, scale)
    return float(np.mean((a > 0) & (a >= threshold - 1e-12)))


def utilisation_rows(contexts: Sequence[Context], criterion: Criterion, scale: str = "normalized"
                     ) -> list[dict[str, Any]]:
    """One row (query = case, k, used_fraction = q) per context, for `width_elasticity`."""
    return [{"query": c.case_id, "k": c.width, "used_fraction": utilisation(c, criterion(c.width), scale)}
            for c in contexts]


@dataclass(frozen=True)
class Elasticity:
    label: str
    mean: float
    se: float
    lo: float
    hi: float
    n: int  # contexts fitted (q > 0)
    dropped: int  # contexts with q = 0
    clusters: int
    mean_used: float  # passages counted as used per context, on average

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def elasticity(label: str, contexts: Sequence[Context], criterion: Criterion, scale: str = "normalized"
               ) -> Elasticity:
    """Width elasticity of q under `criterion` on `scale`, cluster-robust by case (nan when it cannot be
    fitted)."""
    from ascp.stats import width_elasticity

    rows = utilisation_rows(contexts, criterion, scale)
    dropped = sum(r["used_fraction"] == 0 for r in rows)
    cases = len({r["query"] for r in rows})
    table = {key: [r[key] for r in rows] for key in ("query", "k", "used_fraction")}
    mean_used = float(np.mean([r["used_fraction"] * r["k"] for r in rows])) if rows else math.nan
    try:
        est = width_elasticity(table, cluster="query")
    except ValueError:
        return Elasticity(label, math.nan, math.nan, math.nan, math.nan, len(rows) - dropped, dropped, cases,
                          mean_used)
    return Elasticity(label, est.mean, est.se, est.lo, est.hi, est.n, dropped, cases, mean_used)


# ----- bootstrap over cases ----------------------------------------------------------------------


def _by_case(contexts: Sequence[Context]) -> dict[str, list[Context]]:
    out: dict[str, list[Context]] = defaultdict(list)
    for c in contexts:
        out[c.case_id].append(c)
    return dict(out)


def _thresholds(contexts: Sequence[Context], quantile: float) -> dict[str, Any]:
    fixed = per_width_thresholds(contexts, "fixed", quantile)
    free = per_width_thresholds(contexts, "free", quantile)
    a, b = fit_power_law(free)
    return {"width_invariant": width_invariant_threshold(contexts, quantile),
            "width_invariant_normalized": width_invariant_threshold(contexts, quantile, "normalized"),
            "fixed": fixed, "free": free, "free_fit": (a, b)}


def bootstrap_thresholds(contexts: Sequence[Context], quantile: float = QUANTILE, n_boot: int = 2000,
                         seed: int = 0) -> list[dict[str, Any]]:
    """`_thresholds` of `n_boot` case-resampled replicates (a drawn case's contexts come whole)."""
    by = _by_case(contexts)
    names = sorted(by)
    return cluster_replicates(lambda drawn: _thresholds([c for i in drawn for c in by[names[i]]], quantile),
                              len(names), n_boot, rng=np.random.default_rng(seed))


# ----- the whole calibration ---------------------------------------------------------------------


Entails = Callable[[Sequence[tuple[str, str]]], list[bool]]  # (premise, hypothesis) pairs -> decisions


def redundancy(cases: Sequence[Any], embed: Callable[[list[str]], np.ndarray] | None,
               entails: Entails | None = None) -> dict[str, dict[str, float]]:
    """Per case id, the natural-pool redundancy measures of Fig. 4(b) (see the module docstring);
    `entails` (an NLI matcher's `entails`, `ascp.metrics.nli`) adds `entailment`: the share of ordered
    passage pairs (d, e), d != e, where d entails e."""
    from ascp.validation.pools import attested_units

    out: dict[str, dict[str, float]] = {}
    for case in cases:
        pool = list(case.pool)
        if not pool:
            continue
        row = {"attestation": float(np.mean([bool(attested_units(p, case.units)) for p in pool]))}
        if entails is not None and len(pool) > 1:
            texts = [p.full_text for p in pool]
            pairs = [(a, b) for i, a in enumerate(texts) for j, b in enumerate(texts) if i != j]
            row["entailment"] = float(np.mean(entails(pairs)))
        if embed is not None and len(pool) > 1:
            e = np.asarray(embed([p.full_text for p in pool]), dtype=float)
            e = e / np.linalg.norm(e, axis=1, keepdims=True)
            sim = e @ e.T
            np.fill_diagonal(sim, -np.inf)
            row["embedding"] = float(np.mean(sim.max(axis=1)))
        out[case.id] = row
    return out


def calibrate(contexts: Sequence[Context], quantile: float = QUANTILE, n_boot: int = 2000, seed: int = 0,
              strata: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Every calibration number of one estimator's contexts (see the module docstring for each)."""
    if not 0.5 <= quantile < 1.0:
        raise ValueError(f"quantile must lie in [0.5, 1), got {quantile}")
    point = _thresholds(contexts, quantile)
    boot = bootstrap_thresholds(contexts, quantile, n_boot, seed)
    tau_star = point["width_invariant"]
    a, b = point["free_fit"]
    out: dict[str, Any] = {
        "quantile": quantile,
        "cases": len({c.case_id for c in contexts}),
        "widths": sorted({c.width for c in contexts}),
        "protocols": sorted({c.protocol for c in contexts}),
        "width_invariant_threshold": {"value": tau_star, "interval": percentile_interval(
            [r["width_invariant"] for r in boot]),
            "n_passages": int(padding_scores(select(contexts, protocol="fixed", padding="off-query")).size),
            "scale": "raw"},
        "width_invariant_normalized": {"value": point["width_invariant_normalized"], "interval": percentile_interval(
            [r["width_invariant_normalized"] for r in boot]), "scale": "normalized"},
        "per_width": {p: {str(k): {"value": v, "interval": percentile_interval([r[p].get(k, math.nan) for r in boot])}
                          for k, v in point[p].items()} for p in ("fixed", "free")},
        "free_fit": {"a": a, "b": b,
                     "a_interval": percentile_interval([r["free_fit"][0] for r in boot]),
                     "b_interval": percentile_interval([r["free_fit"][1] for r in boot]),
                     "paper": {"a": PAPER_FREE_SCALE, "b": PAPER_FREE_EXPONENT}},
    }
    fixed = point["fixed"]
    tau_norm = point["width_invariant_normalized"]
    criteria: list[tuple[str, str, Criterion, str]] = [
        ("width-invariant tau* on raw scores (fixed target)", "fixed", lambda k: tau_star, "raw"),
        ("width-invariant tau* on normalised scores (fixed target)", "fixed", lambda k: tau_norm, "normalized"),
        ("per-width tau_fixed(k) (fixed target)", "fixed", lambda k: fixed.get(k, math.nan), "normalized"),
        ("paper tau_free(k) (fixed target)", "fixed", lambda k: free_threshold(k), "normalized"),
        ("threshold-free a > 0 (fixed target)", "fixed", lambda k: 0.0, "normalized"),
        ("width-invariant tau* on raw scores (free generation)", "free", lambda k: tau_star, "raw"),
        ("paper tau_free(k) (free generation)", "free", lambda k: free_threshold(k), "normalized"),
    ]
    rows = []
    for padding in ("same-query", "off-query"):
        for label, protocol, crit, scale in criteria:
            ctxs = select(contexts, protocol=protocol, padding=padding)
            if ctxs and math.isfinite(crit(ctxs[0].width)):
                rows.append({"padding": padding, "protocol": protocol, "scale": scale,
                             **elasticity(label, ctxs, crit, scale).to_json()})
    out["elasticity"] = rows
    strata_rows = []
    if strata:
        ctxs = select(contexts, protocol="fixed", padding="same-query")
        for measure in sorted({m for v in strata.values() for m in v}):
            values = {c: v[measure] for c, v in strata.items() if measure in v}
            if len(values) < 4:
                continue
            median = float(np.median(list(values.values())))
            for half, low in (("low", True), ("high", False)):
                sub = [c for c in ctxs if c.case_id in values and (values[c.case_id] <= median) == low]
                est = elasticity(f"{measure} {half} ({'<=' if low else '>'} {median:.3f})", sub, lambda k: tau_star,
                                 "raw")
                strata_rows.append({"measure": measure, "stratum": half, "median": median, **est.to_json()})
    out["strata"] = strata_rows
    return out
