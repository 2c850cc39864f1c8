"""Report tables for data the experiments already produce: correlations (Table 1), seed
replication (Table 14), instruction x policy (Table 16) and the structured single response (Table 17).

- `correlation_table` (Table 1): within-query correlations across systems. Every measure is
  centred within its (task, model, query) group (the group mean over the group's conditions and
  seeds is subtracted), then Pearson's r of the centred measure with centred PR@T and with
  centred groundedness; per-task r against PR@T; partial correlations of PR@T with one measure
  after residualising both on a second centred measure (ECR | distinct-2, distinct-2 | ECR).
  Groups with one observation carry no within-group variation and are dropped.
- `seed_table` (Table 14): each decisive grid contrast (`tables.decisive_contrasts`), each
  rotation-over-fixed cell and each held-out comparison of Tables 10/11 (`tables.held_out_comparisons`)
  estimated separately per seed (paired within task, model, query; equal task weights), with the mean
  and the standard deviation across seeds. Needs at least two seeds.
- `instruction_table` (Table 16): integrate minus commit at every (k, T) of the rotation arm,
  other condition fields equal, paired within query.
- `structured_table` (Table 17): each structured single response S (T = 1, `budget` B, k; Appendix
  D.2) against each rotation-arm portfolio at the same k with T = B, estimator and steering, for every
  plain instruction the run holds: gap = portfolio minus structured PR, paired within query.

Condition fields are matched through `tables._key`, which maps NaN (steer/eta of ordinary decoding) to
None: NaN never equals NaN, so NaN keys would match nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ascp.lm.prompts import base_instruction, is_structured
from ascp.report.frame import conditions, estimate_difference, paired, task_weighted_mean
from ascp.report.tables import (
    Table,
    _est_dict,
    _grid_cells,
    _key,
    decisive_contrasts,
    held_out_comparisons,
)
from ascp.stats.format import estimate_interval, marker, num, signed

GROUP_KEYS = ("task", "model", "query")

CORRELATION_MEASURES = (  # (family, column, label)
    ("coverage", "ecr_thresholded", "Evidence coverage rate"),
    ("coverage", "concentration", "Utilisation concentration"),
    ("diversity", "semantic_diversity", "Semantic diversity"),
    ("diversity", "distinct_1", "Distinct-1"),
    ("diversity", "distinct_2", "Distinct-2"),
    ("diversity", "distinct_3", "Distinct-3"),
    ("diversity", "self_bleu", "Self-BLEU"),
)
PARTIALS = (("ecr_thresholded", "distinct_2", "Evidence coverage | distinct-2"),
            ("distinct_2", "ecr_thresholded", "Distinct-2 | evidence coverage"))


def centred(frame, columns: list[str]):
    """`frame[columns]` minus their (task, model, query) group means, on rows where all are finite, and
    only groups of two or more rows; the task column is kept for per-task correlations."""
    sub = frame[[*GROUP_KEYS, *columns]].replace([np.inf, -np.inf], np.nan).dropna()
    sizes = sub.groupby(list(GROUP_KEYS))[columns[0]].transform("size")
    sub = sub[sizes >= 2]
    out = sub[columns] - sub.groupby(list(GROUP_KEYS))[columns].transform("mean")
    out["task"] = sub["task"]
    return out


def pearson(x, y) -> tuple[float, float, int]:
    """(r, two-sided p, n) of scipy's Pearson test; nan when either side is constant or n < 3."""
    from scipy.stats import pearsonr

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, int(x.size)
    res = pearsonr(x, y)
    return float(res.statistic), float(res.pvalue), int(x.size)


def residual(y, x):
    """y minus its least-squares line on x (both already centred within group)."""
    y, x = np.asarray(y, dtype=float), np.asarray(x, dtype=float)
    denom = float(x @ x)
    return y - (float(x @ y) / denom) * x if denom > 0 else y


