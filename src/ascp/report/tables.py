"""The report's tables, each in the layout of the paper table it mirrors, built only when the run supports it.

- `summary_table`: every condition's mean metrics (always).
- `grid_table` (Table 4): rotation vs fixed at each (k, T) the run holds with both arms.
- `decisive_table` (Tables 5/13): budget-matched, count and width contrasts between grid cells.
- `comparison_tables` (Tables 10/11): Ascp against every other policy at its (k, T), and each task on its own
  when the run has several.
- `decoder_table` (Table 12): the steered decoder's contrast/APC decomposition.
- `ablation_table` (Table 15): Ascp variants against the full scheduler.
- `elasticity_table` (Fig. 4's numbers): width elasticity of the used fraction.

Numbers are equal-task-weight means; differences are paired within (task, model, seed, query)
(`ascp.report.frame`). Markers follow the paper: `*` p < 0.05, `†` p < 0.01. BH q-values are
computed within each table (one family per table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from ascp.attribution import DEFAULT_ESTIMATOR, recorded_facts
from ascp.report.frame import (
    conditions,
    estimate_difference,
    paired,
    paired_sum,
    seed_t_difference,
    task_weighted_mean,
)
from ascp.stats import Estimate, bh_fdr
from ascp.stats.format import estimate_interval, marker, num, pvalue, signed

POLICY_LABELS = {
    "vanilla": "vanilla RAG", "rotate": "deep rotation", "mmr": "MMR", "dpp": "DPP-RAG", "xquad": "xQuAD",
    "pm2": "PM-2-RAG", "carriage": "Carriage", "carriage-narrow": "Carriage-narrow",
}


@dataclass
class Table:
    """A rendered-ready table: formatted cells plus the raw numbers behind them (`data`)."""

    key: str  # file stem, e.g. table4_grid
    title: str
    caption: str
    header: list[str]
    rows: list[list[str]]
    data: list[dict[str, Any]] = field(default_factory=list)


# ----- formatting --------------------------------------------------------------------------------

def mean_or_nan(est: Estimate | None) -> float:
    return math.nan if est is None else est.mean


def _est_dict(prefix: str, est: Estimate | None) -> dict[str, Any]:
    if est is None:
        return {f"{prefix}_mean": math.nan}
    return {f"{prefix}_{k}": v for k, v in est.to_dict().items()}


def _q_values(ps: list[float]) -> list[float]:
    """BH q for the finite p-values (one family); NaN stays NaN."""
    finite = [i for i, p in enumerate(ps) if math.isfinite(p)]
    q = [math.nan] * len(ps)
    if finite:
        for i, v in zip(finite, bh_fdr([ps[i] for i in finite]), strict=True):
            q[i] = float(v)
    return q


def _match_key(row) -> tuple:
    steer = -1.0 if not math.isfinite(row["steer"]) else row["steer"]
    eta = -1.0 if not math.isfinite(row["eta"]) else row["eta"]
    return (row["estimator"], row["instruction"], steer, eta)


def _blocks(frame) -> list[tuple[str, Any]]:
    """(label, sub-frame) per task x model, then "all" when there are several."""
    out = [(f"{t}/{m}", sub) for (t, m), sub in frame.groupby(["task", "model"], sort=True)]
    return out + [("all", frame)] if len(out) > 1 else out


# ----- tables -------------------------------------------------------------------------------------

SUMMARY_METRICS = (("pr", "PR@T"), ("best_single", "best single"), ("ceiling", "evidence ceiling"),
                   ("ecr_thresholded", "ECR"), ("used_thresholded", "used (tau*)"), ("offered", "offered"),
                   ("ecr", "ECR@T (Eq. 2)"), ("groundedness", "grounded"), ("distinct_2", "distinct-2"),
                   ("self_bleu", "self-BLEU"), ("concentration", "concentration"), ("tokens", "tokens/query"),
                   ("latency", "gen. s/query"))


def ecr_note(frame) -> str:
    """The caption sentence that says which ECR a table reports, with the threshold of this report."""
    tau = frame.attrs.get("used_threshold", math.nan)
    return (f"ECR (the paper's tables): used over offered, a passage used when its raw probe score reaches the "
            f"width-invariant threshold {tau:.4g} (nats per response token for loo) in some round.")


def summary_table(frame) -> Table:
    header = ["condition", "units", *(label for _, label in SUMMARY_METRICS)]
    rows, data = [], []
    for name in conditions(frame).index:
        n = int((frame["condition"] == name).sum())
        means = {m: task_weighted_mean(frame, name, m) for m, _ in SUMMARY_METRICS}
        digits = {"tokens": 0, "latency": 2, "offered": 2, "used_thresholded": 2}
        rows.append([name, str(n), *(num(means[m], digits.get(m, 3)) for m, _ in SUMMARY_METRICS)])
        data.append({"condition": name, "units": n, **means})
    return Table("summary", "Mean metrics per condition",
                 "Equal-task-weight means over queries, seeds and models. Evidence ceiling: share of gold units "
                 "attested by some offered passage (PR@T above it = answers the passages do not contain). "
                 f"{ecr_note(frame)} ECR@T (Eq. 2): a passage counts when its score reaches 0.1 x its round's maximum. "
                 "tokens/query: prompt plus response tokens over the T rounds; gen. s/query: generation wall time "
                 "over the T rounds (probe excluded).",
                 header, rows, data)


def grid_table(frame, rng: np.random.Generator, n_boot: int) -> Table | None:
    """Table 4: rotation vs fixed at every (k, T) with both arms (same estimator, instruction, steering)."""
    conds = conditions(frame)
    rotation = {(*_match_key(r), r["k"], r["T"]): n for n, r in conds[conds["arm"] == "rotation"].iterrows()}
    fixed = {(*_match_key(r), r["k"], r["T"]): n for n, r in conds[conds["arm"] == "fixed"].iterrows()}
    cells = sorted(set(rotation) & set(fixed), key=lambda key: (key[-2], key[-1]))
    if not cells:
        return None
    several = len({key[:-2] for key in cells}) > 1  # cells probed differently: say which probe
    rows, data = [], []
    for key in cells:
        rot, fix = rotation[key], fixed[key]
        k, T = key[-2], key[-1]
        est = estimate_difference(paired(frame, rot, fix, "pr"), rng, n_boot)
        p = est.p if est else math.nan
        offered = [task_weighted_mean(frame, c, "offered") for c in (rot, fix)]
        pr = [task_weighted_mean(frame, c, "pr") for c in (rot, fix)]
        rows.append([str(k), str(T), str(k * T), num(offered[0], 1), num(offered[1], 1), num(pr[0]), num(pr[1]),
                     signed(est.mean if est else math.nan) + marker(p), estimate_interval(est)]
                    + ([key[0]] if several else []))
        data.append({"k": k, "T": T, "rotation": rot, "fixed": fix, "offered_rotation": offered[0],
                     "offered_fixed": offered[1], "pr_rotation": pr[0], "pr_fixed": pr[1], **_est_dict("delta", est)})
    return Table("table4_grid", "Table 4: deconfounded width-count grid",
                 "Rotation cycles disjoint rank windows; fixed repeats the top-k for T samples. ΔPR@T = rotation "
                 "minus fixed, paired within query and bootstrapped by query (crossed seeds x queries with equal "
                 "task weights when the run has several). *: p < 0.05, †: p < 0.01.",
                 ["k", "T", "kT", "offered (rotation)", "offered (fixed)", "PR@T (rotation)", "PR@T (fixed)",
                  "ΔPR@T", "95% CI"] + (["probe"] if several else []), rows, data)


def _grid_cells(conds) -> dict[tuple, dict[tuple[int, int], str]]:
    """Per (estimator, instruction, steer, eta): (k, T) -> the rotation condition (T = 1: either arm)."""
    out: dict[tuple, dict[tuple[int, int], str]] = {}
    for name, row in conds.iterrows():
        if row["arm"] == "rotation" or (row["arm"] == "fixed" and row["T"] == 1):
            cells = out.setdefault(_match_key(row), {})
            if row["arm"] == "rotation" or (row["k"], row["T"]) not in cells:
                cells[(row["k"], row["T"])] = name
    return out


def decisive_contrasts(cells: dict[tuple[int, int], str]) -> list[tuple[str, str, str]]:
    """(label, a, b) contrasts a - b between grid cells: budget-matched (narrow-many minus wide-few at
    equal k*T), count (largest minus smallest T at each k) and width (largest minus smallest k at each T)."""
    out = []
    for (k1, t1), (k2, t2) in combinations(sorted(cells), 2):
        if k1 * t1 == k2 * t2 and k1 != k2:
            (ka, ta), (kb, tb) = sorted([(k1, t1), (k2, t2)])  # narrow first
            out.append((f"budget ({ka},{ta}) vs ({kb},{tb})", cells[(ka, ta)], cells[(kb, tb)]))
    for k in sorted({k for k, _ in cells}):
        ts = sorted(t for kk, t in cells if kk == k)
        if len(ts) > 1:
            out.append((f"count T{ts[-1]} vs T{ts[0]} at k{k}", cells[(k, ts[-1])], cells[(k, ts[0])]))
    for t in sorted({t for _, t in cells}):
        ks = sorted(k for k, tt in cells if tt == t)
        if len(ks) > 1:
            out.append((f"width k{ks[-1]} vs k{ks[0]} at T{t}", cells[(ks[-1], t)], cells[(ks[0], t)]))
    return out


def decisive_table(frame, rng: np.random.Generator, n_boot: int) -> Table | None:
    """Tables 5/13: budget-matched, count and width contrasts of PR@T, per task x model block."""
    contrasts = [c for cells in _grid_cells(conditions(frame)).values() for c in decisive_contrasts(cells)]
    if not contrasts:
        return None
    entries = []
    for block, sub in _blocks(frame):
        for label, a, b in contrasts:
            est = estimate_difference(paired(sub, a, b, "pr"), rng, n_boot)
            if est is not None:
                entries.append((block, label, a, b, est, task_weighted_mean(sub, a, "pr"),
                                task_weighted_mean(sub, b, "pr")))
    if not entries:
        return None
    q = _q_values([e[4].p for e in entries])
    rows = [[block, label, num(pa), num(pb), signed(est.mean) + marker(est.p), estimate_interval(est), pvalue(est.p),
             pvalue(qv), str(est.n)] for (block, label, _, _, est, pa, pb), qv in zip(entries, q, strict=True)]
    data = [{"block": block, "contrast": label, "a": a, "b": b, "pr_a": pa, "pr_b": pb, "q": qv,
             **_est_dict("delta", est)} for (block, label, a, b, est, pa, pb), qv in zip(entries, q, strict=True)]
    return Table("table5_contrasts", "Tables 5/13: decisive grid contrasts (PR@T)",
                 "Within-query paired PR@T differences a - b between grid cells (rotation arm; T = 1 cells of "
                 "either arm). Budget-matched: the same k*T evidence slots, many narrow rounds minus one wide "
                 "generation. BH q over every row of this table. *: p < 0.05, †: p < 0.01.",
                 ["block", "contrast", "PR@T (a)", "PR@T (b)", "ΔPR@T", "95% CI", "p", "BH q", "n"], rows, data)


def hierarchical_width_table(frame, rng: np.random.Generator, n_boot: int) -> Table | None:
    """Table 6: the widest-minus-narrowest rotation contrast at each T, per task x model condition,
    partially pooled by Paule-Mandel random effects, with the Higgins-Thompson-Spiegelhalter
    t_{K-2} prediction interval for a new condition. Needs K >= 3 task x model conditions."""
    from ascp.stats import paule_mandel, pooled_mean, prediction_interval

    blocks = [(label, sub) for label, sub in _blocks(frame) if label != "all"]
    if len(blocks) < 3:
        return None
    rows, data = [], []
    for cells in _grid_cells(conditions(frame)).values():
        for label, a, b in decisive_contrasts(cells):
            if not label.startswith("width"):
                continue
            effects, names = [], []
            for block, sub in blocks:
                est = estimate_difference(paired(sub, a, b, "pr"), rng, n_boot)
                if est is not None and est.se > 0:
                    effects.append(est)
                    names.append(block)
            if len(effects) < 3:
                continue
            meta = paule_mandel([e.mean for e in effects], [e.se**2 for e in effects])
            pooled = pooled_mean(meta)
            lo_t, hi_t = prediction_interval(meta, dist="t")
            lo_z, hi_z = prediction_interval(meta, dist="normal")
            for name, e, shrunk in zip(names, effects, meta.blup, strict=True):
                rows.append([label, name, signed(e.mean), signed(shrunk), estimate_interval(e)])
            rows.append([label, "grand mean", signed(pooled.mean), "-", estimate_interval(pooled)])
            rows.append([label, f"new condition (t, df={meta.k - 2})", "-", "-", f"[{signed(lo_t)}, {signed(hi_t)}]"])
            rows.append([label, "new condition (normal, for comparison)", "-", "-",
                         f"[{signed(lo_z)}, {signed(hi_z)}]"])
            data.append({"contrast": label, "conditions": names, "effects": [e.mean for e in effects],
                         "variances": [e.se**2 for e in effects], "tau2": meta.tau2, "mean": meta.mean,
                         "se": meta.se, "blup": list(meta.blup), "prediction_t": [lo_t, hi_t],
                         "prediction_normal": [lo_z, hi_z]})
    if not rows:
        return None
    return Table("table6_width_pooled", "Table 6: hierarchical width contrast",
                 "Widest minus narrowest rotation width at each T, paired within query, one estimate per task x "
                 "model condition (variance = bootstrap SE squared), partially pooled by Paule-Mandel random "
                 "effects (column 'pooled' = the shrunken condition effect). The t prediction interval for a new "
                 "condition uses t_{K-2} (Higgins-Thompson-Spiegelhalter).",
                 ["contrast", "condition", "effect", "pooled", "95% CI"], rows, data)


def _is_plain_ascp(row) -> bool:
    return row["policy"] == "ascp" and row["scheduler"] == "ascp"


# The paper's held-out rows (Tables 10 and 11: ΔPR@T, BH q), by baseline label, beside this run's.
PAPER_COMPARISONS: dict[str, dict[str, tuple[float, float]]] = {
    "10": {"Ascp without steering": (+0.009, 0.102), "deep rotation": (+0.006, 0.343), "vanilla RAG": (+0.072, 0.0),
           "MMR": (+0.070, 0.0), "DPP-RAG": (+0.035, 0.0), "xQuAD": (+0.071, 0.0), "PM-2-RAG": (+0.081, 0.0),
           "Carriage": (+0.033, 0.0), "Carriage-narrow": (+0.048, 0.0)},
    "11": {"deep rotation": (-0.003, 0.717), "vanilla RAG": (+0.063, 0.0), "MMR": (+0.061, 0.0),
           "DPP-RAG": (+0.026, 0.002), "xQuAD": (+0.062, 0.0), "PM-2-RAG": (+0.072, 0.0), "Carriage": (+0.024, 0.0),
           "Carriage-narrow": (+0.039, 0.0)},
}
FRAME_QUERIES = 100  # queries per task of the paper's held-out frame (Tables 10 and 11)


def paper_cell(number: str, label: str) -> str:
    """The paper's ΔPR@T and BH q of a Table 10/11 row ('-' for a row the paper does not have)."""
    paper = PAPER_COMPARISONS.get(number, {}).get(label)
    if paper is None:
        return "-"
    return f"{paper[0]:+.3f} (q {'<.001' if paper[1] < 0.001 else f'{paper[1]:.3f}'})"


