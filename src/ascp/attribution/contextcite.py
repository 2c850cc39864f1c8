"""The ContextCite surrogate (Cohen-Wang et al. 2024) through ascp's own scoring path.

Defaults mirror the `context-cite` package: 64 random ablation masks, each passage kept with
probability 0.5, target = the response's sequence logit-probability log p - log(1 - p), and a
Lasso (alpha 0.01, standardised masks) fitted to target / |y|. Sources are whole passages.
The returned scores are the Lasso weights in per-token units (comparable with `loo`);
multiply by the number of response tokens for ContextCite's native scale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.ablation import Ablations
from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


def logit_prob(sequence_logprob: float) -> float:
    """log p - log(1 - p) for p = exp(sequence_logprob), computed stably."""
    lp = min(sequence_logprob, -1e-12)
    return lp - float(np.log(-np.expm1(lp)))


class ContextCite(Estimator):
    name = "contextcite"
    causal = True
    nats_per_token = False  # Lasso weights of a surrogate, not a measured drop: no calibrated threshold
    needs_seed = True
    params = (
        Param("num_ablations", int, 64, "random ablation masks"),
        Param("keep_prob", float, 0.5, "probability that a mask keeps each passage"),
        Param("lasso_alpha", float, 0.01, "Lasso regularisation on standardised masks"),
        Param("seed", int, 0, "seed of the masks"),
    )

    def __init__(self, num_ablations: int = 64, keep_prob: float = 0.5, lasso_alpha: float = 0.01, seed: int = 0):
        self.num_ablations = num_ablations
        self.keep_prob = keep_prob
        self.lasso_alpha = lasso_alpha
        self.seed = seed

    def score(self, lm: LanguageModel, item: ProbeInput) -> Scores:
        from sklearn.linear_model import Lasso
        from sklearn.preprocessing import StandardScaler

        k = len(item.passages)
        rng = np.random.default_rng(self.seed)
        masks = rng.random((self.num_ablations, k)) < self.keep_prob
        scorer = Ablations(lm, item.prompt, item.response_ids)
        outs = scorer.score([{i + 1: "" for i in range(k) if not m[i]} for m in masks])
        n = len(item.response_ids)
        target = np.array([logit_prob(float(o.sum())) for o in outs]) / n
        x = masks.astype(np.float64)
        scaler = StandardScaler().fit(x)
        scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
        lasso = Lasso(alpha=self.lasso_alpha, random_state=0, fit_intercept=True)
        lasso.fit((x - scaler.mean_) / scale, target)
        return Scores(values=lasso.coef_ / scale, tokens_processed=scorer.tokens_processed)
