"""`ascp calibrate`'s output folder: calibration.json, results.md and the Fig. 4 forest plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ascp.jsonio import json_safe
from ascp.reading import PAPER_FREE_EXPONENT, PAPER_FREE_SCALE
from ascp.stats.format import interval, num, signed
from ascp.validation.calibration import PAPER_ELASTICITY


def _bounds(pair: Any, digits: int = 4) -> str:
    """A stored [lo, hi] pair, written by the one interval formatter."""
    lo, hi = pair
    return interval(lo, hi, digits)


def _covers(interval: tuple[float, float] | list[float], value: float) -> str:
    lo, hi = interval
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "-"
    return "yes" if lo <= value <= hi else "no"


def to_markdown(result: dict[str, Any], command: str) -> str:
    tau = result["width_invariant_threshold"]
    fit = result["free_fit"]
    lines = [
        "# Calibration of the used threshold and the width elasticity (Sec. 4.4, Fig. 4)", "",
        f"Command: `{command}`", "",
        f"Estimator `{result['estimator']}`; {result['cases']} cases; widths {result['widths']}; protocols "
        f"{', '.join(result['protocols'])}; quantile {result['quantile']}; intervals: 95% percentile bootstrap "
        f"over cases ({result['n_boot']} replicates). "
        "Definitions: `ascp.validation.calibration` (docs/calibration.md).", "",
        "## Width-invariant threshold (the tables' ECR)", "",
        "The off-query 95th-percentile operating point of fixed-target contexts, all widths pooled, on raw "
        "scores (nats per response token for loo). The same quantile of normalised scores is shown for "
        "comparison only: normalised scores sum to 1, so a constant cut on them caps the used count at 1/tau.", "",
        "| scale | threshold | 95% CI | off-query padding passages |", "|---|---|---|---|",
        f"| raw (the tables' ECR) | {num(tau['value'], 4)} | {_bounds(tau['interval'])} | "
        f"{tau['n_passages']} |",
    ]
    norm = result.get("width_invariant_normalized")
    if norm:
        lines.append(f"| normalised (comparison) | {num(norm['value'], 4)} | {_bounds(norm['interval'])} | "
                     f"{tau['n_passages']} |")
    lines += ["",
        f"Use it: `ascp report RUN --used-threshold {num(tau['value'], 4)}` or "
        "`--used-threshold path/to/calibration.json`.", "",
        "## Per-width thresholds (off-query padding, same quantile, normalised scores)", "",
        "| protocol | k | threshold | 95% CI |", "|---|---|---|---|",
    ]
    for protocol, by_k in result["per_width"].items():
        for k, v in by_k.items():
            lines.append(f"| {protocol} | {k} | {num(v['value'], 4)} | {_bounds(v['interval'])} |")
    lines += [
        "", "## Free-generation fit tau_free(k) = a k^b", "",
        "| | this run | 95% CI | paper | paper inside CI |", "|---|---|---|---|---|",
        f"| a | {num(fit['a'], 3)} | {interval(*fit['a_interval'])} | {PAPER_FREE_SCALE} | "
        f"{_covers(fit['a_interval'], PAPER_FREE_SCALE)} |",
        f"| b | {num(fit['b'], 3)} | {interval(*fit['b_interval'])} | {PAPER_FREE_EXPONENT} | "
        f"{_covers(fit['b_interval'], PAPER_FREE_EXPONENT)} |",
        "", "## Width elasticity of q by calibration criterion (Fig. 4(a))", "",
        f"Slope of log q on log k, cluster-robust by case (t, G - 1 df); paper: {PAPER_ELASTICITY} (0.02) for "
        "thresholds that do not shrink with width under a fixed target. Contexts with q = 0 are dropped.", "",
        "| padding | criterion | scale | elasticity (se) | 95% CI | used per context | contexts | dropped (q = 0) | "
        "cases |", "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["elasticity"]:
        lines.append(f"| {r['padding']} | {r['label']} | {r.get('scale', 'normalized')} | {signed(r['mean'])} "
                     f"({num(r['se'])}) | "
                     f"{interval(r['lo'], r['hi'])} | {num(r['mean_used'], 2)} | {r['n']} | {r['dropped']} | "
                     f"{r['clusters']} |")
    lines += ["", "## By natural-pool redundancy stratum (Fig. 4(b); width-invariant threshold, fixed target, "
              "same-query padding)", ""]
    if result["strata"]:
        lines += ["| measure | stratum | elasticity (se) | 95% CI | used per context | contexts | cases |",
                  "|---|---|---|---|---|---|---|"]
        for r in result["strata"]:
            lines.append(f"| {r['measure']} | {r['label']} | {signed(r['mean'])} ({num(r['se'])}) | "
                         f"{interval(r['lo'], r['hi'])} | {num(r['mean_used'], 2)} | {r['n']} | {r['clusters']} |")
        if not any(r["measure"] == "entailment" for r in result["strata"]):
            lines += ["", "Pairwise entailment, the paper's third measure, needs an NLI model (`--nli-model`) and "
                      "was not computed."]
    else:
        lines.append("Not computed: pass `--data` (the validated cases' file) for the redundancy measures.")
    return "\n".join(lines) + "\n"


def draw_figure(result: dict[str, Any], path: Path) -> None:
    """Fig. 4: (a) elasticity by criterion, (b) by redundancy stratum, each with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("(a) by calibration criterion", [r for r in result["elasticity"] if r["padding"] == "same-query"])]
    if result["strata"]:
        panels.append(("(b) by redundancy stratum", result["strata"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 3.6), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels, strict=True):
        rows = [r for r in rows if math.isfinite(r["mean"])]
        ys = list(range(len(rows)))[::-1]
        for y, r in zip(ys, rows, strict=True):
            lo, hi = r["lo"], r["hi"]
            ax.errorbar(r["mean"], y, xerr=[[r["mean"] - lo], [hi - r["mean"]]] if math.isfinite(lo) else None,
                        fmt="o", color="#1f4e79", capsize=3)
        ax.axvline(PAPER_ELASTICITY, color="#b22222", ls="--", lw=1, label=f"paper {PAPER_ELASTICITY}")
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_yticks(ys, [r["label"] for r in rows], fontsize=8)
        ax.set(title=title, xlabel="width elasticity of q (95% CI)")
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write_calibration(out: Path, result: dict[str, Any], command: str) -> None:
    """Write calibration.json, results.md and fig4_calibration.png into the (staged) folder `out`."""
    (out / "calibration.json").write_text(json.dumps(json_safe({"command": command, **result}), indent=1)
                                          + "\n", encoding="utf-8")
    (out / "results.md").write_text(to_markdown(result, command), encoding="utf-8")
    draw_figure(result, out / "fig4_calibration.png")