def comparison_verdict(est: Estimate | None, q: float, paper: tuple[float, float] | None) -> str:
    """This row against the paper's, significance read off BH q at 0.05: a paper effect (q < .05) is
    `reproduced` (same sign, q < .05), `same sign, n.s.`, or `opposite sign` (`, significant`); a paper
    null (q >= .05) is `consistent (n.s.)` or `differs`."""
    if paper is None or est is None or not math.isfinite(q):
        return "-"
    significant = q < 0.05
    if paper[1] >= 0.05:
        return "differs" if significant else "consistent (n.s.)"
    if est.mean * paper[0] > 0:
        return "reproduced" if significant else "same sign, n.s."
    return "opposite sign" + (", significant" if significant else "")


@dataclass(frozen=True)
class HeldOutComparison:
    """One reference of Table 10 (a full steered decoder) or 11 (ordinary decoding) and its baselines."""

    number: str  # "10" or "11"
    k: int
    T: int
    distinct: tuple[tuple[str, Any], ...]  # (field, value) telling it from another reference of its table at k, T
    reference: str
    baselines: list[tuple[str, str]]  # (condition, label)

    @property
    def key(self) -> str:
        """The table's file stem, e.g. table11_ascp_k5_T5."""
        return f"table{self.number}_ascp_k{self.k}_T{self.T}" + "".join(f"_{f}{v}" for f, v in self.distinct)

    @property
    def where(self) -> str:
        """'k=5, T=5' (and the distinct fields), for titles."""
        return ", ".join([f"k={self.k}", f"T={self.T}", *(f"{f}={v}" for f, v in self.distinct)])

    @property
    def tag(self) -> str:
        """'k5T5' (and the distinct fields), for row labels."""
        return " ".join([f"k{self.k}T{self.T}", *(f"{f}={v}" for f, v in self.distinct)])


