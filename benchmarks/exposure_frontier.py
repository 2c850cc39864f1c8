"""The offered-passages / evidence-ceiling frontier of every policy under several consumers (issue 27).

Runs `ascp simulate` once per (consumer, T) with `ascp` (Eq. 6) as the baseline of the paired
bootstrap, then writes, into --results:

- `frontier.json`: per consumer and T, every policy's mean offered / ceiling / used_ceiling and its
  paired difference from Eq. 6 (95% percentile interval over cases), the `ascp-exposure` curve over
  its `prior`, and the goal checks (Pareto frontier, above Eq. 6, within 0.01 of Eq. 6);
- `comparison-<consumer>-T<T>.json`: the `comparison.json` of each simulation;
- `frontier.png` (evidence ceiling against offered passages) and `frontier-used.png` (used ceiling);
- `tables.md`: the tables printed from `frontier.json`, also put between the `<!-- tables -->` and
  `<!-- /tables -->` markers of --page when it has them.

    ASCP_HOME=/tmp/ascp-home-sim .venv/bin/python benchmarks/exposure_frontier.py \\
        --work /tmp/exposure-frontier --results docs/results/exposure-frontier \\
        --page docs/results/exposure-frontier.md

`--from-json` redraws the plots, tables and page from an existing `frontier.json` (no simulation).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DATA = "../shared/data/asqa/asqa_wikidpr_pools.json"
BASELINE = "ascp"
OTHERS = ("vanilla", "rotate", "mmr", "xquad", "pm2", "dpp", "carriage", "ascp-uniform", "ascp-nofeedback",
          "ascp-modular", "ascp-pin1", "ascp-pin2")
NEW = "ascp-exposure"
PRIORS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the curve; prior = 0.75 is the registered default
REPLAY = ("replay(run=docs/results/cpu-small,condition=rotate(k=5,T=5,arm=rotation,estimator=loo,"
          "instruction=commit))")
FIT = "fit(run=docs/results/cpu-small,estimator=loo)"


def curve_name(prior: float) -> str:
    return NEW if prior == 0.75 else f"{NEW}(prior={prior:g})"


def consumers() -> list[dict[str, Any]]:
    """(label, spec, filters, rounds) of every simulation."""
    out: list[dict[str, Any]] = [{"label": f"toy(q={q:g})", "spec": f"toy(q={q:g})", "filters": ["--min-pool", "15"],
                                  "T": (5, 10)} for q in (0.2, 0.5, 0.8)]
    out.append({"label": "oracle", "spec": "oracle", "filters": ["--min-pool", "15"], "T": (5, 10)})
    # the committed run covers 10 queries (pools of >= 24 passages) and 5 rounds: replay is T = 5 on them
    out.append({"label": "replay", "spec": REPLAY, "filters": ["--min-pool", "24", "--limit", "10"], "T": (5,)})
    out.append({"label": "fit", "spec": FIT, "filters": ["--min-pool", "15"], "T": (5, 10)})
    return out


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "", label.replace("=", ""))


def run_simulations(args: argparse.Namespace) -> list[dict[str, Any]]:
    policies = ",".join([BASELINE, *OTHERS, *(curve_name(p) for p in PRIORS)])
    done = []
    Path(args.work).mkdir(parents=True, exist_ok=True)
    for c in consumers():
        for T in c["T"]:
            out = Path(args.work) / f"{slug(c['label'])}-T{T}"
            cmd = [args.ascp, "simulate", "--data", args.data, *c["filters"], "--policy", policies, "--k", str(args.k),
                   "--T", str(T), "--consumer", c["spec"], "--n-boot", str(args.n_boot), "--out", str(out),
                   "--overwrite"]
            start = time.perf_counter()
            if not args.reuse or not (out / "comparison.json").is_file():
                print("+", " ".join(cmd), file=sys.stderr, flush=True)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - start
            done.append({"label": c["label"], "T": T, "spec": c["spec"], "folder": out, "wall_s": round(wall, 1),
                         "command": cmd})
    return done


def dominated_by(point: dict[str, float], others: dict[str, dict[str, float]], metric: str) -> list[str]:
    """Policies that reach a higher `metric` with no more passages offered."""
    return [name for name, o in others.items()
            if o["offered"] <= point["offered"] + 1e-9 and o[metric] > point[metric] + 1e-9]


def summarise(done: list[dict[str, Any]], results: Path) -> dict[str, Any]:
    cells = []
    for d in done:
        comparison = json.loads((d["folder"] / "comparison.json").read_text())
        name = f"comparison-{slug(d['label'])}-T{d['T']}.json"
        shutil.copyfile(d["folder"] / "comparison.json", results / name)
        table = comparison["policies"]
        rows = {}
        for policy, row in table.items():
            entry = {m: row[m] for m in ("offered", "used", "ecr", "ceiling", "used_ceiling")}
            for m in ("offered", "ceiling", "used_ceiling"):
                vs = row.get(f"{m}_vs_{BASELINE}")
                if vs:
                    entry[f"{m}_vs_eq6"] = {key: vs[key] for key in ("mean", "lo", "hi")}
            rows[policy] = entry
        others = {p: r for p, r in rows.items() if not p.startswith(NEW)}
        curve = {curve_name(p): rows[curve_name(p)] for p in PRIORS}
        new = rows[NEW]
        goals: dict[str, Any] = {}
        for metric in ("ceiling", "used_ceiling"):
            goals[f"pareto_{metric}"] = {p: dominated_by(r, others, metric) for p, r in curve.items()}
        diff = new["ceiling_vs_eq6"]
        goals["ceiling_vs_eq6"] = diff
        goals["strictly_above_eq6"] = diff["lo"] > 0
        goals["within_0.01_of_eq6"] = diff["mean"] >= -0.01
        cells.append({"consumer": d["label"], "spec": d["spec"], "T": d["T"], "k": comparison["config"]["k"],
                      "cases": comparison["config"]["cases"], "n_boot": comparison["config"]["n_boot"],
                      "wall_s": d["wall_s"], "comparison": name, "policies": rows, "goals": goals,
                      "independence": comparison.get("independence")})
    return {"baseline": BASELINE, "new": NEW, "priors": list(PRIORS), "cells": cells}


def fmt(entry: dict[str, Any], metric: str) -> str:
    value = f"{entry[metric]:.3f}"
    vs = entry.get(f"{metric}_vs_eq6")
    return value if vs is None else f"{value} ({vs['mean']:+.3f} [{vs['lo']:+.3f}, {vs['hi']:+.3f}])"


def tables(summary: dict[str, Any]) -> str:
    lines = []
    goal_rows = []
    for cell in summary["cells"]:
        lines.append(f"\n#### {cell['consumer']}, k = {cell['k']}, T = {cell['T']} ({cell['cases']} cases; "
                     f"differences: policy - ascp (Eq. 6), 95% paired bootstrap, {cell['n_boot']} replicates; "
                     f"{cell['wall_s']:.0f} s)\n")
        lines.append("| policy | offered | ceiling | used ceiling | dominated on ceiling by |")
        lines.append("|---|---|---|---|---|")
        pareto = cell["goals"]["pareto_ceiling"]
        for policy, entry in cell["policies"].items():
            dom = ", ".join(pareto[policy]) if policy in pareto and pareto[policy] else ("none" if policy in pareto
                                                                                         else "")
            lines.append(f"| {policy} | {fmt(entry, 'offered')} | {fmt(entry, 'ceiling')} | "
                         f"{fmt(entry, 'used_ceiling')} | {dom} |")
        g = cell["goals"]
        d = g["ceiling_vs_eq6"]
        front = "yes" if not g["pareto_ceiling"][NEW] else "no (" + ", ".join(g["pareto_ceiling"][NEW]) + ")"
        front_used = "yes" if not g["pareto_used_ceiling"][NEW] else \
            "no (" + ", ".join(g["pareto_used_ceiling"][NEW]) + ")"
        du = cell["policies"][NEW]["used_ceiling_vs_eq6"]
        goal_rows.append(f"| {cell['consumer']} | {cell['T']} | {front} | {front_used} | "
                         f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] | "
                         f"{du['mean']:+.3f} [{du['lo']:+.3f}, {du['hi']:+.3f}] | "
                         f"{'yes' if g['strictly_above_eq6'] else 'no'} | "
                         f"{'yes' if g['within_0.01_of_eq6'] else 'no'} |")
    head = ["| consumer | T | ascp-exposure on the ceiling frontier | on the used-ceiling frontier | "
            "ceiling - Eq. 6 [95%] | used ceiling - Eq. 6 [95%] | ceiling interval above 0 | ceiling mean >= -0.01 |",
            "|---|---|---|---|---|---|---|---|"]
    return ("### Goal checks (ascp-exposure, prior = 0.75)\n\n" + "\n".join(head + goal_rows)
            + "\n\n### All policies\n" + "\n".join(lines) + "\n")


def staircase(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The Pareto frontier (most ceiling for at most x offered) of `points`, as a step line."""
    xs, ys, best = [], [], -1.0
    for x, y in sorted(points):
        if y > best:
            if xs:
                xs.append(x)
                ys.append(best)
            xs.append(x)
            ys.append(y)
            best = y
    return xs, ys


