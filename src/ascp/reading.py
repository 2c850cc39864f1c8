"""The probe's reading: raw scores -> normalised scores -> the passages counted as used.

Two rules decide "used", and each has its own name everywhere (code, records, reports, docs):

- **tau(k) used** (`used_mask`, `read_scores`; `Round.used`, `AttributionResult.used`, the record
  key `used`): the normalised score a(d) = [raw(d)]_+ / sum [raw]_+ reaches tau(k) =
  0.555 k^-0.633, the paper's free-generation threshold (Sec. 4.4), or a fixed threshold the user
  gives. This is what the loop feeds back to the schedulers.
- **thresholded used** (`raw_used`; `ascp.metrics.portfolio.thresholded_used`, the record keys
  `used_thresholded` / `ecr_thresholded`): the raw score (nats per response token for `loo`)
  reaches one width-invariant threshold tau*, `USED_THRESHOLD` by default (calibrated by
  `ascp calibrate`, docs/calibration.md). This is the ECR of the paper's tables.

Everything here is a cheap function of stored numbers: no model, no I/O but reading a
calibration file in `resolve_used_threshold`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from ascp.errors import AscpError
from ascp.params import is_number

PAPER_FREE_SCALE = 0.555
"""a of the paper's tau(k) = a k^b (Sec. 4.4, fitted on free generations)."""
PAPER_FREE_EXPONENT = -0.633
"""b of the paper's tau(k) = a k^b."""

USED_THRESHOLD = 0.0760
"""The default width-invariant used threshold on raw `loo` scores (nats per response token): tau* of
`ascp calibrate` on the committed ASQA validation run with the embedded model (20 cases, widths 3
and 6, fixed targets; 95% CI [0.0315, 0.1100]); docs/calibration.md gives the command and says when to
calibrate your own."""


def normalize(raw: ArrayLike) -> np.ndarray:
    """a(d) = [raw(d)]_+ / sum_d' [raw(d')]_+ ; all zeros when no score is positive."""
    pos = np.clip(np.asarray(raw, dtype=np.float64), 0.0, None)
    total = pos.sum()
    return pos / total if total > 0 else pos


def free_threshold(k: int, scale: float = PAPER_FREE_SCALE, exponent: float = PAPER_FREE_EXPONENT) -> float:
    """The paper's free-generation threshold tau(k) = 0.555 k^-0.633 on normalised scores."""
    return scale * float(k) ** exponent


def used_cut(k: int, threshold: float | None = None) -> float:
    """THE threshold rule, written once: the cut on normalised scores a reading of k passages applies
    (None: the free-generation tau(k); a number: that fixed threshold). The probe's reading, the
    gate of `gated`, the fit's band sizing and the schedulers' similarity feedback all read it here."""
    return free_threshold(k) if threshold is None else float(threshold)


def used_mask(normalized: ArrayLike, threshold: float) -> np.ndarray:
    """The tau(k) rule: a passage is used when its normalised score reaches the threshold (and is positive)."""
    a = np.asarray(normalized, dtype=np.float64)
    return (a >= threshold) & (a > 0)


def raw_used(raw: float, threshold: float = USED_THRESHOLD) -> bool:
    """The thresholded rule: a raw score counts as used when it is finite, positive and reaches the
    width-invariant threshold (ties within relative tolerance 1e-9)."""
    raw = float(raw)
    return math.isfinite(raw) and raw > 0 and (raw >= threshold or math.isclose(raw, threshold, rel_tol=1e-9))


def check_used_threshold(tau: float) -> float:
    """tau itself, when it is a usable raw threshold (positive and finite); ValueError otherwise."""
    tau = float(tau)
    if not (tau > 0.0 and math.isfinite(tau)):
        raise ValueError(f"the used threshold must be a positive number, got {tau}")
    return tau