def held_out_comparisons(conds) -> list[HeldOutComparison]:
    """The contrasts of Tables 10/11 in `conds` (`frame.conditions`), for each plain `ascp` reference that
    has a baseline: ordinary decoding (Table 11) or the full steered decoder, steer and eta both above 0
    (Table 10; the decoder's partial variants are Table 12's). Its baselines: every non-Ascp policy at the
    same k, T, estimator and instruction with ordinary decoding, another Ascp scheduler that is no ablation
    of Table 15 (e.g. ascp-exposure), and for Table 10 Ascp without steering. References of one table at
    the same k, T (another estimator, instruction or decoder setting) get those fields in key and title
    (a plain `ascp` has no scheduler options, so its condition fields tell it apart)."""
    refs = [(n, r) for n, r in conds.iterrows() if _is_plain_ascp(r) and _decoder_role(r) in ("off", "full")]
    found = []
    for ref, rrow in sorted(refs, key=lambda x: (x[1]["k"], x[1]["T"], math.isfinite(x[1]["steer"]))):
        same = conds[(conds["k"] == rrow["k"]) & (conds["T"] == rrow["T"]) & (conds["estimator"] == rrow["estimator"])
                     & (conds["instruction"] == rrow["instruction"]) & conds["steer"].isna()]
        steered = math.isfinite(rrow["steer"])
        baselines = []
        if steered:
            baselines += [(n, "Ascp without steering") for n, r in same.iterrows() if _is_plain_ascp(r)]
        baselines += [(n, POLICY_LABELS.get(r["policy"], r["scheduler"])) for n, r in same.iterrows()
                      if not str(r["policy"]).startswith("ascp")]
        baselines += [(n, str(r["scheduler"])) for n, r in same.iterrows()  # another scheduler, not an ablation
                      if str(r["policy"]).startswith("ascp") and not _is_plain_ascp(r)
                      and r["policy"] not in {policy for _, policy in ABLATIONS}]
        if baselines:
            found.append(("10" if steered else "11", ref, rrow, baselines))
    out = []
    for number, ref, rrow, baselines in found:
        k, t = rrow["k"], rrow["T"]
        rivals = [r for n, _, r, _ in found if n == number and (r["k"], r["T"]) == (k, t)]
        differing = [f for f in ("estimator", "instruction", "steer", "eta")
                     if len({_key(r, (f,)) for r in rivals}) > 1]
        out.append(HeldOutComparison(number, k, t, tuple((f, rrow[f]) for f in differing), ref, baselines))
    return out


