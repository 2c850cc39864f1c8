"""How much a fit's readings allow `gated` to skip: the map's error against the margin its decisions need.

Reads a readings file of `ascp fit-probe --readings FILE` (no model, no token fed), fits the map
on the training positions as `ascp fit-probe` does (`ascp.fitprobe.fit.fit_weights`),
and prints, on the development positions:

- the map's error in nats per response token (mean absolute and root mean square) next to the
  spread of exact `loo` itself;
- the share of passages whose exact `loo` lies within d nats of the score at which its tau(k)
  `used` decision flips (the other passages' exact scores held): any surrogate with an error of
  about d must send those passages to the exact pass to keep the decision;
- for each agreement target, the smallest band of `BAND_GRID` that reaches it and the share of
  passages it verifies (what `ascp fit-probe --target` would choose).

    python benchmarks/fit_headroom.py --readings READINGS.jsonl [--train 0-199] [--dev 200-249]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=Path, required=True, help="a readings file of ascp fit-probe")
    parser.add_argument("--train", default="0-199", help="training positions FIRST-LAST (default 0-199)")
    parser.add_argument("--dev", default="200-249", help="development positions FIRST-LAST (default 200-249)")
    parser.add_argument("--targets", default="0.90,0.95,0.98,0.99", help="agreement targets to size bands for")
    return parser.parse_args(argv)


def flip_distance(loo: np.ndarray) -> np.ndarray:
    """Per passage, how far (nats) its exact score is from the score at which its `used` flips: passage
    i is used when pos(s_i) / sum_j pos(s_j) >= tau, i.e. s_i >= tau / (1 - tau) * sum_{j != i} pos(s_j)."""
    from ascp.reading import free_threshold

    tau = free_threshold(len(loo))
    positive = np.maximum(loo, 0.0)
    return np.abs(loo - tau / (1 - tau) * (positive.sum() - positive))


def main(argv: Sequence[str] | None = None) -> int:
    from ascp.attribution.attention_map import AttentionMap
    from ascp.errors import AscpError
    from ascp.experiments.spec import parse_positions
    from ascp.fitprobe.fit import agreement, fit_weights, size_band
    from ascp.fitprobe.readings import FitReadings

    args = parse_args(argv)
    try:
        first = args.readings.read_text(encoding="utf-8").split("\n", 1)[0]
        identity = json.loads(first)["identity"]
        contexts = sorted(FitReadings(args.readings, identity).load().values(), key=lambda c: c.position)
        (a, b), (c, d) = parse_positions("--train", args.train), parse_positions("--dev", args.dev)
    except (OSError, ValueError, KeyError, AscpError) as error:
        raise SystemExit(f"cannot read {args.readings}: {error}") from None
    train = [x for x in contexts if a <= x.position <= b]
    dev = [x for x in contexts if c <= x.position <= d]
    if not train or not dev:
        raise SystemExit(f"{args.readings}: no readings at the training ({args.train}) or development ({args.dev}) "
                         "positions; give the ranges the fit read.")
    weights, knockout, intercept, alpha = fit_weights(train)
    fitted = AttentionMap(weights, knockout, intercept, float("inf"), "readings", "", "")
    predicted = np.concatenate([x.predicted(fitted) for x in dev])
    knocked = np.concatenate([np.asarray(x.knockout) for x in dev])
    exact = np.concatenate([x.loo for x in dev])
    error = predicted - exact
    print(f"{args.readings}: {len(train)} training contexts ({sum(x.k for x in train)} passages), {len(dev)} "
          f"development contexts ({len(exact)} passages); ridge alpha {alpha:g}")
    print(f"knockout weight {knockout:.3f}; knockout alone, error on dev: mean absolute "
          f"{np.abs(knocked - exact).mean():.3f}")
    print(f"map error on dev, nats/token: mean absolute {np.abs(error).mean():.3f}, root mean square "
          f"{np.sqrt((error ** 2).mean()):.3f}; exact loo: mean absolute {np.abs(exact).mean():.3f}, "
          f"standard deviation {exact.std():.3f}")
    distance = np.concatenate([flip_distance(x.loo) for x in dev])
    widths = np.concatenate([[x.k] * x.k for x in dev])
    print("\n| d (nats) | dev passages within d of their flip | " + " | ".join(f"k = {k}" for k in sorted(set(widths)))
          + " |\n|---|---|" + "---|" * len(set(widths)))
    for limit in (0.01, 0.02, 0.05, 0.1, 0.2):
        by_k = " | ".join(f"{np.mean(distance[widths == k] <= limit):.0%}" for k in sorted(set(widths)))
        print(f"| {limit} | {np.mean(distance <= limit):.0%} | {by_k} |")
    alone, _ = agreement(fitted, dev, None)
    print(f"\nthe map alone: used agreement {alone:.3f} on dev\n\n| target | band | dev agreement | dev passages "
          "verified |\n|---|---|---|---|")
    for target in (float(t) for t in args.targets.split(",")):
        band = size_band(fitted, dev, target)
        reached, verified = agreement(fitted, dev, band)
        print(f"| {target:.2f} | {band:.4f} | {reached:.3f} | {verified:.0%} |")  # the last passage counts as verified
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
