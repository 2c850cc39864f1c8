"""Backends side by side: fp32 transformers (`hf`, the reference) and llama.cpp (`llamacpp`), one run.

What is measured, on the embedded default model (SmolLM2-135M-Instruct; its GGUF is 4-bit Q4_1)
and real ASQA items from `../shared/data/asqa/asqa_wikidpr_pools.json` (file order, the first k
docs of each item as the context), through the model seam only (`generate`, `score`), so every
number is what the probe and the loop get:

* prefill tok/s: one teacher-forced pass over a k = 10 prompt (`score` of a 1-token response,
  no reuse): prompt tokens / seconds.
* gen tok/s B=1 and B=8: sampled tokens / wall seconds of `generate` (temperature 0.7,
  `--gen-tokens` new tokens at most), 1 prompt and 8 prompts (question + first passage, about
  250 tokens each), prefill included: what a portfolio round costs.
* decode tok/s B=1 and B=8: the decoding steps alone: (tokens - rows) / (seconds of that call -
  seconds of the same call with 1 new token).
* loo s/request at each k: `LeaveOneOut()` on a fixed response (sampled once by the reference,
  then scored by both backends token for token).
Rows: `hf` (fp32 transformers), `llamacpp` (the backend's default: an f16 copy of the GGUF's
weights), `llamacpp-file` (the GGUF's own 4-bit weights, `weights="model"`).

* agreement with the reference, per k: Spearman correlation of the k loo scores (mean over
  requests), share of requests whose `used` set (normalised scores at tau(k)) is identical, and
  mean |log-prob difference| per response token of the full prompt.

    python benchmarks/backends.py [--requests 5] [--ks 5,10] [--gen-tokens 64]
"""

from __future__ import annotations

import argparse
import os
import platform
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
from probe_speed import DEFAULT_POOLS, load_requests  # noqa: E402

