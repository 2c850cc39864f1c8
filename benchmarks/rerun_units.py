"""Committed units re-derived by today's code: some units of a store dropped, run again, compared.

The store is copied into a scratch folder (its `report/` left out, and no request cache, so nothing
is answered from a cache), the chosen units are removed from the copy's `units.jsonl`, and
`ascp experiment run` resumes the copy from its own `spec.yaml`; its `plan.json` pins the cases, seeds
and conditions, so exactly the removed units run. Each rerun unit is compared with the committed record:
every round's context ids and response text, the metrics of texts and used decisions (`DECIDED`, equal
or not), and the largest absolute difference of any probe score (nats per response token) and of the
metrics built on scores or embeddings (`CONTINUOUS`): floats, which may move in their last bits with the
batch a prompt was scored in. Choose a whole block of the executor (5 consecutive cases)
so the rerun batches as the original run did.

Prints one row per unit and writes them to --out (markdown, with the command, the machine and the
commit). Exits 1 when a context, a response or a decided metric differs.

    python benchmarks/rerun_units.py docs/results/heldout-small --task hotpotqa --seed 0 \\
        --cases 90-94 --conditions ascp,vanilla --data-root ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recompute_results import _same as same_number  # noqa: E402  (one rule for "the same number")

from ascp.errors import AscpError  # noqa: E402
from ascp.experiments.spec import parse_positions  # noqa: E402

DECIDED = ("pr", "best_single", "ecr", "ecr_thresholded", "offered", "used", "used_thresholded", "ceiling",
           "groundedness", "distinct_1", "distinct_2", "distinct_3", "self_bleu")
"""Metrics of the texts and of the used decisions: equal (recompute_results' rule, 1e-9 relative) when the
rerun re-derives the unit."""
CONTINUOUS = ("concentration", "semantic_diversity")
"""Metrics of the probe's float scores and of embeddings: equal up to float rounding."""


def chosen(record: dict[str, Any], task: str, seed: int, cases: set[str], policies: set[str]) -> bool:
    return (record["task"] == task and record["seed"] == seed and record["case_id"] in cases
            and record["policy"] in policies)


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What differs between a committed unit and its rerun."""
    pairs = list(zip(old["rounds"], new["rounds"], strict=True))
    score_diff = 0.0
    for a, b in pairs:
        for pid in set(a["scores"]) | set(b["scores"]):
            score_diff = max(score_diff, abs(a["scores"].get(pid, 0.0) - b["scores"].get(pid, 0.0)))
    return {"case": old["case_id"], "condition": old["policy"], "rounds": len(pairs),
            "contexts_equal": sum(a["context"] == b["context"] for a, b in pairs),
            "responses_equal": sum(a["response"] == b["response"] for a, b in pairs),
            "metrics_differing": [m for m in DECIDED if m in old and not same_number(old[m], new.get(m))],
            "max_score_diff": score_diff,
            "max_continuous_diff": max(abs(old[m] - new[m]) for m in CONTINUOUS if m in old),
            "seconds_then": old["seconds"], "seconds_now": new["seconds"]}


def commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return proc.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("store", type=Path, help="an experiment store (plan.json, spec.yaml, units.jsonl)")
    parser.add_argument("--task", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--cases", required=True, help="0-based positions in the task's plan cases: FIRST-LAST or one")
    parser.add_argument("--conditions", required=True, help="policies, comma-separated: ascp,vanilla")
    parser.add_argument("--data-root", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="markdown file for the table (default: none)")
    args = parser.parse_args(argv)

    store = args.store
    if not (store / "plan.json").is_file() or not (store / "spec.yaml").is_file():
        print(f"{store} is not an experiment store (no plan.json or spec.yaml); give the store's folder.",
              file=sys.stderr)
        return 2
    plan = json.loads((store / "plan.json").read_text(encoding="utf-8"))
    tasks = {t["name"]: t["cases"] for t in plan["tasks"]}
    if args.task not in tasks:
        print(f"--task {args.task!r} is not in {store}/plan.json; its tasks: {', '.join(tasks)}.", file=sys.stderr)
        return 2
    try:
        first, last = parse_positions("--cases", args.cases)
    except AscpError:
        print(f"--cases {args.cases!r}: give FIRST-LAST, 0-based positions in the task's plan cases with "
              "FIRST <= LAST (e.g. 90-94), or one position.", file=sys.stderr)
        return 2
    if last >= len(tasks[args.task]):
        print(f"--cases {args.cases!r}: task {args.task} has {len(tasks[args.task])} cases; give positions below "
              "that, e.g. 90-94.", file=sys.stderr)
        return 2
    cases = set(tasks[args.task][first:last + 1])
    policies = {p.strip() for p in args.conditions.split(",") if p.strip()}
    lines = (store / "units.jsonl").read_text(encoding="utf-8").splitlines()
    committed = {(r["case_id"], r["condition"]): r for r in map(json.loads, lines)
                 if chosen(r, args.task, args.seed, cases, policies)}
    if not committed:
        print(f"{store}/units.jsonl holds no unit of task {args.task}, seed {args.seed}, cases {args.cases} and "
              f"conditions {args.conditions}; check them against plan.json.", file=sys.stderr)
        return 2

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rerun-units-") as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(store, copy, ignore=shutil.ignore_patterns("report", "requests.sqlite*", "steer-measure"))
        kept = [line for line in lines if not chosen(json.loads(line), args.task, args.seed, cases, policies)]
        (copy / "units.jsonl").write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        command = [sys.executable, "-m", "ascp.cli", "experiment", "run", str(copy / "spec.yaml"), "--out", str(copy)]
        if args.data_root is not None:
            command += ["--data-root", str(args.data_root.resolve())]
        print(f"rerunning {len(committed)} units in {copy}", file=sys.stderr)
        proc = subprocess.run(command, cwd=ROOT)
        if proc.returncode != 0:
            print(f"ascp experiment run exited {proc.returncode}; the units were not rerun.", file=sys.stderr)
            return 1
        rerun = {(r["case_id"], r["condition"]): r
                 for r in map(json.loads, (copy / "units.jsonl").read_text(encoding="utf-8").splitlines())
                 if chosen(r, args.task, args.seed, cases, policies)}
    wall = time.perf_counter() - started
    missing = sorted(set(committed) - set(rerun))
    if missing:
        print(f"{len(missing)} units did not come back from the rerun, e.g. {missing[0]}.", file=sys.stderr)
        return 1

    rows = [compare(committed[key], rerun[key]) for key in sorted(committed)]
    header = ("| case | condition | contexts equal | responses equal | decided metrics differing "
              "| max abs score diff | max abs diff, concentration and semantic diversity | seconds (committed) "
              "| seconds (rerun) |\n|---|---|---|---|---|---|---|---|---|")
    body = "\n".join(
        f"| {r['case']} | {r['condition']} | {r['contexts_equal']}/{r['rounds']} "
        f"| {r['responses_equal']}/{r['rounds']} | {', '.join(r['metrics_differing']) or 'none'} "
        f"| {r['max_score_diff']:.1e} | {r['max_continuous_diff']:.1e} | {r['seconds_then']:.1f} "
        f"| {r['seconds_now']:.1f} |" for r in rows)
    identical = sum(r["contexts_equal"] == r["responses_equal"] == r["rounds"] and not r["metrics_differing"]
                    for r in rows)
    summary = (f"{identical} of {len(rows)} units re-derived (every context, response and decided metric equal); "
               f"largest probe-score difference {max(r['max_score_diff'] for r in rows):.1e} nats per token, "
               f"largest difference of concentration or semantic diversity "
               f"{max(r['max_continuous_diff'] for r in rows):.1e}; {wall:.0f} s wall.")
    shown = [os.path.relpath(a) if Path(a).exists() else a for a in (sys.argv[1:] if argv is None else argv)]
    text = (f"`python benchmarks/rerun_units.py {' '.join(shown)}` at commit {commit()}; "
            f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}, Python "
            f"{platform.python_version()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}.\n\n"
            f"{header}\n{body}\n\n{summary}\n")
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0 if identical == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
