"""The probe at one pass, side by side: exact `loo` against `gated`, `attention`, `hierarchical`, `contextcite`.

Contexts come from ASQA positions 0-122 of `../shared/data/asqa/asqa_wikidpr_pools.json` (pools the
attention map's fit never saw: it was fitted on HotpotQA 0-199 and sized on HotpotQA 200-249; not
the held-out frame's positions either). Per width k, the next items in file order whose pool
holds k passages get k passages drawn from the pool in random order (seeded), and the embedded
model's own sampled response (temperature 0.7, 48 new tokens at most). Every estimator then
probes the same (prompt, response) on the transformers backend, in two regimes measured side by
side: `cold`, the prefix store emptied before each estimator (each pays its own prompt; none reuses
another's passes), and `warm`, the store holding only the prompt prefix that sampling the response
left there (as in `ascp run`, where the probe follows generation in the same process).

Per estimator and k: agreement of the tau(k) `used` decision with exact `loo` (share of passage
decisions, and share of contexts whose whole used set is `loo`'s), Spearman correlation of the
scores with `loo`'s (mean over contexts), and wall seconds and tokens fed per probe. The
proxy-model LOO row (AttriBoT's trick: a small model's LOO standing in for a larger one's) needs
another reference, the larger model's own exact LOO: `benchmarks/proxy_probe.py` measures it.

    python benchmarks/fast_probe.py --out docs/results/fast-probe [--ks 3,5,10,24] [--contexts 3]
        [--regimes cold,warm] [--resume]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POOLS = ROOT.parent / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"
POSITIONS = (0, 122)
ESTIMATORS: dict[str, dict[str, Any]] = {
    "loo": {}, "gated": {}, "attention": {}, "hierarchical": {}, "contextcite": {"num_ablations": 32},
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json, table.md, cost.png")
    parser.add_argument("--ks", default="3,5,10,24", help="context widths (default 3,5,10,24)")
    parser.add_argument("--contexts", default="3", help="contexts per width: one number, or one per --ks entry "
                        "(default 3)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS)
    parser.add_argument("--weights", default=None, help="attention map file (default: the shipped one)")
    parser.add_argument("--model", default="default", help="model spec (default: the embedded model)")
    parser.add_argument("--regimes", default="cold,warm", help="cold (store emptied before each estimator), "
                        "warm (store holding the prompt prefix of generation), or both (default)")
    parser.add_argument("--resume", action="store_true", help="keep the contexts OUT/results.json measured whole "
                        "(same seed, length and regimes) and measure only the others")
    parser.add_argument("--estimators", default=",".join(ESTIMATORS),
                        help=f"which to measure, loo among them (default all: {','.join(ESTIMATORS)})")
    parser.add_argument("--contextcite-max-k", type=int, default=24,
                        help="run contextcite only up to this width (its 32 masked passes dominate the run)")
    return parser.parse_args(argv)


def draw(cases: Sequence[Any], ks: Sequence[int], per_k: Sequence[int], seed: int) -> list[tuple[int, int, Any, tuple]]:
    """(k, position, case, passages): each item used once, the next eligible one in file order per k."""
    from ascp.fitprobe.fit import draw_contexts

    out, used = [], set()
    for k, wanted in zip(ks, per_k, strict=True):
        taken = 0
        for position, case in enumerate(cases, start=POSITIONS[0]):
            if taken == wanted:
                break
            if position in used or len(case.pool) < k:
                continue
            (_, _, passages), = draw_contexts([(position, case)], seed, (k,))
            out.append((k, position, case, passages))
            used.add(position)
            taken += 1
    return out


def compare(mine: np.ndarray, reference: np.ndarray, cut: float) -> tuple[np.ndarray, float]:
    """Per passage, whether the tau(k) `used` decision of `mine` equals the reference's; and the
    Spearman correlation of the scores (nan for fewer than 3 passages or constant scores)."""
    from scipy.stats import spearmanr

    from ascp.reading import normalize, used_mask

    equal = used_mask(normalize(mine), cut) == used_mask(normalize(reference), cut)
    varies = len(mine) > 2 and np.ptp(mine) > 0 and np.ptp(reference) > 0
    return equal, float(spearmanr(mine, reference)[0]) if varies else float("nan")


def main(argv: Sequence[str] | None = None) -> int:

    from ascp.api import load_model
    from ascp.attribution import make_estimator
    from ascp.attribution.base import ProbeInput
    from ascp.attribution.probe import sample_responses
    from ascp.data import load_cases_with_order
    from ascp.lm.prefixes import fresh_prefixes
    from ascp.lm.sampling import SamplingConfig, derive_seed
    from ascp.reading import free_threshold

    args = parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    regimes = [g.strip() for g in args.regimes.split(",") if g.strip()]
    if not regimes or any(g not in ("cold", "warm") for g in regimes):
        raise SystemExit(f"--regimes: expected cold, warm or cold,warm, got {args.regimes!r}.")
    args.out.mkdir(parents=True, exist_ok=True)
    cases, _ = load_cases_with_order(args.pools, format="asqa", rank_by="given", positions=POSITIONS)
    per_k = [int(n) for n in args.contexts.split(",")]
    if len(per_k) == 1:
        per_k = per_k * len(ks)
    if len(per_k) != len(ks) or min(per_k) < 1:
        raise SystemExit(f"--contexts: expected one count of at least 1, or one per --ks entry, got {args.contexts!r}.")
    drawn = draw(cases, ks, per_k, args.seed)
    lm = load_model(args.model, backend="hf")
    chosen = [n.strip() for n in args.estimators.split(",") if n.strip()]
    if "loo" not in chosen or any(n not in ESTIMATORS for n in chosen):
        raise SystemExit(f"--estimators: a list of {', '.join(ESTIMATORS)} with loo (the reference), got "
                         f"{args.estimators!r}.")
    estimators = {n: ESTIMATORS[n] for n in chosen}
    if args.weights:
        estimators.update({n: {"weights": args.weights} for n in ("gated", "attention") if n in estimators})
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens)
    prompts = [lm.encode_prompt(case.question, passages) for _, _, case, passages in drawn]
    fits = []
    for prompt in prompts:
        try:
            lm.check_fits("context", prompt.num_tokens, args.max_new_tokens)
            fits.append(True)
        except Exception:  # noqa: BLE001  (a k = 24 prompt past the window is left out, and counted)
            fits.append(False)
    drawn = [d for d, ok in zip(drawn, fits, strict=True) if ok]
    prompts = [p for p, ok in zip(prompts, fits, strict=True) if ok]
    rows: list[dict[str, Any]] = []
    earlier_generation = 0.0
    if args.resume and (args.out / "results.json").is_file():  # contexts measured whole by an earlier run
        earlier = json.loads((args.out / "results.json").read_text())
        settings = (earlier["seed"], earlier["max_new_tokens"], earlier.get("regimes"))
        if settings != (args.seed, args.max_new_tokens, regimes):
            raise SystemExit(f"--resume: {args.out}/results.json was measured with other settings; give another --out.")
        names = [n for n in estimators if n != "contextcite"]
        rows = [r for r in earlier["rows"] if all(n in r["estimators"] for n in names)
                and (r["k"] < max(ks) or "pooling_bytes" in r)]
        done = {(r["k"], r["position"]) for r in rows}
        earlier_generation = float(earlier["generation_seconds"])
        keep = [(k, position) not in done for k, position, _, _ in drawn]
        drawn = [d for d, ok in zip(drawn, keep, strict=True) if ok]
        prompts = [p for p, ok in zip(prompts, keep, strict=True) if ok]
        print(f"--resume: {len(rows)} contexts kept from {args.out}/results.json, {len(drawn)} to measure", flush=True)
    seeds = [derive_seed(args.seed, f"fast-probe:{case.id}") for _, _, case, _ in drawn]
    start = time.perf_counter()
    responses = sample_responses(lm, prompts, sampling, seeds, batch_size=1)  # no padding to the longest
    generation_seconds = earlier_generation + time.perf_counter() - start
    def write(rows: list[dict[str, Any]]) -> tuple[list[str], list[tuple[int, int, int]], tuple[float, ...]]:
        summary = []
        for k in ks:
            at_k = [r for r in rows if r["k"] == k]
            if not at_k:
                continue
            cut = free_threshold(k)
            for name in estimators:
                if any(name not in r["estimators"] or any(g not in r["estimators"][name] for g in regimes)
                       for r in at_k):
                    continue
                same = whole = 0
                rhos, verified = [], []
                for r in at_k:
                    exact = np.array(r["estimators"]["loo"]["scores"])
                    mine = np.array(r["estimators"][name]["scores"])
                    equal, rho = compare(mine, exact, cut)
                    same += int(equal.sum())
                    whole += int(equal.all())
                    rhos.append(rho)
                    verified.append(r["estimators"][name]["extra"].get("verified", np.nan))
                row: dict[str, Any] = {
                    "k": k, "estimator": name, "contexts": len(at_k), "passages": k * len(at_k),
                    "used_agreement": same / (k * len(at_k)), "used_set_equal": whole / len(at_k),
                    "spearman": float(np.nanmean(rhos)) if not np.all(np.isnan(rhos)) else float("nan"),
                    "verified": float(np.nanmean(verified)) if name == "gated" else None,
                }
                for regime in regimes:
                    seconds = float(np.mean([r["estimators"][name][regime]["seconds"] for r in at_k]))
                    loo_seconds = float(np.mean([r["estimators"]["loo"][regime]["seconds"] for r in at_k]))
                    row[regime] = {"seconds": seconds, "time_vs_loo": seconds / loo_seconds,
                                   "tokens": float(np.mean([r["estimators"][name][regime]["tokens"] for r in at_k]))}
                summary.append(row)
        memory = [(r["prompt_tokens"], r["pooling_bytes"], r["eager_weights_bytes"])
                  for r in rows if "pooling_bytes" in r]
        machine = subprocess.run(["bash", "-c", "lscpu | head -n 15"], capture_output=True, text=True).stdout
        load = os.getloadavg()
        result = {"positions": f"{POSITIONS[0]}-{POSITIONS[1]}", "pools": str(args.pools), "ks": ks,
                  "contexts_per_k": dict(zip(ks, per_k, strict=True)), "regimes": regimes,
                  "contextcite_max_k": args.contextcite_max_k,
                  "left_out_past_window": int(len(fits) - sum(fits)),
                  "seed": args.seed, "max_new_tokens": args.max_new_tokens, "generation_seconds": generation_seconds,
                  "estimator_options": estimators,
                  "python": platform.python_version(), "machine": machine, "load_average_at_end": load,
                  "memory_at_largest_k": [{"prompt_tokens": t, "pooling_bytes": p, "eager_weights_bytes": e}
                                          for t, p, e in memory],
                  "summary": summary, "rows": rows}
        (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
        head = "".join(f" {g} s/probe | {g} x loo | {g} tokens |" for g in regimes)
        lines = ["| k | estimator | contexts | used agreement | used set equal | Spearman |" + head
                 + " verified/probe |",
                 "|---|---|---|---|---|---|" + "---|---|---|" * len(regimes) + "---|"]
        for line in summary:
            checked = "" if line["verified"] is None else f"{line['verified']:.1f}"
            cost = "".join(f" {line[g]['seconds']:.1f} | {line[g]['time_vs_loo']:.2f} | {line[g]['tokens']:.0f} |"
                           for g in regimes)
            lines.append(f"| {line['k']} | {line['estimator']} | {line['contexts']} | {line['used_agreement']:.3f} | "
                         f"{line['used_set_equal']:.2f} | {line['spearman']:.3f} |{cost} {checked} |")
        (args.out / "table.md").write_text("\n".join(lines) + "\n")
        plot(summary, regimes, args.out / "cost.png")
        return lines, memory, load

    for index, ((k, position, case, passages), prompt, (text, ids)) in enumerate(
            zip(drawn, prompts, responses, strict=True)):
        if not ids:
            continue
        item = ProbeInput(case.question, passages, prompt, text, ids)
        record: dict[str, Any] = {"k": k, "position": position, "case": case.id, "prompt_tokens": prompt.num_tokens,
                                  "response_tokens": len(ids), "estimators": {}}
        rows.append(record)
        warm_entry = None
        if "warm" in regimes:  # what sampling the response leaves in the store: the prompt's prefix
            fresh_prefixes(lm)
            again = sample_responses(lm, [prompt], sampling, [seeds[index]], batch_size=1)
            assert again[0][1] == ids, "resampling with the same seed gave another response"
            warm_entry = lm.prefixes.get(tuple(prompt.ids)) if lm.prefixes is not None else None
        for name, options in estimators.items():
            if name == "contextcite" and k > args.contextcite_max_k:
                continue
            estimator = make_estimator(name, **options)
            measured: dict[str, Any] = {}
            for regime in regimes:
                fresh_prefixes(lm)
                if regime == "warm" and warm_entry is not None and lm.prefixes is not None:
                    lm.prefixes.put(tuple(prompt.ids), warm_entry)
                began = time.perf_counter()
                scored = estimator.score(lm, item)
                seconds = time.perf_counter() - began
                values = [float(v) for v in scored.values]
                if "scores" not in measured:
                    measured.update(scores=values, extra=dict(getattr(scored, "extra", {}) or {}))
                else:  # the regimes differ in what is stored, never in the reading
                    measured["regime_max_abs_difference"] = float(np.max(np.abs(np.subtract(values,
                                                                                             measured["scores"]))))
                measured[regime] = {"seconds": seconds, "tokens": int(scored.tokens_processed)}
            record["estimators"][name] = measured
            write(rows)  # after every probe, so a run cut short keeps what it measured
        if k == max(ks):  # memory of the pooling, untimed: its largest working set against eager's weights
            from ascp.attribution.attention import attention_model

            fresh_prefixes(lm)
            read = attention_model(lm, "attention").read_attention(prompt, ids)
            config = lm.model.config
            total = prompt.num_tokens + len(ids) - 1
            record["pooling_bytes"] = read.pooling_bytes
            record["eager_weights_bytes"] = 4 * config.num_hidden_layers * config.num_attention_heads * total * total
        write(rows)
        print(f"k={k} position {position}: " + ", ".join(
            f"{n} " + "/".join(f"{r[g]['seconds']:.1f}" for g in regimes) + " s"
            for n, r in record["estimators"].items()), flush=True)
    lines, memory, load = write(rows)
    print("\n".join(lines))
    for t, p, e in memory:
        print(f"k={max(ks)} prompt of {t} tokens: pooling working set {p / 2**20:.1f} MiB; eager attention weights "
              f"{e / 2**30:.1f} GiB")
    print(f"load average at the end: {load}")
    return 0


def plot(summary: Sequence[dict[str, Any]], regimes: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(regimes), figsize=(6.5 * len(regimes) + 2, 4.5), sharey=True, squeeze=False)
    markers = {3: "o", 5: "s", 10: "^", 24: "D"}
    colors = {"loo": "black", "gated": "tab:red", "attention": "tab:orange", "hierarchical": "tab:blue",
              "contextcite": "tab:green"}
    for ax, regime in zip(axes[0], regimes, strict=True):
        for s in summary:
            ax.scatter(s[regime]["time_vs_loo"], s["used_agreement"], marker=markers.get(s["k"], "x"),
                       color=colors.get(s["estimator"], "gray"), s=50)
        ax.set_xscale("log")
        ax.set_xlabel(f"probe time relative to exact loo, {regime} store (log scale)")
        ax.grid(alpha=0.3)
        ax.set_title(f"{regime}: " + ("store emptied before each probe" if regime == "cold"
                                      else "prompt prefix of generation stored"), fontsize=10)
    ax = axes[0][-1]
    for name, color in colors.items():
        if any(s["estimator"] == name for s in summary):
            ax.scatter([], [], color=color, label=name)
    for k, marker in markers.items():
        if any(s["k"] == k for s in summary):
            ax.scatter([], [], color="gray", marker=marker, label=f"k = {k}")
    axes[0][0].set_ylabel("agreement of used with exact loo (passage decisions)")
    fig.suptitle("Cost against agreement, ASQA positions 0-122, embedded SmolLM2-135M")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
