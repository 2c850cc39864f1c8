"""Simulation speed: queries per second per policy once the pool embeddings are cached.

What is measured. The ASQA pools of `../shared/data/asqa/asqa_wikidpr_pools.json` with at least
`--min-pool` passages, ranked dense (embedded MiniLM). Phase 1 (printed, not part of the table):
loading, ranking and building the pool views (embeddings through `EmbeddingCache`, facets,
similarities) with a cold cache, then again with the warm cache. Phase 2: for every policy,
`simulate_portfolios` over all cases (k, T, consumer `toy(q=0.5)`), timed with
time.perf_counter; the table reports queries/s and ms per query, each policy run `--repeats`
times (best and median).

    python benchmarks/simulate_speed.py [--limit 236] [--k 5] [--T 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_POOLS = REPO.parent / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"
POLICIES = ("vanilla", "rotate", "mmr", "xquad", "pm2", "dpp", "carriage", "ascp", "ascp-uniform",
            "ascp-nofeedback", "ascp-pin1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS)
    parser.add_argument("--limit", type=int, default=None, help="first N eligible cases (default: all)")
    parser.add_argument("--min-pool", type=int, default=15)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--T", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if not args.pools.is_file():
        print(f"The real data file {args.pools} is absent (this benchmark needs ../shared/data).", file=sys.stderr)
        return 2

    from ascp.data import load_cases
    from ascp.embed.cache import EmbeddingCache
    from ascp.embed.embedders import embed
    from ascp.loop.consumers import Toy
    from ascp.loop.simulate import pool_views, simulate_portfolios

    print(f"# simulate_speed: python {platform.python_version()}, {os.cpu_count()} cpus, "
          f"loadavg(1m) at start={os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        cache_path = Path(tmp) / "emb.npz"
        for label in ("cold cache", "warm cache"):
            cache = EmbeddingCache(embed, cache_path)
            start = time.perf_counter()
            cases = load_cases(args.pools, rank_by="dense", limit=args.limit, min_pool=args.min_pool, embed_fn=cache)
            views = pool_views(cases, cache)
            cache.save()
            print(f"# load + rank + pool views, {label}: {time.perf_counter() - start:.1f} s for {len(cases)} cases",
                  flush=True)
    consumer = Toy(q=0.5)
    print(f"\npolicy            queries  best q/s  median q/s  ms/query (median)   [k={args.k} T={args.T}, toy(q=0.5)]")
    for policy in POLICIES:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            simulate_portfolios(cases, policy, args.k, args.T, consumer, views)
            times.append(time.perf_counter() - start)
        best, median = min(times), statistics.median(times)
        print(f"{policy:<17} {len(cases):>7}  {len(cases) / best:>8.0f}  {len(cases) / median:>10.0f}  "
              f"{1000 * median / len(cases):>17.2f}", flush=True)
    print(f"# loadavg(1m) at end={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