def correlation_table(frame) -> Table | None:
    """Table 1 (see the module docstring); None when no measure has within-group variation."""
    measures = [m for m in CORRELATION_MEASURES if m[1] in frame.columns]
    rows, data = [], []
    tasks = sorted(frame["task"].unique())
    for family, column, label in measures:
        c = centred(frame, [column, "pr", "groundedness"])
        r_pr, p_pr, n = pearson(c[column], c["pr"])
        r_gr, p_gr, _ = pearson(c[column], c["groundedness"])
        if not math.isfinite(r_pr):
            continue
        per_task = {t: pearson(c.loc[c["task"] == t, column], c.loc[c["task"] == t, "pr"])[0] for t in tasks}
        signs = {np.sign(v) for v in per_task.values() if math.isfinite(v) and v != 0}
        mark = "‡" if len(signs) > 1 else ""
        rows.append([family, label + mark, str(n), signed(r_pr), pvalue_sci(p_pr), signed(r_gr), pvalue_sci(p_gr),
                     " / ".join(signed(per_task[t]) for t in tasks)])
        data.append({"family": family, "measure": column, "n": n, "r_pr": r_pr, "p_pr": p_pr, "r_ground": r_gr,
                     "p_ground": p_gr, "per_task": per_task, "sign_varies": bool(mark)})
    if not rows:
        return None
    for target, given, label in PARTIALS:
        if target not in frame.columns or given not in frame.columns:
            continue
        c = centred(frame, [target, given, "pr"])
        r, p, n = pearson(residual(c[target], c[given]), residual(c["pr"], c[given]))
        if math.isfinite(r):
            rows.append(["partial", label, str(n), signed(r), pvalue_sci(p), "-", "-", "-"])
            data.append({"family": "partial", "measure": f"{target}|{given}", "n": n, "r_pr": r, "p_pr": p})
    groups = frame.groupby(list(GROUP_KEYS)).ngroups
    return Table("table1_correlations", "Table 1: within-query correlations across systems",
                 f"{groups} task-model-query groups; every measure centred within its group before Pearson's r "
                 "(observations: the group's conditions and seeds; groups of one dropped). Per-task column: r "
                 f"with PR@T in {' / '.join(tasks)}; ‡: its sign is not constant across tasks. Partial rows: "
                 "both sides residualised on the second measure. ECR: the tables' thresholded used over offered.",
                 ["family", "measure", "n", "r vs PR@T", "p", "r vs groundedness", "p", "per task r vs PR@T"],
                 rows, data)


def pvalue_sci(p: float) -> str:
    return "-" if not math.isfinite(p) else f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def _rotation_over_fixed(conds) -> list[tuple[str, str, str]]:
    """(label, rotation condition, fixed condition) at every (k, T > 1) holding both arms, same probe."""
    def key(r):
        return _key(r, ("estimator", "instruction", "steer", "eta", "k", "T"))

    fixed = {key(r): n for n, r in conds[conds["arm"] == "fixed"].iterrows()}
    out = []
    for name, r in conds[conds["arm"] == "rotation"].iterrows():
        if r["T"] > 1 and key(r) in fixed:
            out.append((f"rot over fix @k{r['k']}T{r['T']}", name, fixed[key(r)]))
    return sorted(set(out))


def seed_table(frame) -> Table | None:
    """Table 14 (see the module docstring); None with fewer than two seeds or no contrast."""
    seeds = sorted(frame["seed"].unique())
    if len(seeds) < 2:
        return None
    conds = conditions(frame)
    contrasts = [c for cells in _grid_cells(conds).values() for c in decisive_contrasts(cells)]
    contrasts += _rotation_over_fixed(conds)
    contrasts += [(f"Table {c.number}: Ascp vs {label} @{c.tag}", c.reference, base)
                  for c in held_out_comparisons(conds) for base, label in c.baselines]
    rows, data = [], []
    for label, a, b in contrasts:
        per_seed = []
        for s in seeds:
            pairs = paired(frame[frame["seed"] == s], a, b, "pr")
            # equal task weights within the seed, as the main tables weigh tasks
            per_seed.append(float(pairs.groupby("task")["diff"].mean().mean()) if len(pairs) else math.nan)
        finite = [v for v in per_seed if math.isfinite(v)]
        mean = float(np.mean(finite)) if finite else math.nan
        sd = float(np.std(finite, ddof=1)) if len(finite) >= 2 else math.nan
        rows.append([label, *(num(v) for v in per_seed), num(mean), num(sd, 4)])
        data.append({"contrast": label, "a": a, "b": b, "per_seed": dict(zip(map(int, seeds), per_seed, strict=True)),
                     "mean": mean, "sd": sd})
    if not rows:
        return None
    return Table("table14_seeds", "Table 14: seed replication of the contrasts",
                 "Each contrast's mean paired PR@T difference a - b within one decoding seed (paired within task, "
                 "model and query; equal task weights), then the mean and sample standard deviation across seeds: "
                 "the grid's contrasts, and the held-out comparisons of Tables 10/11 (Ascp minus baseline), whose "
                 "tables pool the seeds with the crossed bootstrap.",
                 ["contrast", *(f"seed {s}" for s in seeds), "mean", "s.d."], rows, data)


