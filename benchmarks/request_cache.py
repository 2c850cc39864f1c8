"""What the request cache saves: tokens fed and wall time with and without it, side by side in one run.

Real ASQA items of `../shared/data/asqa/asqa_wikidpr_pools.json` (the first `--limit`, dense pool
order under the embedded MiniLM), the embedded model (its default backend), exact leave-one-out,
k = 2, T = 3, 48 new tokens, through `ascp.run_portfolios` (what `ascp run` calls). Scenarios,
each against the same cache file, in this order:

* uncached: rotate then vanilla, no cache (the reference);
* cold: the same with an empty cache (vanilla's round 1 is rotate's: the top 2 with the same seeds);
* rerun: the same again (a rerun, or a resume after a crash);
* grown: mmr and ascp added, their uncached cost measured first (a condition added to an experiment);
* threshold: ascp again at another used-threshold (feedback changes only where the used sets do).

Tokens fed are counted at the model seam (prompt and new tokens of each generation computed, plus
what `score` reports it fed; the prefix store is off, so this measures the request cache alone) and
are deterministic; wall seconds are not. "same rows" compares every
round's context and response exactly and its scores within 1e-5 nats per token with the uncached run.

    python benchmarks/request_cache.py [--limit 4] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compute_once import Fed, differing, rows_of  # noqa: E402
from probe_speed import DEFAULT_POOLS  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=4, help="ASQA items (default 4)")
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS)
    parser.add_argument("--out", type=Path, default=None, help="also write the table as JSON")
    args = parser.parse_args(argv)
    if args.out is not None:  # before the work: a run takes minutes
        args.out.parent.mkdir(parents=True, exist_ok=True)
    if not args.pools.is_file():
        print(f"ASQA pools {args.pools} not found; pass --pools.", file=sys.stderr)
        return 2
    import ascp
    from ascp.data import load_cases
    from ascp.embed.embedders import resolve_embedder
    from ascp.lm.request_cache import CachedModel, RequestCache, model_fingerprint

    embed_fn = resolve_embedder("default")
    cases = load_cases(args.pools, format="asqa", limit=args.limit, embed_fn=embed_fn)
    base = ascp.load_model("default", prefix_cache_mb=0)  # the request cache alone (docs/prefix-store.md apart)
    fingerprint = model_fingerprint(base)
    assert fingerprint is not None
    print(f"# request cache: {len(cases)} ASQA items, model default ({base.backend}), loo, k=2, T=3, 48 new "
          f"tokens; {platform.processor() or platform.machine()}, nproc={os.cpu_count()}, loadavg(1m) "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    folder = tempfile.TemporaryDirectory()
    cache = RequestCache(Path(folder.name) / "requests.sqlite")
    table: list[dict[str, Any]] = []
    reference: dict = {}

    def run(name: str, policies: Sequence[str], cached: bool, threshold: float | None = None) -> dict:
        fed = Fed(base)
        model = CachedModel(fed, cache, fingerprint) if cached else fed
        started = time.perf_counter()
        out = []
        for policy in policies:
            out += ascp.run_portfolios(cases, policy=policy, k=2, T=3, model=model, max_new_tokens=48,
                                       embed_fn=embed_fn, threshold=threshold)
        wall = time.perf_counter() - started
        got = rows_of(out)
        table.append({"scenario": name, "policies": "+".join(policies), "cached": cached,
                      "generations computed": fed.generations, "scored prompts computed": fed.scored,
                      "tokens fed": fed.tokens, "wall s": round(wall, 1), "rows": got})
        print(f"{name}: {fed.tokens:,} tokens fed, {wall:.1f} s", flush=True)
        return got

    reference["rotate+vanilla"] = run("uncached", ["rotate", "vanilla"], cached=False)
    cold = run("cold cache", ["rotate", "vanilla"], cached=True)
    rerun = run("rerun", ["rotate", "vanilla"], cached=True)
    reference["mmr+ascp"] = run("uncached", ["mmr", "ascp"], cached=False)
    grown = run("grown (+mmr, ascp)", ["mmr", "ascp"], cached=True)
    reference["ascp@0.3"] = run("uncached", ["ascp"], cached=False, threshold=0.3)
    moved = run("threshold 0.3", ["ascp"], cached=True, threshold=0.3)
    checks = {"cold cache": differing(cold, reference["rotate+vanilla"]) == 0,
              "rerun": differing(rerun, reference["rotate+vanilla"]) == 0,
              "grown (+mmr, ascp)": differing(grown, reference["mmr+ascp"]) == 0,
              "threshold 0.3": differing(moved, reference["ascp@0.3"]) == 0}
    uncached_tokens = {row["policies"]: row["tokens fed"] for row in table if not row["cached"]}
    print()
    print("| scenario | policies | generations computed | scored prompts computed | tokens fed | x uncached "
          "tokens | wall s | same rows as uncached |")
    print("|---|---|---|---|---|---|---|---|")
    for row in table:
        ratio = row["tokens fed"] / uncached_tokens[row["policies"]]
        row["x uncached tokens"] = round(ratio, 3)
        row["same rows as uncached"] = "-" if not row["cached"] else ("yes" if checks[row["scenario"]] else "NO")
        print(f"| {row['scenario']} | {row['policies']} | {row['generations computed']} | "
              f"{row['scored prompts computed']} | {row['tokens fed']:,} | {ratio:.3f} | {row['wall s']} | "
              f"{row['same rows as uncached']} |")
    print(f"\n{cache.stats.summary()}")
    if args.out is not None:
        args.out.write_text(json.dumps([{k: v for k, v in row.items() if k != "rows"} for row in table], indent=2)
                            + "\n")
    cache.close()
    folder.cleanup()
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
