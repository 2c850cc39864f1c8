"""Tokens fed with and without compute sharing, side by side in one run, for the demo and a cpu-small slice.

Each workload runs every one of its conditions through the loop (`ascp.loop.portfolios.run_loop`
with the experiment's `loop_config`: what `ascp demo`, `ascp run` and each experiment chunk run)
twice on one loaded model:

* off: the prefix store off (`prefix_cache_mb=0`) and no request cache: the path before either;
* on: the prefix store on (the default 2048 MB) and one temporary request cache shared by the
  workload's conditions, as `ascp demo` and `ascp reproduce` run them (`--shared store`: the
  prefix store only).

Tokens fed are counted at the model seam, below the request cache, and are deterministic:
generation feeds its prompts (less what the store restored) and its new tokens; the probe feeds what
`score` reports. "same" compares every round's context and response exactly and its scores within
1e-5 nats per token between the two; "differ" counts the rounds that do not (a request answered
from the cache was computed in another batch, and llama.cpp's numbers move with batch neighbours:
docs/request-cache.md).

* demo: `ascp demo` as it ships: the first 2 questions of the bundled demo set, ascp, rotate and
  vanilla at k = 2, T = 3, 48 new tokens, exact LOO; demo-full: all 6 questions at T = 4
  (`ascp demo --questions 6 --T 4`);
* cpu-small: the `cpu-small` preset's ten conditions (its estimators, 48 new tokens, batch size
  16) on the first `--queries` of its ASQA pools (dense order, pools of at least 24 passages);
* cpu-small-bm25: the same with the grid cells (every condition but the k = 5, T = 5 comparison)
  probed with the bm25 proxy, as the preset did before its grid moved to exact LOO.

    python benchmarks/compute_once.py [--queries 1] [--workloads demo,demo-full,cpu-small,cpu-small-bm25]
        [--backend auto] [--shared requests|store] [--out FILE.json]
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
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
POOLS = ROOT.parent / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"


class Fed:
    """The model with the tokens it is fed counted (everything else is the model's own): generation
    feeds its prompts, less what the model's prefix store restored, and its new tokens; `score` what
    it reports."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self.tokens = 0
        self.generations = 0  # rows generated
        self.scored = 0  # prompts scored

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)

    @property
    def context_window(self) -> int:
        return int(self.lm.context_window)

    def _saved(self) -> int:
        store = getattr(self.lm, "prefixes", None)
        return 0 if store is None else store.stats.tokens_saved

    def generate(self, prompts, config, seeds, batch_size=8, on_batch=None):  # noqa: ANN001, ANN201
        before = self._saved()
        out = self.lm.generate(prompts, config, seeds, batch_size, on_batch)
        restored = self._saved() - before  # prompt tokens the store held
        self.generations += len(prompts)
        self.tokens += sum(len(p) + len(g.token_ids) for p, g in zip(prompts, out, strict=True)) - restored
        return out

    def generate_streams(self, *args: Any, **kwargs: Any) -> Any:
        return self.lm.generate_streams(*args, **kwargs)

    def score(self, prompts, response, reuse_prefix=True):  # noqa: ANN001, ANN201
        out = self.lm.score(prompts, response, reuse_prefix)
        self.scored += len(prompts)
        self.tokens += out.tokens_processed
        return out


def workloads(names: Sequence[str], queries: int) -> list[tuple[str, list, list[Any], Any]]:
    """(name, cases, conditions, settings) per workload."""
    from importlib import resources

    import yaml

    from ascp.data import load_cases
    from ascp.embed.embedders import resolve_embedder
    from ascp.experiments.condition import Condition
    from ascp.experiments.spec import Settings

    out = []
    from ascp.cli.runs import DEMO_QUESTIONS, DEMO_T

    demo_cases = load_cases(Path(str(resources.files("ascp") / "resources" / "demo_cases.jsonl")), format="jsonl")
    for name, cases, T in (("demo", demo_cases[:DEMO_QUESTIONS], DEMO_T), ("demo-full", demo_cases, 4)):
        if name in names:
            conditions = [Condition.parse(f"{p}(k=2,T={T})") for p in ("ascp", "rotate", "vanilla")]
            out.append((name, cases, conditions, Settings(max_new_tokens=48)))
    small = [name for name in names if name.startswith("cpu-small")]
    if small:
        preset = yaml.safe_load((Path(str(resources.files("ascp"))) / "resources" / "presets" / "cpu-small.yaml")
                                .read_text())
        cases = load_cases(POOLS, format="asqa", rank_by="dense", embed_fn=resolve_embedder("default"))
        cases = [c for c in cases if len(c.pool) >= 24][:queries]
        settings = Settings(max_new_tokens=preset["sampling"]["max_new_tokens"], batch_size=preset["batch_size"])
        conditions = [Condition.parse(name) for name in preset["conditions"]]
        for name in small:
            if name == "cpu-small-bm25":  # the grid cells (all but the k = 5, T = 5 comparison) on the proxy
                out.append((name, cases, [c if (c.k, c.T) == (5, 5) else replace(c, estimator="bm25")
                                          for c in conditions], settings))
            else:
                out.append((name, cases, conditions, settings))
    return out


