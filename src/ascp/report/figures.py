"""PNG figures in the style of the paper's Fig. 4 (width elasticity), Fig. 5 (k x T grid) and Fig. 6
(cost vs quality). Each function returns the caption it drew, or None when the run lacks the cells."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ascp.report.frame import conditions, estimate_difference, paired, task_weighted_mean
from ascp.report.tables import Table


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _arm_cells(frame) -> dict[str, dict[tuple[int, int], str]]:
    """arm -> (k, T) -> condition, for the ordinary-decoding grid cells of both arms (a T = 1 cell of
    either arm counts for both: one round of the top-k is the same context under both)."""
    conds = conditions(frame)
    out: dict[str, dict[tuple[int, int], str]] = {"rotation": {}, "fixed": {}}
    for name, row in conds.iterrows():
        if row["arm"] in out and not math.isfinite(row["steer"]):
            out[row["arm"]].setdefault((int(row["k"]), int(row["T"])), name)
    for arm, other in (("rotation", "fixed"), ("fixed", "rotation")):  # at T = 1 the two arms coincide
        for (k, T), name in list(out[arm].items()):
            if T == 1:
                out[other].setdefault((k, T), name)
    return out


def grid_figure(frame, path: Path, rng: np.random.Generator, n_boot: int) -> str | None:
    """Fig. 5: (a) PR@T by width k, (b) PR@T by count T, rotation solid and fixed dashed, (c) the paired
    rotation - fixed difference by T with 95% intervals. Needs both arms at two or more T or k values."""
    cells = _arm_cells(frame)
    shared = sorted(set(cells["rotation"]) & set(cells["fixed"]))
    if len(shared) < 2:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ks = sorted({k for k, _ in shared})
    ts = sorted({t for _, t in shared})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, t in enumerate(ts):
        for arm, style in (("rotation", "-"), ("fixed", "--")):
            xs = [k for k in ks if (k, t) in cells[arm]]
            ys = [task_weighted_mean(frame, cells[arm][(k, t)], "pr") for k in xs]
            axes[0].plot(xs, ys, style, marker="o", color=colours[i % len(colours)], label=f"T={t} {arm}")
    for i, k in enumerate(ks):
        for arm, style in (("rotation", "-"), ("fixed", "--")):
            xs = [t for t in ts if (k, t) in cells[arm]]
            ys = [task_weighted_mean(frame, cells[arm][(k, t)], "pr") for t in xs]
            axes[1].plot(xs, ys, style, marker="o", color=colours[i % len(colours)], label=f"k={k} {arm}")
        xs, mean, lo, hi = [], [], [], []
        for t in ts:
            if (k, t) in shared:
                est = estimate_difference(paired(frame, cells["rotation"][(k, t)], cells["fixed"][(k, t)], "pr"),
                                          rng, n_boot)
                if est is not None:
                    xs.append(t)
                    mean.append(est.mean)
                    lo.append(max(0.0, est.mean - est.lo))  # degenerate intervals: rounding only
                    hi.append(max(0.0, est.hi - est.mean))
        if xs:
            axes[2].errorbar(xs, mean, yerr=[lo, hi], marker="o", capsize=3, color=colours[i % len(colours)],
                             label=f"k={k}")
    axes[0].set(xlabel="context width k (passages)", ylabel="PR@T (portfolio recall)", title="(a) recall by width")
    axes[1].set(xlabel="generations T", ylabel="PR@T (portfolio recall)", title="(b) recall by count")
    axes[2].axhline(0, color="grey", lw=0.8)
    axes[2].set(xlabel="generations T", ylabel="ΔPR@T, rotation - fixed (95% CI)", title="(c) fresh-evidence gain")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if len(ks) > 1:
        axes[0].set_xscale("log", base=2)
        axes[0].set_xticks(ks, [str(k) for k in ks])
    for ax in axes[1:]:
        ax.set_xticks(ts, [str(t) for t in ts])
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return ("Fig. 5 style: deconfounded width-count grid. Solid lines rotate through fresh evidence, dashed lines "
            "resample the same fixed top-k; (c) the paired difference with 95% bootstrap intervals.")


def cost_figure(frame, path: Path) -> str | None:
    """Fig. 6: PR@T against total tokens per query and against sequential generation latency, one line per
    width k across T (rotation solid, fixed dashed). Needs cost columns and two or more grid cells."""
    cells = _arm_cells(frame)
    if sum(len(c) for c in cells.values()) < 2 or frame["tokens"].isna().all():
        return None
    plt = _pyplot()
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ks = sorted({k for arm in cells.values() for k, _ in arm})
    for ax, metric, label in ((axes[0], "tokens", "total tokens per query (prompt + response, log scale)"),
                              (axes[1], "latency", "sequential generation latency per query (s, log scale)")):
        for i, k in enumerate(ks):
            for arm, style in (("rotation", "-"), ("fixed", "--")):
                names = [cells[arm][(kk, t)] for kk, t in sorted(cells[arm]) if kk == k]
                if not names:
                    continue
                xs = [task_weighted_mean(frame, n, metric) for n in names]
                ys = [task_weighted_mean(frame, n, "pr") for n in names]
                ax.plot(xs, ys, style, marker="o", color=colours[i % len(colours)], label=f"k={k} {arm}")
                for n, x, y in zip(names, xs, ys, strict=True):
                    ax.annotate(f"T={int(frame.loc[frame['condition'] == n, 'T'].iloc[0])}", (x, y), fontsize=6,
                                xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set(xlabel=label, ylabel="PR@T (portfolio recall)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_title("(a) tokens")
    axes[1].set_title("(b) latency")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return ("Fig. 6 style: cost versus quality for every grid cell (probe excluded). Solid: rotation; dashed: the "
            "matched fixed-context arm; labels give T. Latency sums each round's share of its generation batch's "
            "wall time, so it reflects this run's batching, not one query served alone.")


def elasticity_figure(table: Table | None, path: Path) -> str | None:
    """Fig. 4: a forest plot of the width elasticities in `table` (from `elasticity_table`)."""
    if table is None or not table.data:
        return None
    plt = _pyplot()
    rows = table.data
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(rows) + 1.5))
    ys = np.arange(len(rows))[::-1]
    means = [r["elasticity_mean"] for r in rows]
    err = [[max(0.0, r["elasticity_mean"] - r["elasticity_lo"]) for r in rows],
           [max(0.0, r["elasticity_hi"] - r["elasticity_mean"]) for r in rows]]
    ax.errorbar(means, ys, xerr=err, fmt="o", capsize=3)
    ax.axvline(0, color="grey", lw=0.8)
    ax.axvline(-0.68, color="tab:red", lw=0.8, ls=":", label="paper, protocol-clean (-0.68)")
    names = {"used_fraction_invariant": "width-invariant tau*", "used_fraction": "run's tau(k)"}
    labels = [f"{r['group']}, {names.get(str(r.get('criterion')), '')}".rstrip(", ") for r in rows]
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlabel("width elasticity d log(used fraction) / d log k (95% CI)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return "Fig. 4 style: width elasticity of the used fraction with 95% cluster-robust intervals."