BACKENDS = ("hf", "llamacpp", "llamacpp-file")  # llamacpp: f16 copy (the default); -file: the GGUF's own weights


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5, help="ASQA items per k (default 5)")
    parser.add_argument("--ks", default="5,10", help="comma-separated context sizes (default 5,10)")
    parser.add_argument("--gen-tokens", type=int, default=64, help="new tokens per generation (default 64)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="length cap of the fixed responses")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS, help="ASQA pools JSON")
    return parser.parse_args(argv)


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.pools.is_file():
        print(f"ASQA pools {args.pools} not found; pass --pools.", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.ks.split(",") if k.strip()]

    import torch
    from scipy.stats import spearmanr

    from ascp.attribution.base import read_scores
    from ascp.attribution.loo import LeaveOneOut
    from ascp.attribution.probe import ProbeConfig, prepare_inputs
    from ascp.errors import AscpError
    from ascp.lm.llamacpp import load_llamacpp_model
    from ascp.lm.resolve import embedded_gguf, load_language_model
    from ascp.lm.sampling import SamplingConfig

    try:
        models = {name: load_language_model("default", device="cpu", backend=name) for name in BACKENDS[:2]}
        models["llamacpp-file"] = load_llamacpp_model(embedded_gguf(), "default", weights="model")
    except AscpError as exc:
        print(f"Cannot load both backends: {exc}", file=sys.stderr)
        return 2
    import llama_cpp

    print(f"# backends: embedded default model; {platform.processor() or platform.machine()}, nproc={os.cpu_count()}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), llama-cpp-python {llama_cpp.__version__}, "
          f"python {platform.python_version()}; loadavg(1m) at start={os.getloadavg()[0]:.2f}", flush=True)
    print(f"# data={args.pools} requests/k={args.requests} ks={ks} gen_tokens={args.gen_tokens} seed={args.seed}",
          flush=True)
    ref = models["hf"]
    rows: dict[str, dict[str, str]] = {name: {} for name in BACKENDS}

    # Prefill: one pass over a k = 10 prompt.
    probe_config = ProbeConfig(sampling=SamplingConfig(temperature=0.7, max_new_tokens=args.max_new_tokens),
                               seed=args.seed)
    long_request = load_requests(args.pools, 1, 10)[0]
    for name, lm in models.items():
        prompt = lm.encode_prompt(long_request.question, long_request.passages)
        lm.score([prompt.ids], [prompt.ids[-1]], reuse_prefix=False)  # warm-up
        _, seconds = timed(lm.score, [prompt.ids], [prompt.ids[-1]], reuse_prefix=False)
        rows[name]["prefill tok/s"] = f"{prompt.num_tokens / seconds:.0f}"

    # Generation: 1 and 8 prompts of about 200 tokens.
    short = load_requests(args.pools, 8, 1)
    gen_config = SamplingConfig(temperature=0.7, max_new_tokens=args.gen_tokens)
    for name, lm in models.items():
        prompts = [lm.encode_prompt(r.question, r.passages).ids for r in short]
        for size, batch in ((1, prompts[:1]), (8, prompts)):
            seeds = [args.seed + i for i in range(len(batch))]
            _, first = timed(lm.generate, batch, SamplingConfig(temperature=0.7, max_new_tokens=1), seeds,
                             batch_size=size)
            out, seconds = timed(lm.generate, batch, gen_config, seeds, batch_size=size)
            tokens = sum(len(g.token_ids) + (1 if g.finished else 0) for g in out)
            rows[name][f"gen tok/s B={size}"] = f"{tokens / seconds:.1f}"
            rows[name][f"decode tok/s B={size}"] = f"{(tokens - size) / max(seconds - first, 1e-9):.1f}"

    # loo per k, on fixed responses sampled by the reference.
    estimator = LeaveOneOut()
    agreement: dict[int, dict[str, dict[str, list]]] = {}
    for k in ks:
        requests = load_requests(args.pools, args.requests, k)
        items = {"hf": prepare_inputs(ref, requests, probe_config)}
        fixed = [r.__class__(id=r.id, question=r.question, passages=r.passages, response=item.response_text)
                 for r, item in zip(requests, items["hf"], strict=True)]
        for name in BACKENDS[1:]:
            items[name] = prepare_inputs(models[name], fixed, probe_config)
            for a, b in zip(items["hf"], items[name], strict=True):
                assert a.prompt.ids == b.prompt.ids and a.response_ids == b.response_ids, "tokenized differently"
        seconds: dict[str, list[float]] = {name: [] for name in BACKENDS}
        readings: dict[str, list[Any]] = {name: [] for name in BACKENDS}
        full_diff: list[dict[str, float]] = []
        for i in range(len(requests)):
            outs = {}
            for name, lm in models.items():
                item = items[name][i]
                out, sec = timed(estimator.score, lm, item)
                seconds[name].append(sec)
                outs[name] = out
                readings[name].append(read_scores(item.prompt.passage_ids, out.values))
            full_diff.append({n: float(np.mean(np.abs(outs["hf"].full_logprobs - outs[n].full_logprobs)))
                              for n in BACKENDS[1:]})
            print(f"k={k} id={requests[i].id} prompt={items['hf'][i].prompt.num_tokens} tok "
                  f"response={len(items['hf'][i].response_ids)} tok  "
                  + "  ".join(f"{n}={seconds[n][-1]:.2f}s" for n in BACKENDS), flush=True)
        for name in BACKENDS:
            rows[name][f"loo s/req k={k}"] = f"{np.mean(seconds[name]):.2f}"
        for name in BACKENDS[1:]:
            rhos = [spearmanr(list(a.scores.values()), list(b.scores.values())).statistic
                    for a, b in zip(readings["hf"], readings[name], strict=True)]
            same = [set(a.used) == set(b.used) for a, b in zip(readings["hf"], readings[name], strict=True)]
            agreement.setdefault(k, {})[name] = {"spearman": rhos, "same_used": same,
                                                 "full_diff": [d[name] for d in full_diff]}

    columns = ["prefill tok/s", "gen tok/s B=1", "gen tok/s B=8", "decode tok/s B=1", "decode tok/s B=8",
               *[f"loo s/req k={k}" for k in ks]]
    print()
    print("backend        " + "  ".join(c.rjust(16) for c in columns))
    for name in BACKENDS:
        print(f"{name:<14} " + "  ".join(rows[name][c].rjust(16) for c in columns))
    for name in BACKENDS[1:]:
        ratios = []
        for c in columns:
            a, b = float(rows["hf"][c]), float(rows[name][c])
            ratios.append(f"{(a / b if c.startswith('loo') else b / a):.2f}x")
        print(f"{'x ' + name:<14} " + "  ".join(r.rjust(16) for r in ratios))
    print("(x NAME: NAME over hf; for loo, hf seconds / NAME seconds)")
    print()
    print("agreement with fp32 transformers:")
    for k in ks:
        for name in BACKENDS[1:]:
            a = agreement[k][name]
            print(f"  k={k} {name}: Spearman of loo scores mean {np.nanmean(a['spearman']):.3f} "
                  f"(min {np.nanmin(a['spearman']):.3f}); identical used sets {sum(a['same_used'])}/"
                  f"{len(a['same_used'])}; mean |dlogprob| of the full prompt {np.mean(a['full_diff']):.4f} nats/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
