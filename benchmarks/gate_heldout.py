"""`gated` against exact `loo` on held-out contexts, under the probe's threshold rule: tau(k) and fixed thresholds.

Contexts come from ASQA positions 0-122 of `../shared/data/asqa/asqa_wikidpr_pools.json`, which the
embedded model's attention map never saw (fitted on HotpotQA 0-127, band sized on HotpotQA 200-249),
drawn as `benchmarks/fast_probe.py` draws them (the next eligible item per width, k passages in random
order), each with the model's own sampled response. Exact `loo` scores each context once; then, per
threshold rule, `gated` probes it through `probe_response` with that rule, so the gate settles the
decisions the reading makes (`ProbeInput.threshold`). Rows: per rule and width, the share of passage
`used` decisions equal to `loo`'s under the same rule, the share of contexts whose whole used set is
`loo`'s, the share of passages `gated` scored exactly, and the tokens it fed against `loo`'s.

    python benchmarks/gate_heldout.py --out docs/results/fast-probe/gate-heldout [--ks 5,10] [--contexts 8]
        [--thresholds 0.1,0.2,0.35]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fast_probe import DEFAULT_POOLS, POSITIONS, draw  # noqa: E402  (the same held-out contexts)

ROOT = Path(__file__).resolve().parents[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json and table.md")
    parser.add_argument("--ks", default="5,10", help="context widths (default 5,10)")
    parser.add_argument("--contexts", type=int, default=8, help="contexts per width (default 8)")
    parser.add_argument("--thresholds", default="0.1,0.2,0.35", help="fixed thresholds besides tau(k)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS)
    args = parser.parse_args(argv)

    import numpy as np

    from ascp.api import load_model
    from ascp.attribution import make_estimator
    from ascp.attribution.base import ProbeInput
    from ascp.attribution.probe import probe_response, sample_responses
    from ascp.data import load_cases_with_order
    from ascp.lm.prefixes import fresh_prefixes
    from ascp.lm.sampling import SamplingConfig, derive_seed
    from ascp.reading import normalize, used_cut, used_mask

    ks = [int(k) for k in args.ks.split(",")]
    rules: list[tuple[str, float | None]] = [("tau(k)", None)]
    rules += [(f"{float(t):g}", float(t)) for t in args.thresholds.split(",") if t.strip()]
    cases, _ = load_cases_with_order(args.pools, format="asqa", rank_by="given", positions=POSITIONS)
    drawn = draw(cases, ks, [args.contexts] * len(ks), args.seed)
    lm = load_model("default", backend="hf")
    prompts = [lm.encode_prompt(case.question, passages) for _, _, case, passages in drawn]
    seeds = [derive_seed(args.seed, f"fast-probe:{case.id}") for _, _, case, _ in drawn]
    responses = sample_responses(lm, prompts, SamplingConfig(max_new_tokens=args.max_new_tokens), seeds, batch_size=1)
    loo, gated = make_estimator("loo"), make_estimator("gated")
    contexts: list[dict[str, Any]] = []
    began = time.perf_counter()
    for (k, position, case, passages), prompt, (text, ids) in zip(drawn, prompts, responses, strict=True):
        if not ids:
            continue
        item = ProbeInput(case.question, passages, prompt, text, ids)
        fresh_prefixes(lm)
        exact = probe_response(lm, loo, item)
        row: dict[str, Any] = {"k": k, "position": position, "case": case.id, "loo": exact.raw.tolist(),
                               "loo_tokens": exact.tokens_processed, "rules": {}}
        for rule, threshold in rules:
            fresh_prefixes(lm)  # each rule pays its own passes, as a probe of its own would
            read = probe_response(lm, gated, item, threshold)
            cut = used_cut(k, threshold)
            equal = used_mask(normalize(read.raw), cut) == used_mask(normalize(exact.raw), cut)
            row["rules"][rule] = {"same": int(equal.sum()), "whole": bool(equal.all()),
                                  "verified": int(read.extra["verified"]), "tokens": read.tokens_processed}
        contexts.append(row)
        print(f"k={k} position {position}: " + ", ".join(
            f"{rule} {r['same']}/{k} ({r['verified']} exact)" for rule, r in row["rules"].items()), flush=True)
    seconds = time.perf_counter() - began
    summary = []
    for rule, _ in rules:
        for k in [*ks, "all"]:
            at = [c for c in contexts if k == "all" or c["k"] == k]
            passages = sum(c["k"] for c in at)
            summary.append({
                "rule": rule, "k": k, "contexts": len(at),
                "used_agreement": sum(c["rules"][rule]["same"] for c in at) / passages,
                "used_set_equal": float(np.mean([c["rules"][rule]["whole"] for c in at])),
                "verified_share": sum(c["rules"][rule]["verified"] for c in at) / passages,
                "tokens_vs_loo": sum(c["rules"][rule]["tokens"] for c in at) / sum(c["loo_tokens"] for c in at),
            })
    table = ["| rule | k | contexts | used agreement with loo | used set equal | verified | tokens vs loo |",
             "|---|---|---|---|---|---|---|"]
    table += [f"| {s['rule']} | {s['k']} | {s['contexts']} | {s['used_agreement']:.3f} | {s['used_set_equal']:.3f} | "
              f"{s['verified_share']:.3f} | {s['tokens_vs_loo']:.2f} |" for s in summary]
    print("\n".join(table))
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/gate_heldout.py " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    result = {"command": command.strip(), "machine": machine, "seconds": round(seconds, 1),
              "data": f"ASQA positions {POSITIONS[0]}-{POSITIONS[1]}", "summary": summary, "contexts": contexts}
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / "table.md").write_text(f"`{result['command']}`; {machine}; {seconds:.0f} s of probing; contexts from "
                                       f"{result['data']} (held out from the map's fit)\n\n" + "\n".join(table) + "\n",
                                       encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