def _key(row, fields: tuple[str, ...]) -> tuple[Any, ...]:
    """The row's `fields` as a hashable key, NaN as None (NaN never equals NaN)."""
    return tuple(None if isinstance(row[f], float) and math.isnan(row[f]) else row[f] for f in fields)


def comparison_tables(frame, rng: np.random.Generator, n_boot: int) -> list[Table]:
    """Tables 10/11: each plain `ascp` condition against its baselines (`held_out_comparisons`; an Ascp
    variant such as ascp-exposure is a row the paper does not have). Each row has the paper's number and
    a verdict beside it, and the power of this design (`ascp.stats.detectable_effect`)."""
    from ascp.stats import detectable_effect

    tables = []
    for comparison in held_out_comparisons(conditions(frame)):
        number, ref, baselines = comparison.number, comparison.reference, comparison.baselines
        steered = number == "10"
        ests = {m: [estimate_difference(paired(frame, ref, b, m), rng, n_boot) for b, _ in baselines]
                for m in ("pr", "ecr_thresholded", "groundedness")}
        # BH within families: the paper's rows (its family: the PR@T contrasts of its table), and the
        # rows the paper does not have, adjusted apart so they neither dilute nor borrow its correction
        theirs = [label in PAPER_COMPARISONS[number] for _, label in baselines]
        ps = [e.p if e else math.nan for e in ests["pr"]]
        q = [math.nan] * len(baselines)
        for family in (True, False):
            members = [i for i, own in enumerate(theirs) if own == family]
            for i, value in zip(members, _q_values([ps[i] for i in members]), strict=True):
                q[i] = value
        extra_rows = [label for (_, label), own in zip(baselines, theirs, strict=True) if not own]
        ref_pr = task_weighted_mean(frame, ref, "pr")
        queries = int(frame.loc[frame["condition"] == ref, ["task", "query"]].drop_duplicates().shape[0])
        n_tasks = int(frame.loc[frame["condition"] == ref, "task"].nunique())
        full = FRAME_QUERIES * n_tasks
        rows, data = [], []
        for i, (base, label) in enumerate(baselines):
            pr, ecr, gr = ests["pr"][i], ests["ecr_thresholded"][i], ests["groundedness"][i]
            base_pr = task_weighted_mean(frame, base, "pr")
            paper = PAPER_COMPARISONS[number].get(label)
            mde = detectable_effect(pr.se) if pr else math.nan
            row_queries = int(paired(frame, ref, base, "pr")[["task", "query"]].drop_duplicates().shape[0])
            mde_full = detectable_effect(pr.se, n=row_queries, n_target=full) if pr and row_queries else math.nan
            rows.append([label, num(base_pr), num(ref_pr), signed(pr.mean if pr else math.nan) + marker(q[i]),
                         estimate_interval(pr), pvalue(q[i]), paper_cell(number, label),
                         comparison_verdict(pr, q[i], paper),
                         num(mde), num(mde_full), signed(ecr.mean if ecr else math.nan),
                         signed(gr.mean if gr else math.nan), str(row_queries)])
            data.append({"baseline": base, "label": label, "reference": ref, "baseline_pr": base_pr, "ascp_pr": ref_pr,
                         "q": q[i], "paper_delta_pr": paper[0] if paper else math.nan,
                         "paper_q": paper[1] if paper else math.nan, "verdict": comparison_verdict(pr, q[i], paper),
                         "mde80": mde, "mde80_frame": mde_full, "queries": row_queries, "frame_queries": full,
                         **_est_dict("delta_pr", pr), **_est_dict("delta_ecr", ecr), **_est_dict("delta_ground", gr)})
        what = "with steered decoding" if steered else "scheduler only (ordinary decoding on both sides)"
        tables.append(Table(
            comparison.key,
            f"Table {number}: Ascp vs baselines at {comparison.where} ({what})",
            f"Reference: {ref}. Differences Ascp minus baseline, paired within task, model, seed and query; "
            "bootstrap by query (crossed seeds x queries, equal task weights, when the run has several). "
            f"BH q over the paper's PR@T contrasts present here ({sum(theirs)} of the "
            f"{len(PAPER_COMPARISONS[number])} of its family)"
            + (f"; the rows the paper does not have ({', '.join(extra_rows)}) are a family of their own, adjusted "
               "apart" if extra_rows else "")
            + f"; markers use q. Paper: Table {number}'s ΔPR@T and BH q "
            "(Llama/Qwen/Mistral 7-8B, four tasks; '<.001' printed for q < .001); verdict: a paper effect is "
            "reproduced when this row has its sign with q < .05, a paper null is consistent when q >= .05. "
            "Power: MDE80 = (z_0.975 + z_0.80) x SE = 2.80 x SE, the smallest true ΔPR a two-sided test at 0.05 "
            f"detects with 80% power, SE the bootstrap SE of the row's ΔPR on its n paired queries (Ascp: {queries}); "
            f"'MDE80 frame' is the same design at the held-out frame's {full} queries ({FRAME_QUERIES} per task): "
            f"2.80 x SE x sqrt(n/{full}). BH over the family makes the per-row bar higher. "
            f"{ecr_note(frame)}",
            ["baseline", "baseline PR", "Ascp PR", "ΔPR", "95% CI", "BH q", "paper ΔPR", "verdict", "MDE80",
             "MDE80 frame", "ΔECR", "Δground", "n"], rows, data))
        # their own generators, so adding these tables leaves every other interval of the report as it was
        task_rng = rng.spawn(1)[0]
        if n_tasks > 1:
            tables.append(_by_task_table(frame, comparison, task_rng, n_boot))
        rules = _answer_rule_table(frame, comparison, task_rng.spawn(1)[0], n_boot)
        if rules is not None:
            tables.append(rules)
    return tables


