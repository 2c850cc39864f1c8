"""The one-pass attention estimator (`attention`): AT2's pooled attention, mapped onto exact LOO.

One forward pass over prompt + response gives, per passage block, the attention mass of the response
rows per (layer, head), and k passes of the response's length over the stored prompt give each
block's knockout score: the model reads them (`read_attention`, a capability of the transformers
backend, `ascp.lm.attention`), and this estimator only maps them to scores: the model's fitted map
(`ascp.attribution.attention_map`) turns it into a predicted `loo` score in nats per response
token, so the reading (normalised scores, tau(k), used) keeps `loo`'s meaning. The prediction has
no per-example guarantee: `gated` (`ascp.attribution.gated`) re-scores the close decisions exactly.
Per sentence (`spans="sentences"`) the map reads the sentence's own response rows and the knockout's
drop over its own tokens, from the same pass. Runs on the transformers backend only (one sentence
elsewhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascp.attribution.attention_map import AttentionMap, map_for
from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.errors import AscpError
from ascp.lm.protocol import AttentionModel, reads_attention
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel

WEIGHTS = Param("weights", str, None, "attention map file from ascp fit-probe (none: the map shipped for the model)",
                optional=True)


def attention_model(lm: LanguageModel, estimator: str) -> AttentionModel:
    """`lm` as a model whose attention can be read, or one sentence naming the backend to use."""
    if not reads_attention(lm):
        backend = getattr(lm, "backend", None) or "unknown"
        raise AscpError(
            f"estimator {estimator!r} reads attention inside the forward pass, which only the transformers backend "
            f"(--backend hf) exposes; model {getattr(lm, 'name', '?')!r} runs on backend {backend!r} (llama.cpp and "
            "served engines give no attention): use --backend hf or --estimator loo."
        )
    return lm


class AttentionEstimator(Estimator):
    name = "attention"
    nats_per_token = True  # the map predicts `loo`'s nats per response token
    token_readings = True  # a part of the response: the map over the rows and knockouts of its own tokens
    params: tuple[Param, ...] = (WEIGHTS,)

    def __init__(self, weights: str | None = None) -> None:
        self.weights = weights
        self._maps: dict[str, AttentionMap] = {}  # by the weights' identity: a loaded file, checked once

    def attention_map(self, lm: LanguageModel) -> AttentionMap:
        """The map for `lm`'s weights (the backend is checked first: it is the first thing to fix)."""
        model = attention_model(lm, self.name)
        key = getattr(model, "fingerprint", None) or model.parameter_digest  # the digest hashes every weight
        if key not in self._maps:
            self._maps[key] = map_for(lm, self.weights, self.name)
        return self._maps[key]

    def score(self, lm: LanguageModel, item: ProbeInput) -> Scores:
        fitted = self.attention_map(lm)
        read = attention_model(lm, self.name).read_attention(item.prompt, item.response_ids,
                                                             what=f"estimator {self.name!r}")
        return Scores(values=fitted.predict(read.features, read.knockout), tokens_processed=read.tokens_processed,
                      full_logprobs=read.full_logprobs, span_scores=lambda tokens: fitted.predict(*read.over(tokens)))


__all__ = ["WEIGHTS", "AttentionEstimator", "attention_model"]
