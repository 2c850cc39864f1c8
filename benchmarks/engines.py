"""The engine backend through a real vLLM server next to in-process transformers, in one run.

What is measured, through the model seam only (what the probe and the loop get), on real ASQA
items of `../shared/data/asqa/asqa_wikidpr_pools.json` (file order, the first k docs as context):

* loo s/request: `LeaveOneOut()` on a fixed response (sampled once by transformers), one request
  at a time: transformers with its exact prefix reuse, and vLLM with the k + 1 variants in one
  `/v1/completions` call (vLLM skips its prefix cache for prompt log-probs: k + 1 full prefills).
* loo requests/s, pipelined: the same requests all in flight at once through vLLM (threads), the
  engine batching across requests; transformers runs them one after another.
* gen tok/s B=1 and B=8: sampled tokens / wall seconds of `generate` (temperature 0.7): one prompt,
  and 8 prompts (8 concurrent requests for vLLM, one batch of 8 for transformers).
* agreement: the largest |loo difference| (nats per response token) between the two.

The model is the embedded SmolLM2-135M (its safetensors copy) by default. `--random-model 1b`
builds a randomly initialised Llama of about 1B parameters (hidden 2048, 16 layers, the embedded
tokenizer) and saves it locally first, so the same script measures a realistic size where no
weights may travel (a GPU machine: `--device cuda`, vLLM's GPU build on PATH as `--vllm vllm`).

    python benchmarks/engines.py [--requests 4] [--k 5] [--gen-tokens 48] [--random-model 1b]
        [--device cpu|cuda] [--vllm .venv-vllm/bin/vllm] [--url http://HOST:PORT]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backends import timed  # noqa: E402
from probe_speed import DEFAULT_POOLS, load_requests  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4, help="ASQA items (default 4)")
    parser.add_argument("--k", type=int, default=5, help="passages per context (default 5)")
    parser.add_argument("--gen-tokens", type=int, default=48, help="new tokens per generation (default 48)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="length cap of the fixed responses")
    parser.add_argument("--random-model", choices=("none", "1b"), default="none",
                        help="benchmark a randomly initialised ~1B Llama instead of the embedded model")
    parser.add_argument("--device", default="cpu", help="device of the transformers side (cpu or cuda)")
    parser.add_argument("--vllm", default=str(ROOT / ".venv-vllm" / "bin" / "vllm"), help="the vllm executable")
    parser.add_argument("--url", default=None, help="an already running vLLM server serving the same model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS, help="ASQA pools JSON")
    return parser.parse_args(argv)


def random_llama(folder: Path, tokenizer_dir: str) -> str:
    """A randomly initialised Llama of about 1B parameters with the embedded tokenizer, saved to `folder`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def start_server(vllm: str, model_dir: str, device: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_NO_USAGE_STATS": "1"}
    dtype = ["--dtype", "float32"] if device == "cpu" else ["--dtype", "bfloat16"]
    # The CPU build cannot rewind a seeded request's generator after a partial prefill: never split
    # a prompt there (docs/engines.md "Chunked prefill on the CPU build").
    cpu_only = ["--no-enable-chunked-prefill"] if device == "cpu" else []
    proc = subprocess.Popen([vllm, "serve", model_dir, *dtype, *cpu_only, "--max-model-len", "4096", "--enforce-eager",
                             "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while True:
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5):
                return proc, url
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"vLLM did not start (exit code {proc.poll()}); run it by hand to see why.") from None
            time.sleep(2)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.pools.is_file():
        print(f"ASQA pools {args.pools} not found; pass --pools.", file=sys.stderr)
        return 2
    if args.url is None and not Path(args.vllm).exists() and args.vllm != "vllm":
        print(f"{args.vllm} not found; run `make vllm` or pass --vllm / --url.", file=sys.stderr)
        return 2
    import torch

    from ascp.attribution.loo import LeaveOneOut
    from ascp.attribution.probe import ProbeConfig, prepare_inputs
    from ascp.lm.resolve import load_language_model, resolve_model_dir
    from ascp.lm.sampling import SamplingConfig
    from ascp.lm.vllm import VLLMModel

    model_dir = resolve_model_dir("default")
    scratch = tempfile.TemporaryDirectory()
    if args.random_model == "1b":
        model_dir = random_llama(Path(scratch.name) / "llama-1b", model_dir)
    started = time.perf_counter()
    proc, url = (None, args.url) if args.url else start_server(args.vllm, model_dir, args.device)
    startup = time.perf_counter() - started
    try:
        engine = VLLMModel(f"vllm:{url}?tokenizer={model_dir}")
        ref = load_language_model(model_dir, backend="hf", device=args.device)
        params = sum(p.numel() for p in ref.model.parameters())
        print(f"# engines: vLLM at {url} (startup {startup:.0f} s) vs transformers on {args.device}; model "
              f"{'random Llama' if args.random_model == '1b' else 'embedded SmolLM2-135M'} ({params / 1e6:.0f}M "
              f"parameters, fp32 on CPU); {platform.processor() or platform.machine()}, nproc={os.cpu_count()}, "
              f"torch {torch.__version__} ({torch.get_num_threads()} threads); loadavg(1m) {os.getloadavg()[0]:.2f}",
              flush=True)
        print(f"# data={args.pools} requests={args.requests} k={args.k} gen_tokens={args.gen_tokens} "
              f"seed={args.seed}", flush=True)
        config = ProbeConfig(sampling=SamplingConfig(temperature=0.7, max_new_tokens=args.max_new_tokens),
                             seed=args.seed)
        requests = load_requests(args.pools, args.requests, args.k)
        items = prepare_inputs(ref, requests, config)
        estimator = LeaveOneOut()
        rows: dict[str, dict[str, float]] = {"transformers": {}, "vllm": {}}
        diffs: list[float] = []
        ref_outs: list[Any] = []
        for name, lm in (("transformers", ref), ("vllm", engine)):
            estimator.score(lm, items[0])  # warm-up
            outs, seconds = [], []
            for item in items:
                out, sec = timed(estimator.score, lm, item)
                outs.append(out.values)
                seconds.append(sec)
            rows[name]["loo s/req"] = float(np.mean(seconds))
            rows[name]["loo req/s (pipelined)"] = len(items) / sum(seconds)
            if name == "vllm":
                with ThreadPoolExecutor(max_workers=len(items)) as pool:
                    _, wall = timed(lambda: list(pool.map(lambda it: estimator.score(engine, it), items)))
                rows[name]["loo req/s (pipelined)"] = len(items) / wall
                diffs = [float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(ref_outs, outs,
                                                                                               strict=True)]
            else:
                ref_outs = outs
        gen = SamplingConfig(temperature=0.7, max_new_tokens=args.gen_tokens)
        prompts = [ref.encode_prompt(r.question, r.passages[:1]).ids for r in load_requests(args.pools, 8, 1)]
        for name, lm in (("transformers", ref), ("vllm", engine)):
            for size in (1, 8):
                batch = prompts[:size]
                out, sec = timed(lm.generate, batch, gen, [args.seed + i for i in range(size)], batch_size=size)
                rows[name][f"gen tok/s B={size}"] = sum(len(g.token_ids) + g.finished for g in out) / sec
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        scratch.cleanup()
    columns = ["loo s/req", "loo req/s (pipelined)", "gen tok/s B=1", "gen tok/s B=8"]
    print()
    print("backend        " + "  ".join(c.rjust(22) for c in columns))
    for name, row in rows.items():
        print(f"{name:<14} " + "  ".join(f"{row[c]:.2f}".rjust(22) for c in columns))
    ratio = [rows["transformers"][c] / rows["vllm"][c] if c == "loo s/req" else rows["vllm"][c] /
             rows["transformers"][c] for c in columns]
    print(f"{'x vllm':<14} " + "  ".join(f"{r:.2f}x".rjust(22) for r in ratio))
    print("(x vllm: vLLM over transformers; for loo s/req, transformers seconds / vLLM seconds)")
    print(f"\nagreement: max |loo difference| vLLM vs transformers {max(diffs):.2e} nats/token over {len(diffs)} "
          f"requests (k = {args.k})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