ANSWER_READINGS = (  # (label, metric, restricted to questions whose gold answer is not yes/no)
    ("PR@T (the paper's rule)", "pr", False),
    ("without yes/no questions", "pr", True),
    ("yes/no: no credit when both are said", "pr_strict_yes_no", False),
    ("ALCE STR-EM (substring)", "pr_substring", False),
)


def _answer_rule_table(frame, comparison: HeldOutComparison, rng: np.random.Generator,
                       n_boot: int) -> Table | None:
    """Table 10/11's ΔPR@T under other answer rules, pooled and per task: without the questions whose gold
    answer is yes or no (any portfolio that says both words gets full recall on them), with no credit for
    a yes/no question whose portfolio says both, and under ALCE's substring STR-EM. None when the data
    files were not readable (the readings need the gold answers)."""
    if "pr_substring" not in frame.columns:
        return None
    ref, baselines = comparison.reference, comparison.baselines
    # every reading over the same units: those whose data file was read and whose answers have aliases
    frame = frame[frame["pr_substring"].notna()]
    yes_no = frame["yes_no"].eq(True)
    scopes = [("all tasks (equal weights)", frame.index == frame.index)]
    scopes += [(task, frame["task"] == task) for task in sorted(frame["task"].unique())]
    rows, data = [], []
    for scope, inside in scopes:
        has_yes_no = bool((inside & yes_no).any())
        for label_row, metric, drop_yes_no in ANSWER_READINGS:
            if (drop_yes_no or metric == "pr_strict_yes_no") and not has_yes_no:
                continue  # the same numbers as the first reading
            part = frame[inside & ~yes_no] if drop_yes_no else frame[inside]
            for base, label in baselines:
                pairs = paired(part, ref, base, metric)
                est = estimate_difference(pairs, rng, n_boot)
                queries = int(pairs[["task", "query"]].drop_duplicates().shape[0])
                base_pr, ref_pr = task_weighted_mean(part, base, metric), task_weighted_mean(part, ref, metric)
                rows.append([scope, label_row, label, num(base_pr), num(ref_pr),
                             signed(est.mean if est else math.nan) + marker(est.p if est else math.nan),
                             estimate_interval(est), pvalue(est.p if est else math.nan), str(queries)])
                data.append({"scope": scope, "reading": label_row, "metric": metric, "without_yes_no": drop_yes_no,
                             "baseline": base, "label": label, "reference": ref, "baseline_pr": base_pr,
                             "ascp_pr": ref_pr, "queries": queries, **_est_dict("delta_pr", est)})
    return Table(
        f"{comparison.key}_answer_rules",
        f"Table {comparison.number} under other answer rules: Ascp vs baselines at {comparison.where}",
        f"Reference: {ref}. The same portfolios scored three more ways beside the paper's rule (an alias "
        "counts when it is a contiguous run of normalised tokens of a response): without the questions whose "
        "gold answer is yes or no (a portfolio that says both words anywhere gets full recall on them); with "
        "no credit for a yes/no question whose portfolio says both words; and ALCE's STR-EM, where an alias "
        "counts as a plain substring of a normalised response ('6' inside '2016'). Pooled rows weigh tasks "
        "equally (crossed bootstrap by query, and by seed when there are several); p is unadjusted (markers use "
        "it): these rows show how much the answer rule moves each contrast, the main table's BH q is the test. "
        "Rows of the yes/no readings appear where the scope has yes/no questions. Every row reads the units "
        "whose data file was readable and whose answers have aliases (claim units, ELI5, have no alias rule), "
        "so the first row may differ from the main table's where some were not.",
        ["scope", "reading", "baseline", "baseline PR", "Ascp PR", "ΔPR", "95% CI", "p", "n"], rows, data)


