"""The output folder of `ascp validate-probe`: scores, responses, summary, markdown tables, figures.

Files (written into a temporary folder and moved into place only when all are complete):

- `scores.jsonl`    one line per protocol x case x width x padding x estimator x passage:
                    raw `score`, `normalized` a(d), `role`, `answers` (unit ids), `position`;
- `responses.jsonl` one line per protocol x case x width x padding: the scored response, its
                    token count, the prompt's token count and seconds per estimator;
- `summary.json`    the configuration, cases, skips and every number of the tables;
- `results.md`      the tables; `figure-<protocol>.png` Fig. 3 panels a, b, d, e.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ascp.attribution import recorded_facts
from ascp.jsonio import staged_folder
from ascp.render.markdown import markdown_table
from ascp.stats.format import interval, num, pvalue
from ascp.validation.analysis import query_proxies
from ascp.validation.pools import skip_summary

COLORS = {"loo": "#1f77b4", "replace": "#17becf", "contextcite": "#9467bd", "hierarchical": "#2ca02c",
          "bm25": "#d62728", "qd-cosine": "#ff7f0e", "yd-cosine": "#8c564b"}


def _f(x: float, digits: int = 3) -> str:
    return num(x, digits, missing="n/a")


def _ci(r: dict[str, Any], key: str = "mean") -> str:
    return f"{_f(r[key])} {interval(r['lo'], r['hi'], missing='[n/a]')}"


def _p(p: float) -> str:
    return pvalue(p, missing="n/a", floor="<0.001")


def markdown(summary: dict[str, Any]) -> str:
    cfg, metrics = summary["config"], summary["metrics"]
    cc = f"ContextCite ablations {cfg['contextcite_ablations']}, " if "contextcite" in cfg["estimators"] else ""
    lines = [
        "# Probe validation on controlled pools (Sec. 4, Fig. 3)", "",
        f"- data: `{summary['data']}`; model: `{summary['model']}`; cases: {len(summary['cases'])}"
        f"{' (stopped early by --max-minutes)' if summary['stopped_early'] else ''}",
        f"- widths {cfg['widths']}, paddings {cfg['paddings']}, protocols {cfg['protocols']}, m = {cfg['m']}, "
        f"seed {cfg['seed']}, {cc}"
        f"max new tokens {cfg['sampling']['max_new_tokens']}, temperature {cfg['sampling']['temperature']}",
        f"- runtime: {summary['seconds']:.0f} s; intervals: 95% cluster bootstrap over cases "
        f"({summary['n_boot']} replicates)",
        *([f"- command: `{summary['command']}`"] if summary.get("command") else []),
        *([f"- same cases without the time budget: `{summary['reproduce']}`"]
          if summary.get("reproduce") and summary["stopped_early"] else []), "",
        "## Contexts built", "",
    ]
    built = summary["built"]
    rows = [[str(b["width"]), b["padding"], b["protocol"], str(b["contexts"]),
             "; ".join(f"{k}: {v}" for k, v in b["skipped"].items()) or "-"] for b in built]
    lines += markdown_table(["width", "padding", "protocol", "contexts scored", "skipped (reason: cases)"], rows)
    infeasible = [b for b in built if b["contexts"] == 0]
    if infeasible:
        lines += ["", "Not feasible with these cases: " + ", ".join(
            f"width {b['width']} {b['padding']} ({b['protocol']})" for b in infeasible) + "."]
    for protocol in cfg["protocols"]:
        lines += _protocol_tables(protocol, cfg, metrics)
    lines += ["", "## Operating-point transfer (Fig. 3e)", "",
              "tau = 95th percentile of the normalised scores of off-query padding at that width; exceedance = "
              "share of same-query near-misses above tau (nominal 0.05). Only fixed-target rates are false-positive "
              "rates.", ""]
    order = {e: i for i, e in enumerate(cfg["estimators"])}
    ranked = sorted(metrics["transfer"], key=lambda r: (r["protocol"], order.get(r["estimator"], 99), r["width"]))
    rows = [[r["protocol"], r["estimator"], str(r["width"]), _f(r["threshold"], 4), _ci(r, "exceedance"),
             str(r["n_near_misses"])] for r in ranked]
    lines += markdown_table(["protocol", "estimator", "width", "tau", "exceedance [95% CI]", "near-misses"], rows)
    proxies = query_proxies(cfg["estimators"])
    lines += ["", "## Reversal check (Sec. 4.2)", "",
              f"Reversal = under off-query padding both {' and '.join(proxies)} have a higher AUC than LOO, and "
              "under same-query padding LOO has a higher AUC than both. Paired differences are per-case "
              "AUC(LOO) − AUC(proxy), one per proxy in the order above.", ""]
    def diffs(r: dict[str, Any], key: str) -> str:
        return " / ".join(f"{_f(d['mean'], 2)} [{_f(d['lo'], 2)}, {_f(d['hi'], 2)}]" for d in r.get(key, []))

    rows = [[r["protocol"], str(r["width"]), _f(r["loo_off"]), " / ".join(_f(x) for x in r["proxies_off"]),
             _f(r["loo_same"]), " / ".join(_f(x) for x in r["proxies_same"]),
             "yes" if r["reversal"] else "no", diffs(r, "diff_off"), diffs(r, "diff_same"),
             {True: "yes", False: "no"}.get(r.get("reversal_clear"), "n/a")] for r in metrics["reversal"]]
    lines += markdown_table(["protocol", "width", "LOO off", f"{' / '.join(proxies)} off", "LOO same",
                            f"{' / '.join(proxies)} same", "reversal (means)", "LOO − proxy, off [95% CI]",
                            "LOO − proxy, same [95% CI]", "reversal (all CIs exclude 0)"], rows)
    return "\n".join(lines) + "\n"


def _protocol_tables(protocol: str, cfg: dict[str, Any], metrics: dict[str, Any]) -> list[str]:
    aucs = {(r["estimator"], r["width"], r["padding"]): r for r in metrics["auc"] if r["protocol"] == protocol}
    cols = [(w, p) for p in cfg["paddings"] for w in cfg["widths"]]
    lines = ["", f"## AUC of the necessary passages, {protocol} protocol (Fig. 3a-b)", "",
             "Mean within-context AUC over cases [95% CI]; n = cases per column.", ""]
    rows = []
    for est in cfg["estimators"]:
        rows.append([est] + [_ci(aucs[(est, w, p)]) if (est, w, p) in aucs else "n/a" for w, p in cols])
    n_row = ["n"] + [str(next((r["n_cases"] for (e, w2, p2), r in aucs.items() if (w2, p2) == c), 0)) for c in cols]
    lines += markdown_table(["estimator"] + [f"k={w} {p}" for w, p in cols], rows + [n_row])
    cov = {(r["estimator"], r["width"], r["padding"]): r for r in metrics["cover"] if r["protocol"] == protocol}
    lines += ["", f"## cover@m gain over a random ranking, {protocol} protocol (Fig. 3d)", "",
              f"m = {cfg['m']}; gain = cover@m - exact random expectation, mean over contexts [95% CI], p.", ""]
    groups = [("all", "all")] + [("all", p) for p in cfg["paddings"]]
    rows = []
    for est in cfg["estimators"]:
        row = [est]
        for g in groups:
            r = cov.get((est, *g))
            row += [f"{_f(r['cover'])} / {_f(r['random'])}", f"{_f(r['gain'], 3)} [{_f(r['lo'])}, {_f(r['hi'])}]",
                    _p(r["p"])] if r else ["n/a"] * 3
        rows.append(row)
    header = ["estimator"]
    for _, p in groups:
        label = "all conditions" if p == "all" else p
        header += [f"{label}: cover / random", f"{label}: gain", "p"]
    lines += markdown_table(header, rows)
    return lines


def _yerr(rows: Sequence[dict[str, Any]], key: str) -> list[list[float]]:
    """Error-bar lengths below and above (a percentile interval may sit beside its point estimate)."""
    return [[max(0.0, r[key] - r["lo"]) for r in rows], [max(0.0, r["hi"] - r[key]) for r in rows]]


def figure(summary: dict[str, Any], protocol: str, path: Path) -> None:
    """Fig. 3 panels a, b (AUC by width), d (cover@m gain) and e (operating-point transfer)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg, metrics = summary["config"], summary["metrics"]
    fig, grid = plt.subplots(2, 2, figsize=(13, 9.5))
    axes = grid.ravel()
    n_est = len(cfg["estimators"])

    def jitter(i: int, xs: Sequence[float]) -> list[float]:  # side by side on the log axis
        return [x * (1 + 0.02 * (i - (n_est - 1) / 2)) for x in xs]

    def width_axis(ax) -> None:
        ws = cfg["widths"]
        ax.set_xscale("log")
        ax.set_xlim(min(ws) / 1.25, max(ws) * 1.25)
        ax.set_xticks(ws, [str(w) for w in ws])
        ax.minorticks_off()
        ax.set_xlabel("context width k")

    for ax, padding, letter in ((axes[0], "off-query", "a"), (axes[1], "same-query", "b")):
        for i, est in enumerate(cfg["estimators"]):
            rs = sorted((r for r in metrics["auc"] if r["protocol"] == protocol and r["estimator"] == est
                         and r["padding"] == padding and not math.isnan(r["mean"])), key=lambda r: r["width"])
            if rs:
                x = jitter(i, [r["width"] for r in rs])
                y = [r["mean"] for r in rs]
                err = _yerr(rs, "mean")
                ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=COLORS.get(est), label=est,
                            linestyle="-" if _causal(est) else "--")
        ax.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
        ax.set(title=f"({letter}) AUC, {padding} padding", ylabel="AUC of the necessary passages (95% CI)",
               ylim=(0, 1.05))
        width_axis(ax)
    axes[0].legend(fontsize=8, loc="lower left")
    ax = axes[2]
    paddings = cfg["paddings"]
    step = 0.8 / max(1, len(paddings))
    for j, padding in enumerate(paddings):
        cover = {r["estimator"]: r for r in metrics["cover"] if r["protocol"] == protocol
                 and r["width"] == "all" and r["padding"] == padding}
        xs = [i + (j - (len(paddings) - 1) / 2) * step for i, e in enumerate(cfg["estimators"]) if e in cover]
        es = [cover[e] for e in cfg["estimators"] if e in cover]
        ax.bar(xs, [r["gain"] for r in es], width=step * 0.9, label=padding,
               yerr=_yerr(es, "gain"), capsize=3,
               color=[COLORS.get(r["estimator"]) for r in es], alpha=0.55 + 0.45 * (j == 0),
               hatch=None if j == 0 else "//", edgecolor="black", linewidth=0.5)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cfg["estimators"])), cfg["estimators"], rotation=30, fontsize=8)
    ax.set(title=f"(d) cover@{cfg['m']} gain over random", ylabel="gain (95% CI)")
    ax.legend(fontsize=8, title="padding (plain / hatched)", title_fontsize=7)
    ax = axes[3]
    for i, est in enumerate(cfg["estimators"]):
        for prot in cfg["protocols"]:
            rs = sorted((r for r in metrics["transfer"] if r["protocol"] == prot and r["estimator"] == est
                         and not math.isnan(r["exceedance"])), key=lambda r: r["width"])
            if rs:
                ax.errorbar(jitter(i, [r["width"] for r in rs]), [r["exceedance"] for r in rs],
                            yerr=_yerr(rs, "exceedance"),
                            marker="o" if prot == "fixed" else "s", capsize=3, color=COLORS.get(est),
                            linestyle="-" if prot == "fixed" else "--", label=f"{est} ({prot})")
    ax.axhline(0.05, color="grey", linewidth=0.8, linestyle=":")
    ax.set(title="(e) off-query p95 operating point on same-query near-misses",
           ylabel="exceedance rate (95% CI; nominal 0.05 dotted)", ylim=(0, 1.05))
    width_axis(ax)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.suptitle(f"Probe validation, {protocol} protocol (panel e: all protocols run), "
                 f"{len(summary['cases'])} cases, model {summary['model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def built_table(run, config) -> list[dict[str, Any]]:
    """Per width x padding x protocol: contexts scored and skipped cases by reason."""
    out = []
    for width in config.widths:
        for padding in config.paddings:
            for protocol in config.protocols:
                n = sum(1 for c in run.conditions if c["width"] == width and c["padding"] == padding
                        and c["protocol"] == protocol)
                skips = [s for s in run.skips if s.width == width and s.padding == padding
                         and s.protocol in ("", protocol)]
                out.append({"width": width, "padding": padding, "protocol": protocol, "contexts": n,
                            "skipped": skip_summary(skips)})
    return out


def build_summary(run, data: str, model: str, n_boot: int = 2000, command: str | None = None) -> dict[str, Any]:
    """Configuration, cases, skips, the contexts-built table and every Fig. 3 number."""
    from ascp.validation.analysis import summarize

    return {
        "command": command, "data": data, "model": model, "config": run.config.to_json(), "cases": run.cases,
        "stopped_early": run.stopped_early, "seconds": round(run.seconds, 1), "n_boot": n_boot,
        "built": built_table(run, run.config), "skips": [s.to_json() for s in run.skips],
        "metrics": summarize(run.rows, m=run.config.m, n_boot=n_boot, seed=run.config.seed),
    }


def write_outputs(out: Path, run, summary: dict[str, Any]) -> None:
    """Write every output file into `out`, all or nothing."""
    with staged_folder(out) as tmp:
        with (tmp / "scores.jsonl").open("w", encoding="utf-8") as h:
            for r in run.rows:
                h.write(json.dumps(r, ensure_ascii=False) + "\n")
        with (tmp / "responses.jsonl").open("w", encoding="utf-8") as h:
            for r in run.conditions:
                h.write(json.dumps(r, ensure_ascii=False) + "\n")
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        (tmp / "results.md").write_text(markdown(summary), encoding="utf-8")
        for protocol in run.config.protocols:
            figure(summary, protocol, tmp / f"figure-{protocol}.png")


def _causal(estimator: str) -> bool:
    """Causal estimators are drawn solid, relevance proxies dashed."""
    facts = recorded_facts(estimator)
    return facts is not None and facts.causal
