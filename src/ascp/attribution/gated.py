"""The gated estimator (`gated`): the attention prediction, exact leave-one-out where the decision is close.

`attention` predicts every passage's `loo` score in one pass. A passage whose predicted normalised
score lies within `band` of the used threshold (tau(k), or the fixed `threshold`) is re-scored with
exact deletion LOO through `Ablations`; the attention pass left the full prompt's keys and values in
the prefix store, so the exact passes feed the response once and then each variant's tail only.
Exact scores change the normalisation, so the band is checked again until no new passage enters it.
With a band that covers every passage the result is `loo`'s. The band is the attention map's,
sized by `ascp fit-probe` on its development split for >= 99% agreement of `used` with `loo`.

What each call did is in `GatedScores.extra`: passages verified exactly (count and ids), the band,
and the tokens fed by the attention pass and by the exact passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.ablation import REUSE_PREFIX, Ablations
from ascp.attribution.attention import WEIGHTS, AttentionEstimator
from ascp.attribution.attention_pooling import attention_pass
from ascp.attribution.base import ProbeInput, Scores
from ascp.params import Param
from ascp.reading import check_threshold, free_threshold, normalize

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


@dataclass(frozen=True)
class GatedScores(Scores):
    """`Scores` whose `extra` says what the gate did: verified (count), verified_ids, band, attention_tokens,
    exact_tokens."""


def close_to_threshold(raw: np.ndarray, threshold: float, band: float) -> np.ndarray:
    """Passages whose normalised score lies within `band` of `threshold` (a band >= 1 covers all)."""
    if band >= 1.0:
        return np.ones(len(raw), dtype=bool)
    return np.abs(normalize(raw) - threshold) <= band


def gate(predicted: np.ndarray, threshold: float, band: float,
         exact: Callable[[list[int]], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The gate, written once (the estimator and the band sizing of `ascp fit-probe` both run it):
    replace the predictions of the passages close to the threshold by `exact(indices)` until no
    new passage is close. Returns (scores, verified mask)."""
    raw = np.array(predicted, dtype=np.float64)
    verified = np.zeros(len(raw), dtype=bool)
    while True:
        todo = [int(i) for i in np.flatnonzero(close_to_threshold(raw, threshold, band)) if not verified[i]]
        if not todo:
            return raw, verified
        raw[todo] = exact(todo)
        verified[todo] = True


class GatedEstimator(AttentionEstimator):
    name = "gated"
    causal = True  # every close decision is read from exact deletions
    params: tuple[Param, ...] = (
        WEIGHTS,
        Param("band", float, None, "margin on normalised scores re-scored exactly (none: the map's fitted band; "
              "1: every passage, i.e. loo)", optional=True),
        Param("threshold", float, None, "the used threshold the band is centred on (none: tau(k), as the probe's "
              "default); give the probe's fixed threshold when it has one", optional=True),
        REUSE_PREFIX,
    )

    def __init__(self, weights: str | None = None, band: float | None = None, threshold: float | None = None,
                 reuse_prefix: bool = True) -> None:
        super().__init__(weights)
        if band is not None and not band >= 0:
            raise ValueError("band must be >= 0")
        check_threshold(threshold, "gated's threshold")
        self.band = band
        self.threshold = threshold
        self.reuse_prefix = reuse_prefix

    def score(self, lm: LanguageModel, item: ProbeInput) -> GatedScores:
        fitted = self.attention_map(lm)
        band = fitted.band if self.band is None else float(self.band)
        k = len(item.passages)
        cut = free_threshold(k) if self.threshold is None else float(self.threshold)
        read = attention_pass(lm, item.prompt, item.response_ids, self.name)
        ablations = Ablations(lm, item.prompt, item.response_ids, reuse_prefix=self.reuse_prefix)

        def exact(indices: list[int]) -> np.ndarray:
            ablated = ablations.score([{i + 1: ""} for i in indices])
            full = ablations.full_logprobs.mean()
            return np.array([full - a.mean() for a in ablated])

        raw, verified = gate(fitted.predict(read.features), cut, band, exact)
        exact_tokens = ablations.tokens_processed
        return GatedScores(
            values=raw,
            tokens_processed=read.tokens_processed + exact_tokens,
            extra={"verified": int(verified.sum()),
                   "verified_ids": [item.passages[i].id for i in np.flatnonzero(verified)],
                   "band": band, "threshold": cut, "attention_tokens": read.tokens_processed,
                   "exact_tokens": exact_tokens},
        )


__all__ = ["GatedEstimator", "GatedScores", "close_to_threshold", "gate"]