def _by_task_table(frame, comparison: HeldOutComparison, rng: np.random.Generator, n_boot: int) -> Table:
    """Table 10/11's ΔPR@T of each task on its own: the pooled row gives every task equal weight whatever
    its number of queries, so a task run on few queries moves it as much as one run on all of them."""
    from ascp.stats import detectable_effect

    ref, baselines = comparison.reference, comparison.baselines
    rows, data = [], []
    for task in sorted(frame["task"].unique()):
        part = frame[frame["task"] == task]
        for base, label in baselines:
            pairs = paired(part, ref, base, "pr")
            pr = estimate_difference(pairs, rng, n_boot)
            queries = int(pairs["query"].nunique())
            base_pr, ref_pr = task_weighted_mean(part, base, "pr"), task_weighted_mean(part, ref, "pr")
            mde = detectable_effect(pr.se) if pr else math.nan
            rows.append([task, label, num(base_pr), num(ref_pr), signed(pr.mean if pr else math.nan) + marker(
                pr.p if pr else math.nan), estimate_interval(pr), pvalue(pr.p if pr else math.nan), num(mde),
                str(queries)])
            data.append({"task": task, "baseline": base, "label": label, "reference": ref, "baseline_pr": base_pr,
                         "ascp_pr": ref_pr, "mde80": mde, "queries": queries,
                         **_est_dict("delta_pr", pr)})
    return Table(
        f"{comparison.key}_by_task",
        f"Table {comparison.number} by task: Ascp vs baselines at {comparison.where}, each task on its own",
        f"Reference: {ref}. The pooled table's PR@T contrasts within each task: paired within model, seed and "
        "query, bootstrap by query (crossed seeds x queries when the task has several seeds). p is unadjusted "
        "(markers use it): these rows describe where the pooled effect comes from, the pooled table's BH q "
        "is the test. MDE80 = 2.80 x SE on the task's n paired queries.",
        ["task", "baseline", "baseline PR", "Ascp PR", "ΔPR", "95% CI", "p", "MDE80", "n"], rows, data)


