"""Generation prefill of prompts of very different lengths: one padded pass against length groups.

A batch of generation rows is prefilled in one left-padded forward pass when the model has no prefix
store (`_padded_prefill`), and in batches of similar length when it has one (`length_groups` in
`ascp.lm.hf`, the default). Some held-out ASQA blocks hold a 7,000-token prompt beside ones of about
1,000 tokens (single passages of some pools run past 1,000 tokens); padded to the longest, the
attention of the one pass is rows x longest^2.

This takes the five deep-rotation contexts of such a block's longest round from the committed
heldout-small store (one real batch of the frame), builds their prompts on the embedded model, and
generates 48 tokens for the five rows (the frame's sampling, seeds 0-4) each way, each in its own
process so the peak resident set is that way's alone.
It prints wall time, the prefill positions computed (rows x longest, summed over passes: a
deterministic count), the peak resident set, and whether the five responses are the same text.

    python benchmarks/prefill_padding.py [--block 10] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "docs" / "results" / "heldout-small"


def block_prompts(lm, block: int) -> tuple[list[list[int]], int]:
    """The prompts of one real batch: the deep-rotation round of the store's ASQA block `block` (5 queries)
    whose longest prompt is the longest of the chunk, built on `lm`; and that round's number."""
    from ascp.data import load_cases

    plan = json.loads((STORE / "plan.json").read_text(encoding="utf-8"))
    task = plan["tasks"][0]
    ids = task["cases"][5 * block: 5 * block + 5]
    records = {}
    with (STORE / "units.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["task"] == task["name"] and rec["seed"] == 0 and rec["scheduler"] == "rotate":
                records[rec["case_id"]] = rec
    if any(cid not in records for cid in ids):
        sys.exit(f"block {block}: the store lacks deep rotation on some of its queries; pick a block it has.")
    rounds = len(records[ids[0]]["rounds"])
    t = max(range(rounds), key=lambda t: max(records[cid]["rounds"][t]["prompt_tokens"] for cid in ids))
    cases = {c.id: c for c in load_cases(task["data"], task["format"], rank_by="given", require_pool=False)
             if c.id in ids}
    prompts = []
    for cid in ids:
        context = [cases[cid].passage(pid) for pid in records[cid]["rounds"][t]["context"]]
        prompts.append(list(lm.encode_prompt(cases[cid].question, context).ids))
    return prompts, t + 1


def one_way(way: str, block: int) -> dict:
    import dataclasses

    from ascp.lm.hf import length_groups
    from ascp.lm.prefixes import PrefixStore
    from ascp.lm.resolve import load_language_model
    from ascp.lm.sampling import SamplingConfig

    lm = load_language_model("default", backend="hf")
    prompts, round_number = block_prompts(lm, block)
    lengths = [len(p) for p in prompts]
    if way == "padded":
        lm = dataclasses.replace(lm, prefixes=None)
        passes = [list(range(len(prompts)))]
    else:
        lm = dataclasses.replace(lm, prefixes=PrefixStore(2**31))
        passes = length_groups(lengths)
    config = SamplingConfig(temperature=0.7, top_p=1.0, top_k=0, max_new_tokens=48)
    start = time.perf_counter()
    out = lm.generate(prompts, config, list(range(len(prompts))), batch_size=16)
    seconds = time.perf_counter() - start
    return {"way": way, "seconds": seconds, "lengths": lengths, "round": round_number,
            "prefill_positions": sum(len(g) * max(lengths[i] for i in g) for g in passes),
            "passes": len(passes), "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "texts": [g.text for g in out]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=10,
                        help="ASQA block of 5 queries in the store (block 10 holds a 7,219-token rotation prompt)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--way", choices=["padded", "grouped"], help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    if args.way:
        print(json.dumps(one_way(args.way, args.block)))
        return
    rows = {}
    for way in ("padded", "grouped"):
        done = subprocess.run([sys.executable, __file__, "--way", way, "--block", str(args.block)],
                              capture_output=True, text=True, check=True)
        rows[way] = json.loads(done.stdout.strip().splitlines()[-1])
    pad, grp = rows["padded"], rows["grouped"]
    print(f"ASQA block {args.block} of the heldout-small store, deep rotation round {pad['round']}: prompts of "
          f"{pad['lengths']} tokens; "
          f"{platform.processor() or platform.machine()}, torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}")
    print("| way | passes | prefill positions | seconds (prefill + 48 tokens) | peak RSS GB |")
    print("|---|---|---|---|---|")
    for r in (pad, grp):
        print(f"| {r['way']} | {r['passes']} | {r['prefill_positions']:,} | {r['seconds']:.1f} "
              f"| {r['peak_rss_gb']:.1f} |")
    print(f"ratio padded / grouped: positions {pad['prefill_positions'] / grp['prefill_positions']:.2f}, "
          f"seconds {pad['seconds'] / grp['seconds']:.2f}, peak RSS {pad['peak_rss_gb'] / grp['peak_rss_gb']:.2f}")
    same = sum(a == b for a, b in zip(pad["texts"], grp["texts"], strict=True))
    print(f"responses the same text: {same} of {len(pad['texts'])}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
