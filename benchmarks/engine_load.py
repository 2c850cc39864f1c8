"""Load on a vLLM server: the probe and generation at 1, 4 and 16 requests in flight, through the model seam.

A fixed, bounded count of requests per level (`--requests`, real ASQA items of
`../shared/data/asqa/asqa_wikidpr_pools.json` in file order, the first k docs as context), each
request sent by its own client thread, at most `level` of them in flight:

* generation: `VLLMModel.generate` of one prompt with its own seed (`derive_seed(seed, item id)`),
  `--gen-tokens` new tokens at temperature 0.7;
* probe: `LeaveOneOut().score` of the level-1 response (the k + 1 variants in one call).

Per level: throughput (requests/s over the level's wall time), latency percentiles of one request,
errors, lost requests (an id without an answer) and duplicated ones (an id answered twice), the
server's own count of finished requests (`vllm:request_success_total` from `/metrics`: one per
generation, k + 1 per probe; a retried or repeated request would show there), and whether the
answers equal the 1-in-flight answers (generation: same seed, same text; probe: the largest
|score difference| in nats per response token).

    python benchmarks/engine_load.py [--requests 16] [--k 3] [--gen-tokens 48] [--url http://HOST:PORT]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engines import start_server  # noqa: E402
from probe_speed import DEFAULT_POOLS, load_requests  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 4, 16)


@dataclass
class Level:
    """What one workload at one level of concurrency gave back."""

    answers: dict[int, Any] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duplicated: int = 0
    wall: float = 0.0
    server_requests: int = 0


def drive(call: Callable[[int], Any], count: int, in_flight: int) -> Level:
    """`call(i)` for i in range(count), at most `in_flight` at once; every answer kept by its id."""
    out, lock = Level(), threading.Lock()

    def one(i: int) -> None:
        start = time.perf_counter()
        try:
            answer = call(i)
        except Exception as exc:  # noqa: BLE001 - a load test counts every failure, whatever its kind
            with lock:
                out.errors.append(f"{type(exc).__name__}: {exc}")
            return
        with lock:
            out.seconds.append(time.perf_counter() - start)
            if i in out.answers:
                out.duplicated += 1
            out.answers[i] = answer

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        list(pool.map(one, range(count)))
    out.wall = time.perf_counter() - started
    return out


def finished_requests(url: str) -> int:
    """The server's count of finished requests (vLLM's Prometheus counter, summed over its labels)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("vllm:request_success_total")))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16, help="requests per workload and level (default 16)")
    parser.add_argument("--k", type=int, default=3, help="passages per context (default 3)")
    parser.add_argument("--gen-tokens", type=int, default=48, help="new tokens per generation (default 48)")
    parser.add_argument("--vllm", default=str(ROOT / ".venv-vllm" / "bin" / "vllm"), help="the vllm executable")
    parser.add_argument("--url", default=None, help="an already running vLLM server of the embedded model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS, help="ASQA pools JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.pools.is_file():
        print(f"ASQA pools {args.pools} not found; pass --pools.", file=sys.stderr)
        return 2
    if args.url is None and not Path(args.vllm).exists():
        print(f"{args.vllm} not found; run `make vllm` or pass --vllm / --url.", file=sys.stderr)
        return 2
    from ascp.attribution.loo import LeaveOneOut
    from ascp.attribution.probe import ProbeConfig, prepare_inputs
    from ascp.lm.resolve import resolve_model_dir
    from ascp.lm.sampling import SamplingConfig, derive_seed
    from ascp.lm.vllm import VLLMModel
    from ascp.types import AttributionRequest

    model_dir = resolve_model_dir("default")
    started = time.perf_counter()
    proc, url = (None, args.url) if args.url else start_server(args.vllm, model_dir, "cpu")
    startup = time.perf_counter() - started
    rows: list[tuple[str, int, Level, str]] = []
    try:
        engine = VLLMModel(f"vllm:{url}?tokenizer={model_dir}")
        requests = load_requests(args.pools, args.requests, args.k)
        n = len(requests)
        print(f"# engine load: vLLM (CPU build) at {url} (startup {startup:.0f} s), embedded SmolLM2-135M fp32; "
              f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}, loadavg(1m) "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        print(f"# data={args.pools} requests={n} per workload and level, k={args.k}, gen_tokens={args.gen_tokens}, "
              f"seed={args.seed}", flush=True)
        config = SamplingConfig(temperature=0.7, max_new_tokens=args.gen_tokens)
        prompts = [list(engine.encode_prompt(r.question, r.passages).ids) for r in requests]
        seeds = [derive_seed(args.seed, r.id) for r in requests]
        engine.generate(prompts[:1], config, seeds[:1])  # warm-up, not counted

        def measured(call: Callable[[int], Any], level: int) -> Level:
            before = finished_requests(url)
            out = drive(call, n, level)
            out.server_requests = finished_requests(url) - before
            return out

        generations: dict[int, Level] = {}
        for level in LEVELS:
            generations[level] = measured(lambda i: engine.generate([prompts[i]], config, [seeds[i]])[0], level)
            print(f"generation at {level} in flight: {generations[level].wall:.1f} s", flush=True)
        base = generations[1].answers
        for level, out in generations.items():
            same = sum(out.answers[i].token_ids == base[i].token_ids for i in out.answers if i in base)
            rows.append(("generation", level, out, f"{same}/{n} same text"))

        fixed = [AttributionRequest(id=r.id, question=r.question, passages=r.passages, response=base[i].text)
                 for i, r in enumerate(requests) if i in base and base[i].token_ids]
        items = prepare_inputs(engine, fixed, ProbeConfig(seed=args.seed))
        estimator = LeaveOneOut()
        probes: dict[int, Level] = {}
        for level in LEVELS:
            probes[level] = measured(lambda i: np.asarray(estimator.score(engine, items[i]).values), level)
            print(f"probe at {level} in flight: {probes[level].wall:.1f} s", flush=True)
        for level, out in probes.items():
            diffs = [float(np.max(np.abs(out.answers[i] - probes[1].answers[i]))) for i in out.answers
                     if i in probes[1].answers]
            rows.append(("probe (loo)", level, out, f"max diff {max(diffs):.1e}" if diffs else "-"))
        expected = {"generation": 1, "probe (loo)": args.k + 1}
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)

    print()
    print("| workload | in flight | requests | errors | lost | duplicated | server requests (expected) | req/s "
          "| p50 s | p95 s | max s | vs 1 in flight |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, level, out, same in rows:
        count = len(items) if name.startswith("probe") else n
        lat = np.asarray(out.seconds) if out.seconds else np.asarray([np.nan])
        lost = count - len(out.answers)  # ids without an answer (an error loses its request)
        print(f"| {name} | {level} | {count} | {len(out.errors)} | {lost} | {out.duplicated} | "
              f"{out.server_requests} ({count * expected[name]}) | {len(out.answers) / out.wall:.2f} | "
              f"{np.percentile(lat, 50):.2f} | {np.percentile(lat, 95):.2f} | {lat.max():.2f} | {same} |")
    for name, level, out, _ in rows:
        for message in out.errors[:3]:
            print(f"error ({name}, {level} in flight): {message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
