"""The ContextCite surrogate (Cohen-Wang et al. 2024) through ascp's own scoring path.

Defaults mirror the `context-cite` package: 64 random ablation masks, each passage kept with
probability 0.5, target = the response's sequence logit-probability log p - log(1 - p), and a
Lasso (alpha 0.01, standardised masks) fitted to target / |y|. Sources are whole passages.
The returned scores are the Lasso weights in per-token units (comparable with `loo`);
multiply by the number of response tokens for ContextCite's native scale.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    token_readings = True  # a part of the response is read by refitting on the same masks (`span_scores`)
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
        k = len(item.passages)
        rng = np.random.default_rng(self.seed)
        masks = rng.random((self.num_ablations, k)) < self.keep_prob
        scorer = Ablations(lm, item.prompt, item.response_ids)
        deletions = [item.prompt.deletion(i for i in range(k) if not m[i]) for m in masks]
        outs = [np.asarray(o) for o in scorer.score(deletions)]

        def fit(tokens: Sequence[int]) -> np.ndarray:
            """The surrogate of the response tokens `tokens`: each mask's logit-probability of those tokens,
            per token, regressed on the masks (ContextCite's `get_attributions` for a span)."""
            picked = list(tokens)
            target = np.array([logit_prob(float(o[picked].sum())) for o in outs]) / len(picked)
            return self.fit_surrogate(masks, target)

        return Scores(values=fit(range(len(item.response_ids))), tokens_processed=scorer.tokens_processed,
                      span_scores=fit)

    def fit_surrogate(self, masks: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Lasso weights (per passage, on the masks' raw scale) of `target` on standardised masks."""
        from sklearn.linear_model import Lasso
        from sklearn.preprocessing import StandardScaler

        x = masks.astype(np.float64)
        scaler = StandardScaler().fit(x)
        scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
        lasso = Lasso(alpha=self.lasso_alpha, random_state=0, fit_intercept=True)
        lasso.fit((x - scaler.mean_) / scale, target)
        return np.asarray(lasso.coef_ / scale)
