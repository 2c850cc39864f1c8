"""Fig. 3 numbers from the per-passage score rows (`scores.jsonl`), so any of them can be recomputed.

Definitions (one *context* = one protocol x estimator x case x width x padding):

- AUC: within each context, `ascp.metrics.ranking.auc` of the raw scores with the necessary passages as
  positives and every other passage as negatives (ties count one half), averaged over cases.
- cover@m: the units of the designed answer set (those the necessary passages attest) that the
  top-m passages by raw score attest (`ascp.metrics.ranking.cover_at_m`; ties keep context order, which
  is itself a seeded shuffle). Random baseline: the exact expectation over uniformly random
  m-subsets, mean over u of 1 - C(K - n_u, m) / C(K, m), with n_u the passages attesting u.
  Gain = cover@m - random, averaged over contexts.
- Operating-point transfer: per protocol, estimator and width, tau = the 95th percentile of the
  normalised scores a(d) of off-query padding passages (pooled over cases); exceedance = share
  of same-query padding passages (near-misses: same pool, no gold alias) with a(d) > tau.
- Intervals: 95% percentile cluster bootstrap over cases (a case's contexts are resampled
  together; for the transfer the threshold is re-estimated in every replicate). p: two-sided
  bootstrap p-value of the mean against its null (0.5 for AUC, 0 for gain), with the +1 correction
  (`ascp.stats.bootstrap.bootstrap_p`, the rule of every other table).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ascp.attribution import DEFAULT_ESTIMATOR, recorded_facts
from ascp.metrics.ranking import auc, cover_at_m
from ascp.stats.bootstrap import cluster_bootstrap, cluster_replicates, percentile_interval

QUANTILE = 0.95


@dataclass(frozen=True)
class Context:
    protocol: str
    estimator: str
    case_id: str
    width: int
    padding: str
    ids: tuple[str, ...]
    roles: tuple[str, ...]
    answers: tuple[frozenset[str], ...]
    scores: np.ndarray
    normalized: np.ndarray

    @property
    def necessary(self) -> np.ndarray:
        return np.array([r == "necessary" for r in self.roles])

    @property
    def designed(self) -> frozenset[str]:
        return frozenset(u for r, a in zip(self.roles, self.answers, strict=True) if r == "necessary" for u in a)


def contexts(rows: Iterable[dict[str, Any]]) -> list[Context]:
    """Group per-passage rows into contexts (passages in context order)."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["protocol"], r["estimator"], r["case_id"], int(r["width"]), r["padding"])].append(r)
    out = []
    for key, rs in groups.items():
        rs.sort(key=lambda r: r["position"])
        protocol, estimator, case_id, width, padding = key
        out.append(Context(protocol, estimator, case_id, width, padding,
                           ids=tuple(r["passage_id"] for r in rs), roles=tuple(r["role"] for r in rs),
                           answers=tuple(frozenset(r["answers"]) for r in rs),
                           scores=np.array([r["score"] for r in rs], dtype=float),
                           normalized=np.array([r["normalized"] for r in rs], dtype=float)))
    return out


def context_auc(ctx: Context) -> float:
    return auc(ctx.scores, ctx.necessary)


def random_cover(answers: Sequence[Iterable[str]], designed: Iterable[str], m: int) -> float:
    """Exact expected cover@m of a uniformly random ranking of the passages."""
    designed = set(designed)
    if not designed:
        raise ValueError("no designed units: cover@m is undefined")
    k = len(answers)
    m = min(m, k)
    total = math.comb(k, m)
    hit = [1.0 - math.comb(k - sum(u in set(a) for a in answers), m) / total for u in designed]
    return float(np.mean(hit))


def context_cover(ctx: Context, m: int) -> tuple[float, float]:
    """(cover@m of the estimator's ranking, expected cover@m of a random ranking)."""
    order = np.argsort(-ctx.scores, kind="stable")
    ranked = [ctx.ids[i] for i in order]
    bearing = dict(zip(ctx.ids, ctx.answers, strict=True))
    return cover_at_m(ranked, bearing, m, ctx.designed), random_cover(ctx.answers, ctx.designed, m)


