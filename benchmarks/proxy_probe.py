"""Proxy-model leave-one-out (AttriBoT's proxy trick) against the target model's own exact LOO.

The target is the Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF that `make qwen` assembles, on llama.cpp;
the proxy is the embedded SmolLM2-135M on transformers (about a quarter of the target's
parameters). Contexts are drawn as `benchmarks/fast_probe.py` draws them (ASQA positions 0-122, per
width k the next items whose pool holds k passages, k passages in seeded random order). Per
context the target samples its own response (temperature 0.7, 48 new tokens at most) and exact
`loo` on the target is the reference; the proxy then reads the same question, passages and
response text through its own chat template and tokenizer with exact `loo` (and, with
`--proxy-estimators loo,gated`, its one-pass `gated`, whose gate checks the proxy's decisions,
not the target's). Each probe runs with the prefix store emptied first (each pays its own prompt).

Per k and estimator: agreement of the tau(k) `used` decision with the target's `loo` (passage
decisions, and whole used sets), Spearman correlation of the scores, wall seconds and tokens fed
per probe, and the time relative to the target's `loo`. Tokens are each model's own.

    python benchmarks/proxy_probe.py --out docs/results/fast-probe/proxy [--ks 3,5,10,24] [--contexts 3]
        [--target models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fast_probe import DEFAULT_POOLS, POSITIONS, compare, draw  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARGET = ROOT / "models" / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json and table.md")
    parser.add_argument("--target", type=Path, default=DEFAULT_TARGET, help="the target model's GGUF file "
                        "(default: the one `make qwen` assembles)")
    parser.add_argument("--ks", default="3,5,10,24", help="context widths (default 3,5,10,24)")
    parser.add_argument("--contexts", default="3", help="contexts per width: one number or one per --ks entry")
    parser.add_argument("--proxy-estimators", default="loo,gated", help="what the proxy runs (default loo,gated)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS)
    return parser.parse_args(argv)


def timed_probe(lm: Any, name: str, item: Any) -> dict[str, Any]:
    """One probe with the prefix store emptied first: its scores, seconds and tokens fed."""
    from ascp.attribution import make_estimator
    from ascp.lm.prefixes import fresh_prefixes

    fresh_prefixes(lm)
    began = time.perf_counter()
    scored = make_estimator(name).score(lm, item)
    seconds = time.perf_counter() - began
    return {"scores": [float(v) for v in scored.values], "seconds": seconds,
            "tokens": int(scored.tokens_processed), "extra": dict(getattr(scored, "extra", {}) or {})}


def summarise(rows: Sequence[dict[str, Any]], ks: Sequence[int], names: Sequence[str]) -> list[dict[str, Any]]:

    from ascp.reading import free_threshold

    out = []
    for k in ks:
        at_k = [r for r in rows if r["k"] == k]
        if not at_k:
            continue
        cut = free_threshold(k)
        target_seconds = float(np.mean([r["target_loo"]["seconds"] for r in at_k]))
        for name in names:
            same = whole = 0
            rhos = []
            for r in at_k:
                exact = np.array(r["target_loo"]["scores"])
                mine = np.array(r[name]["scores"])
                equal, rho = compare(mine, exact, cut)
                same += int(equal.sum())
                whole += int(equal.all())
                rhos.append(rho)
            seconds = float(np.mean([r[name]["seconds"] for r in at_k]))
            out.append({"k": k, "estimator": name, "contexts": len(at_k), "used_agreement": same / (k * len(at_k)),
                        "used_set_equal": whole / len(at_k),
                        "spearman": float(np.nanmean(rhos)) if not np.all(np.isnan(rhos)) else float("nan"),
                        "seconds": seconds, "time_vs_target_loo": seconds / target_seconds,
                        "tokens": float(np.mean([r[name]["tokens"] for r in at_k]))})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from ascp.api import load_model
    from ascp.attribution.base import ProbeInput
    from ascp.attribution.probe import sample_responses
    from ascp.data import load_cases_with_order
    from ascp.lm.sampling import SamplingConfig, derive_seed

    args = parse_args(argv)
    if not args.target.is_file():
        raise SystemExit(f"--target: {args.target} does not exist; run `make qwen` to assemble the Qwen GGUF, "
                         "or give another GGUF file.")
    ks = [int(k) for k in args.ks.split(",")]
    per_k = [int(n) for n in args.contexts.split(",")]
    per_k = per_k * len(ks) if len(per_k) == 1 else per_k
    if len(per_k) != len(ks) or min(per_k) < 1:
        raise SystemExit(f"--contexts: expected one count of at least 1, or one per --ks entry, got {args.contexts!r}.")
    proxy_names = [n.strip() for n in args.proxy_estimators.split(",") if n.strip()]
    if not proxy_names or any(n not in ("loo", "gated", "attention") for n in proxy_names):
        raise SystemExit(f"--proxy-estimators: a list of loo, gated, attention, got {args.proxy_estimators!r}.")
    args.out.mkdir(parents=True, exist_ok=True)
    cases, _ = load_cases_with_order(args.pools, format="asqa", rank_by="given", positions=POSITIONS)
    drawn = draw(cases, ks, per_k, args.seed)
    target = load_model(str(args.target), backend="llamacpp")
    proxy = load_model("default", backend="hf")
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens)
    names = ["target_loo", *(f"proxy_{n}" for n in proxy_names)]
    rows: list[dict[str, Any]] = []
    left_out = 0
    started = time.perf_counter()
    for k, position, case, passages in drawn:
        prompt = target.encode_prompt(case.question, passages)
        proxy_prompt = proxy.encode_prompt(case.question, passages)
        try:
            target.check_fits("context", prompt.num_tokens, args.max_new_tokens)
            proxy.check_fits("context", proxy_prompt.num_tokens, args.max_new_tokens)
        except Exception:  # noqa: BLE001  (a prompt past either window is left out, and counted)
            left_out += 1
            continue
        seed = derive_seed(args.seed, f"proxy-probe:{case.id}")
        (text, ids), = sample_responses(target, [prompt], sampling, [seed], batch_size=1)
        proxy_ids = tuple(proxy.encode(text))
        if not ids or not proxy_ids:
            left_out += 1
            continue
        row: dict[str, Any] = {"k": k, "position": position, "case": case.id, "response": text,
                               "target_prompt_tokens": prompt.num_tokens, "target_response_tokens": len(ids),
                               "proxy_prompt_tokens": proxy_prompt.num_tokens, "proxy_response_tokens": len(proxy_ids)}
        row["target_loo"] = timed_probe(target, "loo", ProbeInput(case.question, passages, prompt, text, ids))
        proxy_item = ProbeInput(case.question, passages, proxy_prompt, text, proxy_ids)
        for name in proxy_names:
            row[f"proxy_{name}"] = timed_probe(proxy, name, proxy_item)
        rows.append(row)
        print(f"k={k} position {position}: " + ", ".join(f"{n} {row[n]['seconds']:.1f} s" for n in names), flush=True)
        write(args, ks, per_k, names, rows, left_out, time.perf_counter() - started)
    lines = write(args, ks, per_k, names, rows, left_out, time.perf_counter() - started)
    print("\n".join(lines))
    return 0


def write(args: argparse.Namespace, ks: Sequence[int], per_k: Sequence[int], names: Sequence[str],
          rows: Sequence[dict[str, Any]], left_out: int, seconds: float) -> list[str]:
    """results.json and table.md, after every context (a run cut short keeps what it measured)."""
    summary = summarise(rows, ks, names)
    machine = subprocess.run(["bash", "-c", "lscpu | head -n 15"], capture_output=True, text=True).stdout
    result = {"target": str(args.target), "proxy": "default (SmolLM2-135M-Instruct, transformers)",
              "positions": f"{POSITIONS[0]}-{POSITIONS[1]}", "pools": str(args.pools), "ks": list(ks),
              "contexts_per_k": dict(zip(ks, per_k, strict=True)), "left_out": left_out, "seed": args.seed,
              "max_new_tokens": args.max_new_tokens, "wall_seconds": seconds, "python": platform.python_version(),
              "machine": machine, "load_average_at_end": os.getloadavg(), "summary": summary, "rows": list(rows)}
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["| k | estimator | contexts | used agreement with target loo | used set equal | Spearman | s/probe | "
             "x target loo | tokens/probe |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['k']} | {s['estimator']} | {s['contexts']} | {s['used_agreement']:.3f} | "
                     f"{s['used_set_equal']:.2f} | {s['spearman']:.3f} | {s['seconds']:.1f} | "
                     f"{s['time_vs_target_loo']:.2f} | {s['tokens']:.0f} |")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