DECODER_CONTRASTS = (  # (label, roles summed on the a side, roles summed on the b side)
    ("full decoder - off", ("full",), ("off",)),
    ("contrast, APC held on", ("full",), ("apc",)),
    ("APC only", ("apc",), ("off",)),
    ("contrast, APC held off", ("contrast",), ("off",)),
    ("APC, contrast held on", ("full",), ("contrast",)),
    ("contrast x APC interaction", ("full", "off"), ("apc", "contrast")),
)


def _decoder_role(row) -> str | None:
    if not math.isfinite(row["steer"]):
        return "off"
    if row["steer"] > 0 and row["eta"] > 0:
        return "full"
    if row["steer"] == 0 and row["eta"] > 0:
        return "apc"
    if row["steer"] > 0 and row["eta"] == 0:
        return "contrast"
    return None


def decoder_table(frame, rng: np.random.Generator, n_boot: int) -> Table | None:
    """Table 12: steered-decoder decomposition within each (scheduler, k, T, estimator, instruction)."""
    conds = conditions(frame)
    groups: dict[tuple, dict[str, str]] = {}
    for name, row in conds.iterrows():
        role = _decoder_role(row)
        if role is not None:
            key = (row["scheduler"], row["k"], row["T"], row["estimator"], row["instruction"])
            groups.setdefault(key, {}).setdefault(role, name)
    entries = []
    for key, roles in sorted(groups.items()):
        for label, plus, minus in DECODER_CONTRASTS:
            if all(r in roles for r in (*plus, *minus)):
                ests = {}
                for m in ("pr", "ecr_thresholded", "groundedness", "words"):
                    pairs = paired_sum(frame, [roles[r] for r in plus], [roles[r] for r in minus], m)
                    ests[m] = seed_t_difference(pairs) if m == "pr" else None
                    if ests[m] is None:
                        ests[m] = estimate_difference(pairs, rng, n_boot)
                entries.append((key, label, " + ".join(roles[r] for r in plus), " + ".join(roles[r] for r in minus),
                                ests))
    if not entries:
        return None
    q = _q_values([e[4]["pr"].p if e[4]["pr"] else math.nan for e in entries])
    rows, data = [], []
    for (key, label, a, b, ests), qv in zip(entries, q, strict=True):
        pr = ests["pr"]
        rows.append([f"{key[0]} k={key[1]} T={key[2]}", label, signed(pr.mean if pr else math.nan, 4) + marker(qv),
                     estimate_interval(pr, 4), pvalue(pr.p if pr else math.nan), pvalue(qv),
                     *(signed(mean_or_nan(ests[m]), 4) for m in ("ecr_thresholded", "groundedness")),
                     signed(mean_or_nan(ests["words"]), 1),
                     pr.method if pr else "-"])
        data.append({"group": list(key), "contrast": label, "a": a, "b": b, "q": qv,
                     **{k: v for m, e in ests.items() for k, v in _est_dict(f"delta_{m}", e).items()}})
    return Table("table12_decoder", "Table 12: steered decoder decomposition",
                 "Differences a - b of the same scheduler with decoding switches changed: off = ordinary sampling; "
                 "full = contrast (alpha) and APC (eta); APC only = alpha 0; contrast only = eta 0; the interaction is "
                 "(full + off) - (APC only + contrast only), the contrast's effect with APC on minus without. "
                 "ΔPR interval and "
                 "p: two-sided t over seed means when the run has at least two seeds (the paper: five, df = 4), "
                 "else the query bootstrap (column 'method'). BH q over the ΔPR rows; markers use q.",
                 ["group", "contrast", "ΔPR@T", "95% CI", "p", "BH q", "ΔECR", "Δground", "Δwords", "method"],
                 rows, data)


ABLATIONS = (  # (row label, scheduler); why "- attribution feedback" is ascp-uniform: docs/schedulers.md
    ("- attribution feedback", "ascp-uniform"),
    ("- feedback, static control (u = n = 0)", "ascp-nofeedback"),
    ("- submodular selection", "ascp-modular"),
    ("+ guardrail (κ=1)", "ascp-pin1"),
    ("+ guardrail (κ=2)", "ascp-pin2"),
    ("probe → similarity", "ascp-similarity"),
    ("probe → uniform", "ascp-uniform"),
)


