"""Two experiment stores of the same plan probed with different estimators, compared round by round.

A round is paired when both stores hold it with the same context and the same response (the
same seeds give the same responses until a closed-loop scheduler reads a different probe). Per
condition (the estimator's name dropped from the key): paired rounds, agreement of the candidate's
`used` decision with the reference's on every passage of those rounds, and the units' seconds
summed in each store, with their ratio; where both stores record them (stores written since
rounds kept `probe_tokens`), the tokens the probe fed and its seconds (a round's seconds less its
generation's) on the paired rounds, with their ratios. One store holding both estimators is read
with `--reference-estimator` and `--candidate-estimator`.

    python benchmarks/paired_stores.py --reference docs/results/cpu-small \
        --candidate docs/results/cpu-small-gated
    python benchmarks/paired_stores.py --reference STORE --candidate STORE \
        --reference-estimator loo --candidate-estimator gated
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="the store probed with the reference (loo)")
    parser.add_argument("--candidate", type=Path, required=True, help="the store probed with the candidate")
    parser.add_argument("--reference-estimator", default=None, help="read only the reference store's units of "
                        "this estimator (default: all)")
    parser.add_argument("--candidate-estimator", default=None, help="read only the candidate store's units of "
                        "this estimator (default: all)")
    return parser.parse_args(argv)


def without_estimator(condition: str) -> str:
    return re.sub(r"estimator=[^,)]*,?", "", condition).replace(",)", ")")


def by_key(units: Sequence[dict[str, Any]], estimator: str | None) -> dict[tuple[str, str, int, str], dict[str, Any]]:
    return {(u["task"], u["model"], u["seed"], u["case_id"], without_estimator(u["condition"])): u  # type: ignore[misc]
            for u in units if estimator is None or u["estimator"] == estimator}


def main(argv: Sequence[str] | None = None) -> int:
    from ascp.errors import AscpError
    from ascp.records.reader import read_units

    args = parse_args(argv)
    try:
        reference = by_key(read_units(args.reference), args.reference_estimator)
        candidate = by_key(read_units(args.candidate), args.candidate_estimator)
    except AscpError as error:
        raise SystemExit(str(error)) from None
    cells: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key, ref in reference.items():
        cand = candidate.get(key)
        if cand is None:
            continue
        cell = cells[key[-1]]
        cell["units"] += 1
        cell["reference_seconds"] += ref["seconds"]
        cell["candidate_seconds"] += cand["seconds"]
        for a, b in zip(ref["rounds"], cand["rounds"], strict=False):
            cell["rounds"] += 1
            if a["context"] != b["context"] or a["response"] != b["response"]:
                continue
            cell["paired"] += 1
            if "probe_tokens" in a and "probe_tokens" in b:
                cell["probed"] += 1
                for side, rnd in (("reference", a), ("candidate", b)):
                    cell[f"{side}_probe_tokens"] += rnd["probe_tokens"]
                    cell[f"{side}_probe_seconds"] += rnd["seconds"] - rnd["generation_seconds"]
            for pid in a["context"]:
                cell["passages"] += 1
                cell["same"] += (pid in a["used"]) == (pid in b["used"])
    print(f"reference {args.reference}, candidate {args.candidate}\n")
    probed = any(cell["probed"] for cell in cells.values())
    print("| condition | units | paired rounds | used agreement | reference s | candidate s | ratio |"
          + (" probe tokens (ref / cand) | ratio | probe s (ref / cand) | ratio |" if probed else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|---|---|" if probed else ""))
    total: dict[str, float] = defaultdict(float)
    for name, cell in cells.items():
        for field, value in cell.items():
            total[field] += value
        print(row(name, cell, probed))
    print(row("all", total, probed))
    return 0


def row(name: str, cell: dict[str, float], probed: bool) -> str:
    line = (f"| {name} | {cell['units']:.0f} | {cell['paired']:.0f} / {cell['rounds']:.0f} | "
            f"{cell['same'] / max(cell['passages'], 1):.3f} ({cell['same']:.0f} / {cell['passages']:.0f}) | "
            f"{cell['reference_seconds']:.0f} | {cell['candidate_seconds']:.0f} | "
            f"{cell['candidate_seconds'] / max(cell['reference_seconds'], 1e-9):.2f} |")
    if probed:
        line += (f" {cell['reference_probe_tokens']:.0f} / {cell['candidate_probe_tokens']:.0f} | "
                 f"{cell['candidate_probe_tokens'] / max(cell['reference_probe_tokens'], 1):.2f} | "
                 f"{cell['reference_probe_seconds']:.0f} / {cell['candidate_probe_seconds']:.0f} | "
                 f"{cell['candidate_probe_seconds'] / max(cell['reference_probe_seconds'], 1e-9):.2f} |")
    return line


if __name__ == "__main__":
    raise SystemExit(main())