def plot(summary: dict[str, Any], metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = summary["cells"]
    labels = list(dict.fromkeys(c["consumer"] for c in cells))
    Ts = sorted({c["T"] for c in cells})
    fig, axes = plt.subplots(len(labels), len(Ts), figsize=(7.0 * len(Ts), 4.6 * len(labels)), squeeze=False)
    for i, label in enumerate(labels):
        for j, T in enumerate(Ts):
            ax = axes[i][j]
            cell = next((c for c in cells if c["consumer"] == label and c["T"] == T), None)
            if cell is None:
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"{label}: no T = {T}\n(the replayed run has 5 rounds)", ha="center", va="center",
                        transform=ax.transAxes)
                continue
            rows = cell["policies"]
            others = {n: r for n, r in rows.items() if not n.startswith(NEW)}
            fx, fy = staircase([(r["offered"], r[metric]) for r in others.values()])
            ax.plot(fx, fy, "--", color="0.6", lw=1, zorder=2, label="frontier of the other policies")
            for name, r in others.items():
                color = "tab:red" if name == BASELINE else "0.3"
                ax.scatter(r["offered"], r[metric], color=color, s=22, zorder=3)
                ax.annotate("ascp (Eq. 6)" if name == BASELINE else name, (r["offered"], r[metric]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points", color=color)
            xs = [rows[curve_name(p)]["offered"] for p in summary["priors"]]
            ys = [rows[curve_name(p)][metric] for p in summary["priors"]]
            ax.plot(xs, ys, "-o", color="tab:blue", ms=4, zorder=4, label="ascp-exposure, prior 0 .. 1")
            ax.scatter(rows[NEW]["offered"], rows[NEW][metric], marker="*", s=140, color="tab:blue", zorder=5,
                       label="ascp-exposure (default, prior 0.75)")
            for p, x, y in zip(summary["priors"], xs, ys, strict=True):
                ax.annotate(f"{p:g}", (x, y), fontsize=7, xytext=(-6, -11), textcoords="offset points",
                            color="tab:blue")
            ax.set_title(f"{label}, T = {T} ({cell['cases']} cases)", fontsize=10)
            ax.set_xlabel("offered passages per case")
            ax.set_ylabel("evidence ceiling" if metric == "ceiling" else "used ceiling")
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{'Evidence' if metric == 'ceiling' else 'Used'} ceiling against offered passages, k = 5\n"
                 "(ASQA shared pools, MiniLM dense ranking; means over cases)", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.975))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/exposure-frontier", help="folder for the simulations' run folders")
    parser.add_argument("--results", default="docs/results/exposure-frontier")
    parser.add_argument("--page", default="", help="markdown page whose <!-- tables --> block is replaced")
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--n-boot", type=int, default=10000)
    parser.add_argument("--ascp", default=str(Path(sys.executable).with_name("ascp")))
    parser.add_argument("--reuse", action="store_true", help="keep simulations already in --work")
    parser.add_argument("--from-json", action="store_true",
                        help="only redraw the plots, tables and page from --results/frontier.json")
    args = parser.parse_args()
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        summary = json.loads((results / "frontier.json").read_text())
    else:
        start = time.perf_counter()
        done = run_simulations(args)
        summary = summarise(done, results)
        summary["wall_s"] = round(time.perf_counter() - start, 1)
        summary["commands"] = [" ".join(d["command"]) for d in done]
        (results / "frontier.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(summary, "ceiling", results / "frontier.png")
    plot(summary, "used_ceiling", results / "frontier-used.png")
    text = tables(summary)
    (results / "tables.md").write_text(text)
    if args.page and Path(args.page).is_file():
        page = Path(args.page).read_text()
        new = re.sub(r"(<!-- tables -->\n).*?(<!-- /tables -->)", lambda m: m.group(1) + text + m.group(2), page,
                     flags=re.S)
        Path(args.page).write_text(new)
    print(text)
    print(f"# total wall {summary['wall_s']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