def ablation_table(frame, rng: np.random.Generator, n_boot: int) -> Table | None:
    """Table 15: Ascp (full: steered when the run has it, probed by the default estimator) and its component
    ablations, per task; every other estimator probing the full scheduler is a "probe →" substitution row."""
    probe = DEFAULT_ESTIMATOR
    conds = conditions(frame)
    plain = [(n, r) for n, r in conds.iterrows() if _is_plain_ascp(r) and r["estimator"] == probe]
    if not plain:
        return None
    full, frow = max(plain, key=lambda x: (math.isfinite(x[1]["steer"]), x[1]["T"], x[1]["k"]))
    same = conds[(conds["k"] == frow["k"]) & (conds["T"] == frow["T"]) & (conds["instruction"] == frow["instruction"])]
    steer_match = same["steer"].fillna(-1) == (frow["steer"] if math.isfinite(frow["steer"]) else -1)
    variants = []
    for label, policy in ABLATIONS:
        hit = same[(same["scheduler"] == policy) & steer_match & (same["estimator"] == probe)]
        variants += [(label, n) for n in hit.index[:1]]
    if math.isfinite(frow["steer"]):
        off = same[(same["scheduler"] == "ascp") & same["steer"].isna() & (same["estimator"] == probe)]
        variants += [("- steered decoding", n) for n in off.index[:1]]
        only = same[(same["policy"] == "vanilla") & steer_match]
        variants += [("steered decoding only", n) for n in only.index[:1]]
    substituted = same[(same["scheduler"] == "ascp") & steer_match & (same["estimator"] != probe)]
    for estimator in dict.fromkeys(substituted["estimator"]):
        hit = substituted[substituted["estimator"] == estimator]
        variants += [(f"probe → {estimator}", n) for n in hit.index[:1]]
    if not variants:
        return None
    tasks = sorted(frame["task"].unique())
    header = ["variant", *(f"{t} {m}" for t in tasks for m in ("PR@T", "ECR")), "ΔPR vs full", "95% CI"]
    rows, data = [], []
    for label, name in [("Ascp (full)", full), *variants]:
        cells = []
        per_task = {}
        for t in tasks:
            sub = frame[frame["task"] == t]
            vals = [task_weighted_mean(sub, name, m) for m in ("pr", "ecr_thresholded")]
            per_task[t] = vals
            cells += [num(v) for v in vals]
        est = None if name == full else estimate_difference(paired(frame, name, full, "pr"), rng, n_boot)
        rows.append([label, *cells, signed(est.mean) + marker(est.p) if est else "-", estimate_interval(est)])
        data.append({"variant": label, "condition": name, "per_task": per_task, **_est_dict("delta_pr", est)})
    return Table("table15_ablations", "Table 15: component ablations and probe substitutions",
                 f"Full: {full}. Each row changes one component at the same k, T and instruction; ΔPR is the "
                 "variant minus the full scheduler, paired by query. '- attribution feedback' is the paper's "
                 "open-loop variant that keeps moving across rounds by reading uniform use (ascp-uniform, the same "
                 "condition as 'probe → uniform'); the static u = n = 0 objective is the separate control row. "
                 f"{ecr_note(frame)} *: p < 0.05, †: p < 0.01.",
                 header, rows, data)


def elasticity_groups(frame) -> list[tuple[str, Any]]:
    """(label, rows) per task x model x scheduler x T x causal estimator holding at least two widths k.
    Estimators that do not declare `causal` (relevance proxies) are skipped: their "used" passages measure
    relevance, not utilisation."""
    out = []
    keys = ["task", "model", "scheduler", "T", "estimator"]
    for (task, model, sched, T, est), sub in frame.groupby(keys, sort=True):
        facts = recorded_facts(est)
        if facts is not None and facts.causal and sub["k"].nunique() >= 2 and sub["query"].nunique() >= 3:
            out.append((f"{task}/{model} {sched} T={T} ({est})", sub))
    return out


def elasticity_table(frame) -> Table | None:
    """Fig. 4's numbers: the OLS slope of log used-fraction on log k, cluster-robust by query, under the
    width-invariant threshold (Sec. 4.4's criterion) and under the run's own tau(k)."""
    from ascp.stats import width_elasticity

    tau = frame.attrs.get("used_threshold", math.nan)
    criteria = (("used_fraction_invariant", f"width-invariant tau* = {tau:.4g}"),
                ("used_fraction", "run's tau(k) (shrinks with k)"))
    rows, data = [], []
    for label, sub in elasticity_groups(frame):
        for column, criterion in criteria:
            if column not in sub.columns:
                continue
            rows_used = sub[["query", "k", column]].rename(columns={column: "used_fraction"}).dropna()
            try:
                est = width_elasticity(rows_used, cluster="query")
            except ValueError:
                continue
            rows.append([label, criterion, ", ".join(str(k) for k in sorted(sub["k"].unique())),
                         f"{est.mean:.3f} ({est.se:.3f})", estimate_interval(est), pvalue(est.p), str(est.n)])
            data.append({"group": label, "criterion": column, "ks": sorted(int(k) for k in sub["k"].unique()),
                         **_est_dict("elasticity", est)})
    if not rows:
        return None
    return Table("fig4_elasticity", "Width elasticity of the used fraction (Fig. 4)",
                 "Slope of log(used fraction q) on log(k), one observation per query and width, cluster-robust by "
                 "query (t with G - 1 df). The paper's -0.68 is q under a width-invariant threshold (Sec. 4.4): "
                 "the first criterion. The run's own tau(k) shrinks with width, a free-threshold criterion in the "
                 "paper's terms (a different quantity). These rows are free generation on natural pools; the "
                 "protocol-clean estimate needs fixed targets (`ascp calibrate`). Queries with no used passage "
                 "are dropped (n counts the rows fitted).",
                 ["group", "criterion", "widths k", "elasticity (se)", "95% CI", "p", "n"], rows, data)
