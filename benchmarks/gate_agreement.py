"""The gate of `gated`, replayed on the embedded model's committed fit readings, under each threshold rule.

Every reading in `docs/results/fast-probe/fit-readings.jsonl.gz` holds one context's attention
features, knockout scores and exact `loo` scores (HotpotQA; the shipped map was fitted on positions
0-127 and its band sized on 200-249 at tau(k)). The gate is replayed with the exact scores standing
in for the exact passes (`ascp.fitprobe.fit.agreement`, what `ascp fit-probe` reports),
so each row is the share of passage `used` decisions equal to exact `loo`'s under the same rule, and
the share of passages the gate scored exactly, with no model run. Rows, per split and rule:

- `gate`: the gate as it runs now: it settles the probe's own rule (tau(k), or the fixed threshold
  the probe reads at) and re-checks every decision its predictions can still move, verified passages
  included;
- `before`: the earlier gate, which re-checked unverified passages only;
- `tau(k) gate, fixed reading` (fixed thresholds only): the earlier estimator's behaviour when the probe
  read `used` at a fixed threshold while the gate settled tau(k)'s decisions.

    python benchmarks/gate_agreement.py [--readings docs/results/fast-probe/fit-readings.jsonl.gz]
        [--thresholds 0.1,0.2,0.35] [--out docs/results/fast-probe/gate]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_READINGS = ROOT / "docs" / "results" / "fast-probe" / "fit-readings.jsonl.gz"
SPLITS = {"train": (0, 127), "dev": (200, 249)}


def gate_before(predicted: np.ndarray, threshold: float, band: float,
                exact: Callable[[list[int]], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The earlier gate, for the side-by-side row: the last passage, then unverified unsettled ones only."""
    from ascp.attribution.gated import unsettled

    raw = np.array(predicted, dtype=np.float64)
    verified = np.zeros(len(raw), dtype=bool)
    todo = [len(raw) - 1]
    while todo:
        raw[todo] = exact(todo)
        verified[todo] = True
        todo = [int(i) for i in np.flatnonzero(unsettled(raw, verified, threshold, band) & ~verified)]
    return raw, verified


def replay(fitted: Any, contexts: Sequence[Any], band: float, gate_cut: Callable[[int], float],
           read_cut: Callable[[int], float], before: bool) -> dict[str, float]:
    """Agreement of `used` with exact loo (passages, whole contexts) and the share verified."""
    from ascp.attribution.gated import gate
    from ascp.reading import normalize, used_mask

    same = verified = total = whole = 0
    for c in contexts:
        run = gate_before if before else gate
        raw, exact = run(c.predicted(fitted), gate_cut(c.k), band, lambda idx, c=c: c.loo[idx])
        agree = used_mask(normalize(raw), read_cut(c.k)) == used_mask(normalize(c.loo), read_cut(c.k))
        same += int(agree.sum())
        whole += int(agree.all())
        verified += int(exact.sum())
        total += c.k
    return {"agreement": same / total, "contexts_equal": whole / len(contexts), "verified_share": verified / total,
            "passages": total, "contexts": len(contexts)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=Path, default=DEFAULT_READINGS)
    parser.add_argument("--thresholds", default="0.1,0.2,0.35", help="fixed thresholds on normalised scores")
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json and table.md")
    args = parser.parse_args(argv)
    from ascp.attribution.attention_map import SHIPPED, load_map
    from ascp.fitprobe.readings import FitReadings
    from ascp.reading import free_threshold

    fixed = [float(t) for t in args.thresholds.split(",") if t.strip()]
    fitted = load_map(SHIPPED / "smollm2-135m-instruct.json")
    with gzip.open(args.readings, "rt", encoding="utf-8") as handle:
        text = handle.read()
    identity = json.loads(text.split("\n", 1)[0])["identity"]
    with tempfile.TemporaryDirectory() as scratch:
        plain = Path(scratch) / "readings.jsonl"
        plain.write_text(text, encoding="utf-8")
        contexts = [c for c in FitReadings(plain, identity).load().values() if c.knockout is not None]
    rows = []
    for split, (first, last) in SPLITS.items():
        chosen = sorted((c for c in contexts if first <= c.position <= last), key=lambda c: c.position)
        rules: list[tuple[str, Callable[[int], float]]] = [("tau(k)", free_threshold)]
        rules += [(f"{t:g}", lambda k, t=t: t) for t in fixed]
        for rule, cut in rules:
            rows.append({"split": split, "rule": rule, "gate": "gate",
                         **replay(fitted, chosen, fitted.band, cut, cut, before=False)})
            rows.append({"split": split, "rule": rule, "gate": "before",
                         **replay(fitted, chosen, fitted.band, cut, cut, before=True)})
            if rule != "tau(k)":
                rows.append({"split": split, "rule": rule, "gate": "tau(k) gate, fixed reading",
                             **replay(fitted, chosen, fitted.band, free_threshold, cut, before=True)})
    header = "| split | rule | gate | used agreement with loo | contexts equal | verified |\n|---|---|---|---|---|---|"
    lines = [header] + [f"| {r['split']} ({r['contexts']} contexts, {r['passages']} passages) | {r['rule']} | "
                        f"{r['gate']} | {r['agreement']:.4f} | {r['contexts_equal']:.3f} | "
                        f"{r['verified_share']:.3f} |" for r in rows]
    table = "\n".join(lines)
    print(f"band {fitted.band} (the shipped map of the embedded model)")
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/gate_agreement.py " + " ".join(argv if argv is not None else sys.argv[1:])
        result = {"command": command.strip(),
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                  "band": fitted.band, "readings": str(args.readings.resolve().relative_to(ROOT))
                  if args.readings.resolve().is_relative_to(ROOT) else args.readings.name, "rows": rows}
        (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        (args.out / "table.md").write_text(f"`{result['command']}`; band {fitted.band}\n\n{table}\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