def instruction_table(frame, rng: np.random.Generator, n_boot: int) -> Table | None:
    """Table 16 (see the module docstring); None unless both instructions ran some rotation cell."""
    conds = conditions(frame)
    rot = conds[conds["arm"] == "rotation"]

    def key(r) -> tuple[Any, ...]:
        return _key(r, ("scheduler", "estimator", "steer", "eta", "k", "T"))

    commit = {key(r): n for n, r in rot[rot["instruction"] == "commit"].iterrows()}
    integrate = {key(r): n for n, r in rot[rot["instruction"] == "integrate"].iterrows()}
    cells = sorted(set(commit) & set(integrate), key=lambda c: (c[-2], c[-1]))
    rows, data = [], []
    for cell in cells:
        a, b = integrate[cell], commit[cell]
        est = estimate_difference(paired(frame, a, b, "pr"), rng, n_boot)
        if est is None:
            continue
        pc, pi = task_weighted_mean(frame, b, "pr"), task_weighted_mean(frame, a, "pr")
        rows.append([str(cell[-2]), str(cell[-1]), num(pc), num(pi), signed(est.mean) + marker(est.p),
                     estimate_interval(est), str(est.n)])
        data.append({"k": int(cell[-2]), "T": int(cell[-1]), "commit": b, "integrate": a, "pr_commit": pc,
                     "pr_integrate": pi, **_est_dict("delta", est)})
    if not rows:
        return None
    return Table("table16_instruction", "Table 16: integrate versus commit instruction",
                 "Rotation arm; integrate minus commit PR@T at each (k, T), other condition fields equal, paired "
                 "within query (bootstrap as in the other tables). *: p < 0.05, †: p < 0.01.",
                 ["k", "T", "commit PR@T", "integrate PR@T", "Δ", "95% CI", "n"], rows, data)



def structured_table(frame, rng: np.random.Generator, n_boot: int) -> Table | None:
    """Table 17 (see the module docstring); None unless some structured single response has a matching
    rotation portfolio."""
    if "budget" not in frame.columns:  # no record of the run carries a budget
        return None
    conds = conditions(frame)
    budgets = frame.drop_duplicates("condition").set_index("condition")["budget"]
    match = ("estimator", "steer", "eta", "k")
    portfolios: dict[tuple[Any, ...], list[str]] = {}
    for name, r in conds[(conds["arm"] == "rotation") & budgets.reindex(conds.index).isna()].iterrows():
        if not is_structured(r["instruction"]):
            portfolios.setdefault((*_key(r, match), int(r["T"])), []).append(name)
    # S: a budgeted T = 1 condition of either arm (both offer the top k; rotation's is kept when both ran)
    single = conds[conds["arm"].notna() & (conds["T"] == 1) & budgets.reindex(conds.index).notna()]
    pairs, seen = [], set()
    for name, r in single.sort_values("arm", ascending=False).iterrows():
        cell = (*_key(r, match), int(budgets[name]))
        if (cell, r["instruction"]) not in seen:
            seen.add((cell, r["instruction"]))
            pairs += [(name, portfolio) for portfolio in portfolios.get(cell, [])]
    rows, data = [], []
    for s_name, p_name in sorted(pairs, key=lambda sp: (_order(conds.loc[sp[0]]), _order(conds.loc[sp[1]]))):
        s, p = conds.loc[s_name], conds.loc[p_name]
        est = estimate_difference(paired(frame, p_name, s_name, "pr"), rng, n_boot)
        if est is None:
            continue
        pr_p, pr_s = task_weighted_mean(frame, p_name, "pr"), task_weighted_mean(frame, s_name, "pr")
        instruction = base_instruction(s["instruction"])
        rows.append([instruction, p["instruction"], str(s["k"]), str(p["T"]), str(est.n), num(pr_p), num(pr_s),
                     signed(est.mean) + marker(est.p), estimate_interval(est)])
        data.append({"instruction": instruction, "portfolio_instruction": p["instruction"], "k": int(s["k"]),
                     "T": int(p["T"]), "structured": s_name, "portfolio": p_name, "pr_portfolio": pr_p,
                     "pr_structured": pr_s, **_est_dict("gap", est)})
    if not rows:
        return None
    return Table("table17_structured", "Table 17: enumerated single response versus matched portfolio",
                 "One structured generation (T = 1) with the portfolio's decode-token budget (max_new_tokens x T) "
                 "under its instruction plus the structured-output control (list distinct supported "
                 "interpretations with grounding, stopping rather than padding), against the rotation-arm "
                 "portfolio at the same k with that T and the portfolio instruction. Gap = portfolio minus "
                 "structured PR, paired within query (bootstrap as in the other tables). *: p < 0.05, †: p < 0.01.",
                 ["instruction", "portfolio instruction", "k", "T", "n", "portfolio PR@T", "structured PR", "gap",
                  "95% CI"], rows, data)


def _order(row) -> tuple[Any, ...]:
    """Rows in the paper's order: commit before integrate (others after, by name), then k, then T."""
    base = base_instruction(row["instruction"])
    return ({"commit": 0, "integrate": 1}.get(base, 2), base, row["k"], row["T"])