Record = dict[str, Any]
"""A mean over contexts as Fig. 3's records hold it: mean, lo, hi, p, n_cases (clusters), n (contexts)."""


def clustered_mean(values: Sequence[float], clusters: Sequence[str], null: float = 0.0, n_boot: int = 2000,
                   seed: int = 0) -> Record:
    """The record of a mean over contexts with its cluster-bootstrap interval (`ascp.stats.cluster_bootstrap`,
    cases resampled whole); non-finite values are left out, and none left gives NaNs."""
    v = np.asarray(values, dtype=float)
    keep = np.isfinite(v)
    if not keep.any():
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan, "p": math.nan, "n_cases": 0, "n": 0}
    est = cluster_bootstrap(v[keep], np.asarray(clusters)[keep], null, n_boot, rng=np.random.default_rng(seed))
    return {"mean": est.mean, "lo": est.lo, "hi": est.hi, "p": est.p, "n_cases": est.n, "n": int(keep.sum())}


def _threshold_exceedance(off: Sequence[np.ndarray], same: Sequence[np.ndarray]) -> tuple[float, float, int]:
    if not off or not same:
        return math.nan, math.nan, 0
    tau = float(np.quantile(np.concatenate(off), QUANTILE))
    s = np.concatenate(same)
    return tau, (float(np.mean(s > tau)) if s.size else math.nan), int(s.size)


