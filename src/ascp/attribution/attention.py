"""The one-pass attention estimator (`attention`): AT2's pooled attention, mapped onto exact LOO.

One forward pass over prompt + response (`ascp.attribution.attention_pooling`) gives, per passage
block, the attention mass of the response rows per (layer, head), and k passes of the response's
length over the stored prompt give each block's knockout score; the model's fitted map
(`ascp.attribution.attention_map`) turns it into a predicted `loo` score in nats per response
token, so the reading (normalised scores, tau(k), used) keeps `loo`'s meaning. The prediction has
no per-example guarantee: `gated` (`ascp.attribution.gated`) re-scores the close decisions exactly.
Runs on the transformers backend only (one sentence elsewhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascp.attribution.attention_map import AttentionMap, map_for
from ascp.attribution.attention_pooling import attention_pass, check_attention_backend
from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel

WEIGHTS = Param("weights", str, None, "attention map file from ascp fit-probe (none: the map shipped for the model)",
                optional=True)


class AttentionEstimator(Estimator):
    name = "attention"
    nats_per_token = True  # the map predicts `loo`'s nats per response token
    params: tuple[Param, ...] = (WEIGHTS,)

    def __init__(self, weights: str | None = None) -> None:
        self.weights = weights
        self._maps: dict[int, AttentionMap] = {}  # per model object: a loaded file, checked once

    def attention_map(self, lm: LanguageModel) -> AttentionMap:
        key = id(lm)
        if key not in self._maps:
            check_attention_backend(lm, self.name)  # before any map: the backend is the first thing to fix
            self._maps[key] = map_for(lm, self.weights, self.name)
        return self._maps[key]

    def score(self, lm: LanguageModel, item: ProbeInput) -> Scores:
        fitted = self.attention_map(lm)
        read = attention_pass(lm, item.prompt, item.response_ids, self.name)
        return Scores(values=fitted.predict(read.features, read.knockout), tokens_processed=read.tokens_processed,
                      full_logprobs=read.full_logprobs)


__all__ = ["WEIGHTS", "AttentionEstimator"]
