"""Loop throughput: batched vs one-at-a-time generation, and scheduler time per round.

1. Generated tokens per second for T = 12 independent rounds (the 12 rotation windows of one
   case, as an open-loop policy produces them), generated in one batch vs one prompt at a
   time. The per-prompt random streams make both produce the same texts, so both generate the
   same tokens. Reported twice: over the whole call, and over decoding only (prefill timed
   separately and subtracted). Target: >= 4x on CPU, for decoding: prefill is compute-bound on
   a CPU and costs the same batched or not.
2. Scheduler time per round (`select`) for every registered policy on synthetic pools of
   N = 30 and N = 400 (unit-normalised random embeddings, dim 384, k = 5, T = 5, feedback
   where each round's first two passages are "used"). Target: < 2 ms, ascp included.

Usage: python benchmarks/loop_throughput.py [--model default] [--max-new-tokens 32] [--repeats 30]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import numpy as np


def generation_table(model: str, max_new_tokens: int) -> list[tuple[str, float, float, int, float]]:
    """(mode, total seconds, prefill seconds, generated tokens, decode tokens/s) for both modes.

    Prefill is timed separately (the same prompts, batched the same way, run again on their own)
    and subtracted: on a CPU a prefill is compute-bound, so batching it saves little, while each
    decoding step streams every weight from memory once, which a batch shares across its rows.
    """
    import torch

    from ascp.data import load_cases
    from ascp.lm.hf import SamplingConfig, _padded_prefill, derive_seed, generate
    from ascp.lm.resolve import load_language_model

    lm = load_language_model(model, device="cpu", backend="hf")  # measures the transformers loop
    demo = Path(__file__).resolve().parents[1] / "src" / "ascp" / "resources" / "demo_cases.jsonl"
    case = load_cases(demo, format="jsonl")[0]
    windows = [[case.pool[(2 * t + j) % len(case.pool)] for j in range(2)] for t in range(12)]
    prompts = [lm.encode_prompt(case.question, w).ids for w in windows]
    seeds = [derive_seed(0, case.id, t + 1) for t in range(12)]
    config = SamplingConfig(max_new_tokens=max_new_tokens)
    generate(lm, prompts[:2], SamplingConfig(max_new_tokens=4), seeds[:2], batch_size=2)  # warm-up
    rows = []
    texts = {}
    for label, batch in (("one at a time", 1), ("batched (12)", 12)):
        start = time.perf_counter()
        gens = generate(lm, prompts, config, seeds, batch_size=batch)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        for lo in range(0, len(prompts), batch):
            _padded_prefill(torch, lm, prompts[lo : lo + batch])
        prefill = time.perf_counter() - start
        tokens = sum(len(g.token_ids) for g in gens)
        texts[label] = [g.text for g in gens]
        rows.append((label, seconds, prefill, tokens, tokens / max(1e-9, seconds - prefill)))
    same = sum(a == b for a, b in zip(texts["one at a time"], texts["batched (12)"], strict=True))
    print(f"identical texts batched vs one at a time: {same}/12")
    return rows


def scheduler_table(repeats: int) -> list[tuple[str, float, float]]:
    from ascp.schedulers import SCHEDULER_NAMES, make_scheduler
    from ascp.schedulers.base import RoundFeedback
    from ascp.schedulers.facets import pool_view_from_embeddings
    from ascp.types import AnswerUnit, Case, Passage

    def fake_embed(texts):
        rng = np.random.default_rng(len(texts))
        v = rng.normal(size=(len(texts), 384))
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    results: dict[str, dict[int, float]] = {}
    for n in (30, 400):
        rng = np.random.default_rng(n)
        e = rng.normal(size=(n + 1, 384))
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        case = Case("bench", "q", tuple(Passage(f"d{i}", f"text {i}") for i in range(n)), (AnswerUnit("u", ("x",)),))
        view = pool_view_from_embeddings(case, e[1:], e[0], fake_embed)
        for name in SCHEDULER_NAMES:
            per_round = []
            for rep in range(repeats):
                sched = make_scheduler(name, view, 5, 5, np.random.default_rng(rep))
                history: list[RoundFeedback] = []
                for t in range(1, 6):
                    start = time.perf_counter()
                    sel = sched.select(t, tuple(history))
                    per_round.append(time.perf_counter() - start)
                    ids = sel.ids
                    norm = {d: (0.5 if i < 2 else 0.0) for i, d in enumerate(ids)}
                    history.append(RoundFeedback(ids, norm, ids[:2], f"response {t} about text {t}"))
            results.setdefault(name, {})[n] = statistics.median(per_round) * 1e3
    return [(name, by_n[30], by_n[400]) for name, by_n in results.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--skip-generation", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    if not args.skip_generation:
        rows = generation_table(args.model, args.max_new_tokens)
        base = rows[0][4]
        print(f"\nGeneration, T = 12 independent rounds, max_new_tokens = {args.max_new_tokens}, model {args.model!r}")
        print(f"{'mode':<16}{'total s':>9}{'prefill s':>11}{'decode s':>10}{'tokens':>8}{'total tok/s':>13}"
              f"{'decode tok/s':>14}{'decode ratio':>14}")
        for label, seconds, prefill, tokens, rate in rows:
            print(f"{label:<16}{seconds:>9.2f}{prefill:>11.2f}{seconds - prefill:>10.2f}{tokens:>8d}"
                  f"{tokens / seconds:>13.2f}{rate:>14.2f}{rate / base:>13.2f}x")
    print(f"\nScheduler time per round (median of {args.repeats} x 5 rounds, k = 5), milliseconds")
    print(f"{'policy':<18}{'N=30':>10}{'N=400':>10}{'< 2 ms':>8}")
    for name, t30, t400 in scheduler_table(args.repeats):
        ok = "yes" if max(t30, t400) < 2.0 else "NO"
        print(f"{name:<18}{t30:>10.3f}{t400:>10.3f}{ok:>8}")


if __name__ == "__main__":
    main()