def transfer(off: Sequence[Context], same: Sequence[Context], n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The off-query 95th-percentile operating point applied to same-query near-misses."""
    off_by = {c.case_id: c.normalized[[r == "padding" for r in c.roles]] for c in off}
    same_by = {c.case_id: c.normalized[[r == "padding" for r in c.roles]] for c in same}
    cases = sorted(set(off_by) | set(same_by))
    tau, rate, n = _threshold_exceedance(list(off_by.values()), list(same_by.values()))
    def exceedance(drawn: np.ndarray) -> float:
        draw = [cases[i] for i in drawn]
        return _threshold_exceedance([off_by[c] for c in draw if c in off_by],
                                     [same_by[c] for c in draw if c in same_by])[1]

    boot = cluster_replicates(exceedance, len(cases), n_boot, rng=np.random.default_rng(seed))
    lo, hi = percentile_interval(boot)
    return {"threshold": tau, "exceedance": rate, "lo": lo, "hi": hi, "n_near_misses": n,
            "n_cases": len(same_by)}


def summarize(rows: Iterable[dict[str, Any]], m: int = 2, n_boot: int = 2000, seed: int = 0) -> dict[str, list]:
    """Every Fig. 3 number: `auc`, `cover`, `transfer` and `reversal` records."""
    ctxs = contexts(rows)
    by: dict[tuple, list[Context]] = defaultdict(list)
    for c in ctxs:
        by[(c.protocol, c.estimator, c.width, c.padding)].append(c)
    auc_rows, cover_rows, transfer_rows = [], [], []
    cover_vals: dict[tuple, list[tuple[str, float, float]]] = defaultdict(list)
    per_case: dict[tuple, dict[str, float]] = {}
    for (protocol, est, width, padding), cs in sorted(by.items()):
        per_case[(protocol, est, width, padding)] = {c.case_id: context_auc(c) for c in cs}
        e = clustered_mean([context_auc(c) for c in cs], [c.case_id for c in cs], 0.5, n_boot, seed)
        auc_rows.append({"protocol": protocol, "estimator": est, "width": width, "padding": padding, **e})
        for c in cs:
            cov, rnd = context_cover(c, m)
            for w, p in ((width, padding), ("all", padding), ("all", "all")):
                cover_vals[(protocol, est, w, p)].append((c.case_id, cov, rnd))
    for (protocol, est, w, p), vals in sorted(cover_vals.items(), key=lambda kv: str(kv[0])):
        cl = [v[0] for v in vals]
        gain = clustered_mean([v[1] - v[2] for v in vals], cl, 0.0, n_boot, seed)
        cover_rows.append({"protocol": protocol, "estimator": est, "width": w, "padding": p,
                           "cover": float(np.mean([v[1] for v in vals])),
                           "random": float(np.mean([v[2] for v in vals])),
                           "gain": gain["mean"], "lo": gain["lo"], "hi": gain["hi"], "p": gain["p"],
                           "n_cases": gain["n_cases"], "n": gain["n"]})
    for protocol, est, width in sorted({(k[0], k[1], k[2]) for k in by}):
        off, same = by.get((protocol, est, width, "off-query")), by.get((protocol, est, width, "same-query"))
        if off and same:
            transfer_rows.append({"protocol": protocol, "estimator": est, "width": width,
                                  **transfer(off, same, n_boot, seed)})
    return {"auc": auc_rows, "cover": cover_rows, "transfer": transfer_rows,
            "reversal": reversal(auc_rows, per_case, n_boot, seed)}


def paired_difference(per_case: dict[tuple, dict[str, float]], a: tuple, b: tuple, n_boot: int, seed: int) -> Record:
    """Mean over common cases of AUC(a) - AUC(b), with a cluster-bootstrap interval."""
    x, y = per_case.get(a, {}), per_case.get(b, {})
    cases = sorted(set(x) & set(y))
    return clustered_mean([x[c] - y[c] for c in cases], cases, 0.0, n_boot, seed)


def query_proxies(estimators: Iterable[str]) -> tuple[str, ...]:
    """The query-relevance proxies among `estimators` (those declaring `reads_response = False`: BM25 and
    qd-cosine among the built-ins), in the given order: the proxies of the paper's reversal claim."""
    found = []
    for name in dict.fromkeys(estimators):
        facts = recorded_facts(name)
        if facts is not None and not facts.reads_response:
            found.append(name)
    return tuple(found)


def reversal(auc_rows: Sequence[dict[str, Any]], per_case: dict[tuple, dict[str, float]] | None = None,
             n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Per protocol and width: does the ordering of LOO and the query-relevance proxies reverse?

    The paper's claim (Sec. 4.2): under off-query padding BM25 and qd-cosine beat LOO; under
    same-query padding LOO beats both. `reversal` is True when both halves hold for the mean
    AUCs; with `per_case` AUCs, `diff_off`/`diff_same` give the paired LOO - proxy differences
    (one per proxy, cluster-bootstrap 95% CI) and `reversal_clear` is True when every interval
    excludes zero in the claimed direction."""
    table = {(r["protocol"], r["estimator"], r["width"], r["padding"]): r["mean"] for r in auc_rows}
    probe, proxies = DEFAULT_ESTIMATOR, query_proxies(r["estimator"] for r in auc_rows)
    if not proxies:
        return []
    out = []
    for protocol, width in sorted({(r["protocol"], r["width"]) for r in auc_rows}):
        def get(est: str, padding: str, protocol=protocol, width=width) -> float:
            return table.get((protocol, est, width, padding), math.nan)

        loo_off, loo_same = get(probe, "off-query"), get(probe, "same-query")
        prox_off = [get(p, "off-query") for p in proxies]
        prox_same = [get(p, "same-query") for p in proxies]
        if any(math.isnan(x) for x in (loo_off, loo_same, *prox_off, *prox_same)):
            continue
        off_holds = min(prox_off) > loo_off
        same_holds = loo_same > max(prox_same)
        row = {"protocol": protocol, "width": width, "loo_off": loo_off, "proxies_off": prox_off,
               "loo_same": loo_same, "proxies_same": prox_same, "proxies_beat_loo_off_query": off_holds,
               "loo_beats_proxies_same_query": same_holds, "reversal": off_holds and same_holds}
        if per_case is not None:
            diffs = {pad: [paired_difference(per_case, (protocol, probe, width, pad), (protocol, p, width, pad),
                                             n_boot, seed) for p in proxies] for pad in ("off-query", "same-query")}
            row["diff_off"] = diffs["off-query"]
            row["diff_same"] = diffs["same-query"]
            row["reversal_clear"] = (all(d["hi"] < 0 for d in diffs["off-query"])
                                     and all(d["lo"] > 0 for d in diffs["same-query"]))
        out.append(row)
    return out
