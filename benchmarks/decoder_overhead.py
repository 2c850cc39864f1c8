"""Decoder overhead: wall time per generated token, steered (Eq. 5 + APC) vs ordinary sampling.

The steered decoder runs three conditioned streams, (q,C), (q,C\\O) and (q,O), as rows of one
batch; this measures what that costs per generated token on the embedded model with k = 5
passages per context (the first k passages of each demo case's pool), temperature 0.7,
top-p 1, alpha = 0.5, eta = 0.1. Target: at most 1.6x the ordinary time per token on CPU.

Rows:
- ordinary: one stream per prompt (what an unsteered round runs);
- steered, O inside C: O = the first 2 context passages, so the three streams are distinct
  (5, 3 and 2 passages), as in a static-context round after two passages were flagged;
- steered, O outside C: O = 2 pool passages not in the context (a rotating round), so
  (q,C\\O) = (q,C) shares its row and two rows run.
Each at batch = 1 prompt and batch = all prompts together (how the loop batches cases). Every
mode generates from the same prompts and per-prompt seeds; time per token = wall time of the
whole call (prefill included) / tokens generated; the median over the repeats is reported.

By default the end-of-turn token is ignored, so every call generates exactly max_new_tokens
tokens per prompt and both decoders are compared at the same length (steered responses tend to
be shorter, which would otherwise spread the prefill over fewer tokens and mix response length
into the cost). `--stop-at-eos` measures natural stopping instead.

Usage: python benchmarks/decoder_overhead.py [--model default] [--cases 4] [--max-new-tokens 64] [--repeats 3]
                                             [--stop-at-eos]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop-at-eos", action="store_true", help="Stop at the end-of-turn token (natural lengths).")
    args = parser.parse_args()

    import torch

    from ascp.data import load_cases
    from ascp.lm.hf import HFLanguageModel, SamplingConfig, derive_seed, generate
    from ascp.lm.resolve import load_language_model
    from ascp.lm.steering import SteerConfig, generate_steered, steer_prompts

    lm = load_language_model(args.model, device="cpu", backend="hf")  # measures the transformers loop
    if not args.stop_at_eos:
        pad = lm.pad_token_id

        class FixedLength(HFLanguageModel):
            """The same model with no end-of-turn token: every sample runs to max_new_tokens."""

            eos_token_ids = property(lambda self: set())
            pad_token_id = property(lambda self: pad)

        lm = FixedLength(model=lm.model, tokenizer=lm.tokenizer, name=lm.name)
    demo = Path(__file__).resolve().parents[1] / "src" / "ascp" / "resources" / "demo_cases.jsonl"
    cases = load_cases(demo, format="jsonl")[: args.cases]
    k = args.k
    full = [lm.encode_prompt(c.question, c.pool[:k]) for c in cases]
    inside = [steer_prompts(lm, c.question, c.pool[:k], c.pool[:2]) for c in cases]
    outside = [steer_prompts(lm, c.question, c.pool[:k], c.pool[k : k + 2]) for c in cases]
    seeds = [derive_seed(0, c.id, 2) for c in cases]
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens)
    steer = SteerConfig()
    modes = {
        "ordinary": lambda items, s, b: generate(lm, [p.ids for p in items[0]], sampling, s, b),
        "steered, O inside C": lambda items, s, b: generate_steered(lm, items[1], sampling, s, steer, b),
        "steered, O outside C": lambda items, s, b: generate_steered(lm, items[2], sampling, s, steer, b),
    }
    generate_steered(lm, inside[:1], SamplingConfig(max_new_tokens=4), seeds[:1], steer)  # warm-up

    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads, python {platform.python_version()}")
    mean_tokens = {name: statistics.mean(p.num_tokens for p in ps) for name, ps in (
        ("C", full), ("C\\O", [s.without for s in inside]), ("O", [s.only for s in inside]),
        ("O outside", [s.only for s in outside]))}
    print(f"model {args.model!r}, {len(cases)} demo cases, k = {k}, max_new_tokens = {args.max_new_tokens} "
          f"({'stopping at the end-of-turn token' if args.stop_at_eos else 'fixed length: end-of-turn ignored'}), "
          f"temperature 0.7, top-p 1, alpha 0.5, eta 0.1, median of {args.repeats} repeats")
    print("mean prompt tokens: " + ", ".join(f"{n} {v:.0f}" for n, v in mean_tokens.items()))
    print()
    header = f"{'batch':<8}{'decoder':<24}{'seconds':>9}{'tokens':>8}{'ms/token':>10}{'vs ordinary':>13}"
    print(header)
    print("-" * len(header))
    items = (full, inside, outside)
    layouts = {"1": [[i] for i in range(len(cases))], str(len(cases)): [list(range(len(cases)))]}
    runs: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for _ in range(args.repeats):  # modes interleaved, so drifting machine load hits all of them alike
        for label, batches in layouts.items():
            for name, run in modes.items():
                seconds, tokens = 0.0, 0
                for batch in batches:
                    sub = tuple([group[i] for i in batch] for group in items)
                    start = time.perf_counter()
                    gens = run(sub, [seeds[i] for i in batch], len(batch))
                    seconds += time.perf_counter() - start
                    tokens += sum(len(g.token_ids) for g in gens)
                runs.setdefault((label, name), []).append((seconds, tokens))
    for label in layouts:
        base = None
        for name in modes:
            seconds = statistics.median(t for t, _ in runs[label, name])
            tokens = runs[label, name][0][1]  # the same every repeat (seeded)
            per_token = seconds / max(tokens, 1) * 1e3
            base = base or per_token
            print(f"{label:<8}{name:<24}{seconds:>9.2f}{tokens:>8d}{per_token:>10.1f}{per_token / base:>12.2f}x")

if __name__ == "__main__":
    main()