def check_threshold(threshold: object, where: str = "threshold") -> None:
    """Refuse a fixed tau(k)-rule threshold that is not a finite number in [0, 1] (None: tau(k) itself).

    Normalised scores lie in [0, 1], so a threshold past 1 marks nothing used and a negative or NaN
    one would make the used set meaningless; 0 counts every positive-scored passage as used."""
    if threshold is None:
        return
    if not is_number(threshold) or not 0.0 <= float(threshold) <= 1.0:
        raise AscpError(f"{where} must be a number in [0, 1] on normalised scores (or None for tau(k) = "
                        f"0.555 k^-0.633), got {threshold!r}; pass e.g. 0.2.")


@dataclass(frozen=True)
class Reading:
    """Raw scores turned into the probe's reading of one context (all keyed by passage id)."""

    scores: dict[str, float]
    normalized: dict[str, float]
    used: tuple[str, ...]
    threshold: float | None
    """The cut `used` was read at; None only for a reading taken back from a record written before
    records stated it."""


def read_scores(ids: Sequence[str], raw: ArrayLike, threshold: float | None = None) -> Reading:
    """Normalise raw scores and apply the tau(k) rule (None: the free-generation tau(k); else a fixed
    threshold on normalised scores)."""
    ids = list(ids)
    norm = normalize(raw)
    cut = used_cut(len(ids), threshold)
    used = used_mask(norm, cut)
    return Reading(
        scores={d: float(s) for d, s in zip(ids, np.asarray(raw, dtype=np.float64), strict=True)},
        normalized={d: float(s) for d, s in zip(ids, norm, strict=True)},
        used=tuple(d for d, u in zip(ids, used, strict=True) if u),
        threshold=cut,
    )


def read_span(ids: Sequence[str], full: ArrayLike, ablated: ArrayLike, tokens: Sequence[int],
              threshold: float | None = None) -> Reading:
    """The single-passage ablation reading restricted to some response tokens: per-token LOO
    (full minus ablated log-probability) averaged over `tokens` only. full: shape (n,); ablated:
    shape (k, n), one row per passage in `ids` order."""
    f = np.asarray(full)[list(tokens)]
    a = np.asarray(ablated)[:, list(tokens)]
    return read_scores(ids, f.mean() - a.mean(axis=1), threshold)


class UsedThreshold(NamedTuple):
    """The width-invariant used threshold tau* on raw scores, and where it came from (for captions)."""

    value: float
    source: str


def resolve_used_threshold(value: UsedThreshold | str | float | None) -> UsedThreshold:
    """`--used-threshold` read once, where it enters: None = `USED_THRESHOLD`; a positive number (raw
    scale); or an `ascp calibrate` folder or its calibration.json (its width-invariant threshold). An
    already resolved `UsedThreshold` is returned as it is, so the layers below never read it again."""
    import json
    from pathlib import Path

    if isinstance(value, UsedThreshold):
        return value
    if value is None:
        return UsedThreshold(USED_THRESHOLD, "the calibrated default (docs/calibration.md)")
    try:
        tau = float(value)
        source = "given"
    except ValueError:
        path = Path(str(value)).expanduser()
        path = path / "calibration.json" if path.is_dir() else path
        if not path.is_file():
            raise AscpError(f"--used-threshold {value!r} is neither a number nor an `ascp calibrate` folder or "
                            "calibration.json; pass a positive threshold (nats per token) or that file.") from None
        try:
            tau = float(json.loads(path.read_text(encoding="utf-8"))["width_invariant_threshold"]["value"])
        except (ValueError, KeyError, TypeError):
            raise AscpError(f"{path} holds no width-invariant threshold; pass the calibration.json written by "
                            "`ascp calibrate`.") from None
        source = str(path)
    if not tau > 0.0 or not math.isfinite(tau):
        raise AscpError(f"--used-threshold must be a positive number, got {tau}; it applies to raw probe scores "
                        "(nats per response token for loo).")
    return UsedThreshold(tau, source)
