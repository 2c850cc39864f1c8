"""The probe's prompts as rows of one forward pass against one prompt at a time, on a GPU, side by side.

For a machine with CUDA. Builds random-weight models from configs of about 1B (Llama 3.2 1B's shape)
and 7B parameters (Qwen2 7B's shape) on the device (no weights travel), then scores exact
leave-one-out on synthetic prompts (a 60-token head, k passages of equal length, a 20-token tail;
token ids drawn at random) two ways through `HFLanguageModel.score`:

* sequential: `variant_rows=0`, the k + 1 prompts one after another through one cropped KV cache
  (`ascp.lm.scoring`, the CPU path);
* batched: `variant_rows=R`, the prompts as rows of one pass (`ascp.lm.batched`);

and, with the prefix store, `--responses` responses probed against one context in a row (the
second and later start from each variant's stored prompt). Per cell: tokens fed (deterministic,
equal by construction), seconds per probe (median of `--repeats` after one warm-up), the speed-up,
the largest difference between the two paths' per-token log-probabilities, and peak GPU memory.
float32 (TF32 off) checks exactness; bfloat16 is the speed people run.

    python benchmarks/gpu.py [--sizes 1b,7b] [--dtypes bfloat16,float32] [--k 8,24] [--out FILE]
    python benchmarks/gpu.py --smoke   # a tiny config on the CPU: checks the script, measures nothing

Random weights give near-uniform distributions; the timings depend on shapes only, and the
exactness check compares two computations of the same numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runs from a checkout without installing ascp

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny": ("llama", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=512)),
    "1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True)),
    "7b": ("qwen2", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                         num_key_value_heads=4, vocab_size=152064)),
}


def build_model(size: str, dtype: Any, device: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from ascp.lm.hf import HFLanguageModel
    from ascp.lm.tiny import build_tokenizer

    family, shape = CONFIGS[size]
    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
    config_class, model_class = classes[family]
    config = config_class(**shape, max_position_embeddings=8192, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = model_class(config).to(dtype)
    return HFLanguageModel(model, build_tokenizer(), f"random-{size}")


def loo_prompts(rng: Any, vocab: int, k: int, prompt_tokens: int) -> list[tuple[int, ...]]:
    def draw(n: int) -> list[int]:
        return [int(t) for t in rng.integers(10, vocab, size=n)]

    head, tail = draw(60), draw(20)
    blocks = [draw(max(1, (prompt_tokens - 80) // k)) for _ in range(k)]
    full = tuple(head + [t for b in blocks for t in b] + tail)
    variants = [tuple(head + [t for j, b in enumerate(blocks) if j != i for t in b] + tail) for i in range(k)]
    return [full, *variants]


def timed(lm: Any, prompts: list, responses: list, repeats: int, sync: Any) -> tuple[float, int, list]:
    """Median seconds per probe over `repeats` (after one warm-up), tokens fed per pass of all
    responses, and the log-probabilities of the last repeat."""
    import dataclasses

    from ascp.lm.prefixes import PrefixStore

    seconds, fed, out = [], 0, []
    for repeat in range(repeats + 1):
        store = PrefixStore(2**36) if len(responses) > 1 else None
        run = dataclasses.replace(lm, prefixes=store)
        sync()
        start = time.perf_counter()
        results = [run.score(prompts, r) for r in responses]
        sync()
        if repeat:
            seconds.append((time.perf_counter() - start) / len(responses))
        fed, out = sum(r.tokens_processed for r in results), [r.logprobs for r in results]
    return statistics.median(seconds), fed, out


def main(argv: list[str] | None = None) -> int:
    import dataclasses

    import numpy as np
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1b,7b")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--k", default="8,24", help="passages per prompt (comma-separated)")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--response-tokens", type=int, default=64)
    parser.add_argument("--responses", type=int, default=4, help="responses probed against one context")
    parser.add_argument("--rows", type=int, default=32, help="prompts per batched pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--smoke", action="store_true", help="a tiny config on the CPU, one repeat")
    args = parser.parse_args(argv)
    if args.smoke:
        device, sizes, args.repeats, args.prompt_tokens, args.response_tokens = "cpu", ["tiny"], 1, 200, 8
        dtypes = ["float32"]
    else:
        if not torch.cuda.is_available():
            print("benchmarks/gpu.py needs a CUDA device (torch.cuda.is_available() is False); "
                  "run it on a GPU machine, or --smoke to check the script on the CPU.", file=sys.stderr)
            return 2
        device, sizes, dtypes = "cuda", args.sizes.split(","), args.dtypes.split(",")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows: list[dict[str, Any]] = []
    header = (f"{'model':>6} {'dtype':>9} {'k':>3} {'resp':>4} {'tokens':>7} {'seq s':>8} {'batched s':>9} "
              f"{'speed-up':>8} {'max |diff|':>10} {'peak GiB':>8}")
    print(header)
    for size in sizes:
        for dtype_name in dtypes:
            lm = build_model(size, getattr(torch, dtype_name), device)
            vocab = lm.model.config.vocab_size
            for k in [int(x) for x in args.k.split(",")]:
                rng = np.random.default_rng(k)
                prompts = loo_prompts(rng, vocab, k, args.prompt_tokens)
                responses = [tuple(int(t) for t in rng.integers(10, vocab, size=args.response_tokens))
                             for _ in range(args.responses)]
                for n_responses in sorted({1, args.responses}):
                    cell = responses[:n_responses]
                    if device == "cuda":
                        torch.cuda.reset_peak_memory_stats()
                    seq_s, seq_fed, seq_out = timed(dataclasses.replace(lm, variant_rows=0), prompts, cell,
                                                    args.repeats, sync)
                    bat_s, bat_fed, bat_out = timed(dataclasses.replace(lm, variant_rows=args.rows), prompts, cell,
                                                    args.repeats, sync)
                    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
                    diff = max(float(np.abs(a - b).max()) for x, y in zip(seq_out, bat_out, strict=True)
                               for a, b in zip(x, y, strict=True))
                    row = dict(model=size, dtype=dtype_name, k=k, responses=n_responses, tokens=seq_fed,
                               tokens_batched=bat_fed, sequential_s=seq_s, batched_s=bat_s, speedup=seq_s / bat_s,
                               max_abs_diff=diff, peak_gib=peak, rows_per_pass=args.rows,
                               prompt_tokens=len(prompts[0]), response_tokens=args.response_tokens)
                    rows.append(row)
                    print(f"{size:>6} {dtype_name:>9} {k:>3} {n_responses:>4} {seq_fed:>7} {seq_s:>8.3f} "
                          f"{bat_s:>9.3f} {seq_s / bat_s:>7.2f}x {diff:>10.2e} {peak:>8.1f}", flush=True)
            del lm
            if device == "cuda":
                torch.cuda.empty_cache()
    machine = dict(platform=platform.platform(), python=platform.python_version(), torch=torch.__version__,
                   device=torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(command="python benchmarks/gpu.py " + " ".join(argv or sys.argv[1:]),
                                            machine=machine, rows=rows), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
