"""The gated estimator (`gated`): the one-pass prediction, exact leave-one-out where the decision is close.

`attention` predicts every passage's `loo` score in one pass. The band is how far (nats per
response token) an exact score may lie from its prediction. A passage whose `used` decision is not
settled for every score vector within the band of the predictions is re-scored with exact deletion
LOO through `Ablations` (the threshold is the probe's own, fixed or tau(k), which reaches the
estimator as `ProbeInput.threshold`); the attention pass left the full prompt's
keys and values in the prefix store, so the exact passes feed the response once and then each
variant's tail only. The last passage is always scored exactly: deleting the last block re-feeds
only the question and the response, no more than one knockout pass. An exact score narrows the
others' uncertainty (the decision reads the sum of all positive scores), so the check repeats
until every decision is settled. With an infinite band the result is `loo`'s. The band is the
attention map's, sized by `ascp fit-probe` on its development split for >= 99% agreement of
`used` with `loo`. Up to `EXACT_UP_TO` passages the attention pass is skipped and every passage
is scored exactly.

A deletion whose prompt the model's prefix store already holds (the context was probed before,
as in every round after the first of a fixed context) costs the response's tokens, what its
knockout pass costs: such passages are scored exactly before the gate reads any prediction, and
when every deletion is stored the attention pass is skipped and the result is `loo`'s at `loo`'s
price.

Per sentence (`spans="sentences"`), a verified passage reads its exact deletion over the sentence's
tokens and the others the map over the same tokens' attention rows and knockouts; the gate settled
the whole response's decisions, not each sentence's, so a sentence's reading of an unverified passage
is the map's prediction.

What each call did is in `GatedScores.extra`: passages verified exactly (count and ids), of those
whose deletion was stored (`stored`), the band, and the tokens fed by the attention pass and by
the exact passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.ablation import REUSE_PREFIX, Ablations
from ascp.attribution.attention import WEIGHTS, AttentionEstimator, attention_model
from ascp.attribution.base import ProbeInput, Scores
from ascp.params import Param
from ascp.reading import used_cut

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


EXACT_UP_TO = 2
"""Widths scored with exact deletions only: the last passage is always verified, so at k = 2 the
attention pass (k knockout passes of the response and the pooling) could spare one deletion at
most, and costs more (docs/results/cpu-small-gated: the k = 2 cells took 1.4-2.0x loo's time)."""


@dataclass(frozen=True)
class GatedScores(Scores):
    """`Scores` whose `extra` says what the gate did: verified (count), verified_ids, stored, band,
    attention_tokens, exact_tokens."""


def unsettled(raw: np.ndarray, verified: np.ndarray, threshold: float, band: float) -> np.ndarray:
    """Passages whose tau(k) decision could change if every unverified score moved within `band` of its
    value (verified scores are exact and stay put). Verified passages are included: a passage's own
    score may be exact while its normalised score still moves with the others' sum.

    Passage i is used when its positive part reaches `threshold` times the sum of all positive
    parts, i.e. (1 - threshold) [x_i]_+ >= threshold * sum_{j != i} [x_j]_+. The decision is settled
    as used when it holds with x_i at its lowest and the others at their highest, and settled as
    not used when it fails with x_i at its highest and the others at their lowest."""
    raw = np.asarray(raw, dtype=np.float64)
    width = np.where(verified, 0.0, band)
    with np.errstate(invalid="ignore"):  # an infinite band: inf - inf never arises, inf * 0 is guarded
        low = np.clip(raw - width, 0.0, None)
        high = np.where(np.isinf(width), np.inf, np.clip(raw + width, 0.0, None))
    others_high = _sum_of_others(high)
    others_low = _sum_of_others(low)
    used = (raw - width > 0) & ((1.0 - threshold) * low >= threshold * others_high)
    with np.errstate(invalid="ignore"):
        unused = (high <= 0) | ((1.0 - threshold) * high < threshold * others_low)
    return ~used & ~unused


def _sum_of_others(values: np.ndarray) -> np.ndarray:
    """sum_{j != i} values_j per i, exact when some values are infinite."""
    finite = np.where(np.isinf(values), 0.0, values)
    infinite = np.isinf(values).sum()
    out = finite.sum() - finite
    return np.where(infinite - np.isinf(values) > 0, np.inf, out)


def gate(predicted: np.ndarray, threshold: float, band: float,
         exact: Callable[[list[int]], np.ndarray], first: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The gate, written once (the estimator and the band sizing of `ascp fit-probe` both run it):
    the last passage and the passages in `first` are scored exactly (deleting the last block
    re-feeds only the question and the response, what one knockout pass feeds; `first` are those
    whose exact pass is as cheap), then, until every decision is settled, the unsettled unverified
    passages are scored by `exact(indices)`; when a verified passage is still unsettled, only its
    neighbours can settle it, so every unverified passage whose score can be positive within the band
    is scored too. Returns (scores, verified mask). A band of 0 verifies the last passage and `first`
    only; an infinite band verifies every passage (the result is `loo`'s)."""
    raw = np.array(predicted, dtype=np.float64)
    verified = np.zeros(len(raw), dtype=bool)
    todo = sorted({*map(int, first), len(raw) - 1}) if len(raw) else []
    while todo:
        raw[todo] = exact(todo)
        verified[todo] = True
        open_ = unsettled(raw, verified, threshold, band)
        moving = open_ & ~verified
        if (open_ & verified).any():  # a positive part that can still change moves every normalised score
            moving |= ~verified & (raw + band > 0)
        todo = [int(i) for i in np.flatnonzero(moving)]
    return raw, verified


class GatedEstimator(AttentionEstimator):
    name = "gated"
    causal = True  # every close decision is read from exact deletions
    token_readings = True  # a part of the response: verified passages exactly, the others by the map (below)
    params: tuple[Param, ...] = (
        WEIGHTS,
        Param("band", float, None, "how far (nats per response token) an exact score may lie from its prediction; "
              "passages whose decision that leaves open are re-scored exactly (none: the map's fitted band; "
              "inf: every passage, i.e. loo)", optional=True),
        REUSE_PREFIX,
    )

    def __init__(self, weights: str | None = None, band: float | None = None, reuse_prefix: bool = True) -> None:
        super().__init__(weights)
        if band is not None and not band >= 0:
            raise ValueError("band must be >= 0")
        self.band = band
        self.reuse_prefix = reuse_prefix

    def score(self, lm: LanguageModel, item: ProbeInput) -> GatedScores:
        fitted = self.attention_map(lm)
        band = fitted.band if self.band is None else float(self.band)
        k = len(item.passages)
        cut = used_cut(k, item.threshold)  # the probe's own rule: the gate settles the decisions it reads
        ablations = Ablations(lm, item.prompt, item.response_ids, reuse_prefix=self.reuse_prefix)

        deletions = [item.prompt.deletion([i]) for i in range(k)]
        ablated_tokens: dict[int, np.ndarray] = {}  # each exactly scored passage's per-token log-probabilities

        def exact(indices: list[int]) -> np.ndarray:
            ablated = ablations.score([deletions[i] for i in indices])
            ablated_tokens.update(zip(indices, (np.asarray(a) for a in ablated), strict=True))
            full = ablations.full_logprobs.mean()
            return np.array([full - a.mean() for a in ablated])

        stored = ablations.stored(deletions)  # a context probed before: these deletions cost a knockout's tokens
        read = None
        if k <= EXACT_UP_TO or len(stored) == k:
            raw, verified, attention_tokens = exact(list(range(k))), np.ones(k, dtype=bool), 0
        else:
            # the passages the gate scores exactly first need no knockout: their predictions are never read
            predicted_only = [i for i in range(k - 1) if i not in stored]
            read = attention_model(lm, self.name).read_attention(item.prompt, item.response_ids, predicted_only,
                                                                 what=f"estimator {self.name!r}")
            raw, verified = gate(fitted.predict(read.features, read.knockout), cut, band, exact, first=stored)
            attention_tokens = read.tokens_processed
        exact_tokens = ablations.tokens_processed
        full_tokens = np.asarray(ablations.full_logprobs)  # already scored: the last passage is always verified

        def span_scores(tokens: Sequence[int]) -> np.ndarray:
            """Verified passages read exactly over the tokens (loo's per-token drop); the others by the map
            over the same tokens' rows and knockouts."""
            rows = list(tokens)
            predicted = fitted.predict(*read.over(rows)) if read is not None else np.full(k, np.nan)
            return np.array([full_tokens[rows].mean() - ablated_tokens[i][rows].mean() if verified[i]
                             else predicted[i] for i in range(k)])

        return GatedScores(
            values=raw,
            tokens_processed=attention_tokens + exact_tokens,
            span_scores=span_scores,
            extra={"verified": int(verified.sum()),
                   "verified_ids": [item.passages[i].id for i in np.flatnonzero(verified)],
                   "stored": len(stored), "band": band, "attention_tokens": attention_tokens,
                   "exact_tokens": exact_tokens},
        )


__all__ = ["EXACT_UP_TO", "GatedEstimator", "GatedScores", "gate", "unsettled"]