def differing(a: dict, b: dict) -> int:
    """Rounds whose context, response or scores (beyond 1e-5) differ between two runs of one workload."""
    if a.keys() != b.keys():
        return max(len(a), len(b))
    return sum(a[k][:2] != b[k][:2] or any(abs(a[k][2][d] - b[k][2][d]) >= 1e-5 for d in a[k][2]) for k in a)


def rows_of(portfolios: Sequence[Any]) -> dict:
    return {(p.policy, p.case_id, r.round): (r.context, r.response, r.scores) for p in portfolios for r in p.rounds}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=1, help="cpu-small queries (default 1)")
    parser.add_argument("--workloads", default="demo,cpu-small")
    parser.add_argument("--backend", default="auto", help="auto, hf or llamacpp")
    parser.add_argument("--shared", choices=("requests", "store"), default="requests",
                        help="what the 'on' arm shares: the prefix store and a request cache (default), or the "
                        "prefix store only")
    parser.add_argument("--out", type=Path, help="also write the table's rows to this JSON file")
    args = parser.parse_args(argv)
    names = args.workloads.split(",")
    unknown = sorted(set(names) - {"demo", "demo-full", "cpu-small", "cpu-small-bm25"})
    if unknown:
        print(f"unknown workload {unknown[0]!r}; choose from demo, demo-full, cpu-small, cpu-small-bm25.",
              file=sys.stderr)
        return 2
    if any(n.startswith("cpu-small") for n in names) and not POOLS.is_file():
        print(f"ASQA pools {POOLS} not found; run from a checkout beside ../shared.", file=sys.stderr)
        return 2
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    import ascp
    from ascp.embed.embedders import resolve_embedder
    from ascp.experiments.plan import loop_config
    from ascp.lm.prefixes import configure_prefixes
    from ascp.lm.request_cache import CachedModel, cached_model
    from ascp.loop.portfolios import run_loop

    lm: Any = ascp.load_model("default", backend=args.backend)
    embed_fn = resolve_embedder("default")
    machine = (f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}, "
               f"loadavg(1m) {os.getloadavg()[0]:.2f}")
    shared = "prefix store + request cache" if args.shared == "requests" else "prefix store"
    print(f"# compute once: model default ({lm.backend}); {machine}; 'on' shares: {shared}", flush=True)
    print("| workload | policies | sharing | tokens fed | x off | wall s | x off | probe passes from the store | "
          "requests from the cache | rows differing |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    table = []
    for name, cases, conditions, settings in workloads(names, args.queries):
        results: dict[str, dict[str, Any]] = {}
        for arm in ("off", "on"):
            configure_prefixes(lm, 0 if arm == "off" else 2048)
            fed = Fed(lm)
            with tempfile.TemporaryDirectory(prefix="compute-once-") as scratch:
                model = cached_model(fed, Path(scratch) / "requests.sqlite") if (
                    arm == "on" and args.shared == "requests") else fed
                started = time.perf_counter()
                portfolios = []
                for condition in conditions:
                    portfolios += [replace(p, policy=condition.name) for p in
                                   run_loop(model, cases, loop_config(condition, 0, settings), embed_fn)]
                wall = time.perf_counter() - started
                if isinstance(model, CachedModel):
                    c = model.cache.stats
                    requests = (f"{c.generation_hits} of {c.generation_hits + c.generation_misses} generations, "
                                f"{c.score_hits} of {c.score_hits + c.score_misses} scored prompts")
                    model.cache.close()
                else:
                    requests = "-"
            stats = lm.prefixes.stats if lm.prefixes is not None else None
            reused = "-" if stats is None else f"{stats.hits} of {stats.hits + stats.misses}"
            results[arm] = {"tokens": fed.tokens, "wall_s": round(wall, 1), "rows": rows_of(portfolios),
                            "store": reused, "requests": requests}
            print(f"# {name}, {arm}: {fed.tokens:,} tokens, {wall:.1f} s", file=sys.stderr, flush=True)
        off, on = results["off"], results["on"]
        differ = differing(off["rows"], on["rows"])
        policies = f"{len(conditions)} conditions x {len(cases)} cases"
        print(f"| {name} | {policies} | off | {off['tokens']:,} | 1.000 | {off['wall_s']:.1f} | 1.00 | - | - | - |")
        print(f"| {name} | {policies} | on | {on['tokens']:,} | {on['tokens'] / off['tokens']:.3f} | "
              f"{on['wall_s']:.1f} | {on['wall_s'] / off['wall_s']:.2f} | {on['store']} | {on['requests']} | "
              f"{differ} of {len(off['rows'])} |", flush=True)
        table.append({"workload": name, "conditions": [c.name for c in conditions], "cases": len(cases),
                      "shared": shared, "rounds": len(off["rows"]), "rows_differing": differ,
                      **{f"{arm}_{key}": results[arm][key] for arm in ("off", "on")
                         for key in ("tokens", "wall_s", "store", "requests")}})
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": machine, "backend": lm.backend, "rows": table}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
