"""Tokens fed with and without the prefix store, side by side in one run, for the demo and a cpu-small slice.

Each workload runs every one of its conditions through the loop (`ascp.loop.portfolios.run_portfolios`
with the experiment's `loop_config`: what `ascp demo`, `ascp run` and each experiment chunk run)
twice on one loaded model: with its prefix store off
(`prefix_cache_mb=0`, the path before the store) and on (the default 2048 MB). Tokens fed are
counted at the model seam and are deterministic: generation feeds its prompts (less what the store
restored) and its new tokens; the probe feeds what `score` reports. "same" compares every round's
context and response exactly and its scores within 1e-5 nats per token between the two.

* demo: the bundled demo set, ascp, rotate and vanilla at k = 2, T = 4, 48 new tokens, exact LOO
  (`ascp demo`);
* cpu-small: the `cpu-small` preset's ten conditions (its estimators, 48 new tokens, batch size
  16) on the first `--queries` of its ASQA pools (dense order, pools of at least 24 passages).

    python benchmarks/compute_once.py [--queries 1] [--workloads demo,cpu-small] [--backend auto]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
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
    if "demo" in names:
        demo = Path(str(resources.files("ascp") / "resources" / "demo_cases.jsonl"))
        conditions = [Condition.parse(f"{p}(k=2,T=4)") for p in ("ascp", "rotate", "vanilla")]
        out.append(("demo", load_cases(demo, format="jsonl"), conditions, Settings(max_new_tokens=48)))
    if "cpu-small" in names:
        preset = yaml.safe_load((Path(str(resources.files("ascp"))) / "resources" / "presets" / "cpu-small.yaml")
                                .read_text())
        cases = load_cases(POOLS, format="asqa", rank_by="dense", embed_fn=resolve_embedder("default"))
        cases = [c for c in cases if len(c.pool) >= 24][:queries]
        conditions = [Condition.parse(name) for name in preset["conditions"]]
        settings = Settings(max_new_tokens=preset["sampling"]["max_new_tokens"], batch_size=preset["batch_size"])
        out.append(("cpu-small", cases, conditions, settings))
    return out


def rows_of(portfolios: Sequence[Any]) -> dict:
    return {(p.policy, p.case_id, r.round): (r.context, r.response, r.scores) for p in portfolios for r in p.rounds}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k][:2] == b[k][:2] and all(abs(a[k][2][d] - b[k][2][d]) < 1e-5 for d in a[k][2]) for k in a)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=1, help="cpu-small queries (default 1)")
    parser.add_argument("--workloads", default="demo,cpu-small")
    parser.add_argument("--backend", default="auto", help="auto, hf or llamacpp")
    args = parser.parse_args(argv)
    names = args.workloads.split(",")
    if "cpu-small" in names and not POOLS.is_file():
        print(f"ASQA pools {POOLS} not found; run from a checkout beside ../shared.", file=sys.stderr)
        return 2
    import ascp
    from ascp.embed.embedders import resolve_embedder
    from ascp.experiments.plan import loop_config
    from ascp.lm.prefixes import configure_prefixes
    from ascp.loop.portfolios import run_portfolios

    lm = ascp.load_model("default", backend=args.backend)
    embed_fn = resolve_embedder("default")
    print(f"# compute once: model default ({lm.backend}); {platform.processor() or platform.machine()}, "
          f"nproc={os.cpu_count()}, loadavg(1m) {os.getloadavg()[0]:.2f}", flush=True)
    print("| workload | policies | store | tokens fed | x off | wall s | x off | prompts reused | same rows |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for name, cases, conditions, settings in workloads(names, args.queries):
        results: dict[str, tuple[int, float, dict, str]] = {}
        for store in ("off", "on"):
            configure_prefixes(lm, 0 if store == "off" else 2048)
            fed = Fed(lm)
            started = time.perf_counter()
            portfolios = []
            for condition in conditions:
                portfolios += [replace(p, policy=condition.name) for p in
                               run_portfolios(fed, cases, loop_config(condition, 0, settings), embed_fn)]
            wall = time.perf_counter() - started
            stats = lm.prefixes.stats if lm.prefixes is not None else None
            reused = "-" if stats is None else f"{stats.hits} of {stats.hits + stats.misses}"
            results[store] = (fed.tokens, wall, rows_of(portfolios), reused)
            print(f"# {name}, store {store}: {fed.tokens:,} tokens, {wall:.1f} s", file=sys.stderr, flush=True)
        (t0, w0, r0, _), (t1, w1, r1, reused) = results["off"], results["on"]
        match = same(r0, r1)
        ok &= match
        policies = f"{len(conditions)} conditions x {len(cases)} cases"
        print(f"| {name} | {policies} | off | {t0:,} | 1.000 | {w0:.1f} | 1.00 | - | - |")
        print(f"| {name} | {policies} | on | {t1:,} | {t1 / t0:.3f} | {w1:.1f} | {w1 / w0:.2f} | {reused} | "
              f"{'yes' if match else 'NO'} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
