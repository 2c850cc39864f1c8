"""The estimator contract: what an estimator reads (`ProbeInput`) and returns (`Scores`).

Every estimator reads a `ProbeInput` (question, ordered passages, the encoded prompt and the
fixed response) and returns `Scores`: one raw score per passage, in context order, with the
tokens it fed the model. Estimators hold only their settings (they are stateless across calls).
The expensive model passes go through the model seam (`lm.score`); normalisation and thresholds
are cheap functions over the stored numbers (`ascp.reading`, re-exported here).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ascp.lm.encoded import EncodedPrompt
from ascp.params import Param
from ascp.reading import Reading, free_threshold, normalize, read_scores, used_mask
from ascp.types import Passage

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


@dataclass(frozen=True)
class ProbeInput:
    """What one probe step reads. `threshold` is the rule the reading will apply (None: tau(k); a
    number: that fixed threshold on normalised scores), set by `probe_response` from the probe's
    settings, so an estimator that decides where to spend exact passes (`gated`) settles the very
    decisions the reading makes."""

    question: str
    passages: tuple[Passage, ...]
    prompt: EncodedPrompt
    response_text: str
    response_ids: tuple[int, ...]
    threshold: float | None = None


@dataclass(frozen=True)
class Scores:
    """What one estimator call returns.

    values: raw score per passage, context order.
    tokens_processed: tokens fed to the model (0 for proxies that never run it).
    full_logprobs, ablated_logprobs: for the single-passage ablation estimators (`loo`,
        `replace`), the per-token response log-probabilities under the full prompt, shape (n,),
        and under each passage's ablation, shape (k, n): what `Attribution.for_span` reads.
    """

    values: np.ndarray
    tokens_processed: int = 0
    full_logprobs: np.ndarray | None = None
    ablated_logprobs: np.ndarray | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # what the estimator reports beside its scores
    span_scores: Callable[[Sequence[int]], np.ndarray] | None = field(default=None, compare=False, repr=False)
    """For an estimator declaring `token_readings`: its scores (context order) over some response tokens
    (their indexes), from the passes it already ran; None: derived from `full_logprobs` and
    `ablated_logprobs` (the mean per-token drop) where those are given."""

    def scorer(self) -> Callable[[Sequence[int]], np.ndarray] | None:
        """The span scorer: `span_scores`, or the mean per-token drop of a single-passage ablation."""
        if self.span_scores is not None:
            return self.span_scores
        if self.full_logprobs is None or self.ablated_logprobs is None:
            return None
        full, ablated = np.asarray(self.full_logprobs), np.asarray(self.ablated_logprobs)
        return lambda tokens: full[list(tokens)].mean() - ablated[:, list(tokens)].mean(axis=1)


class Estimator(ABC):
    """One attribution estimator, with the facts every later stage reads declared here, once.

    Reports, renderers and the validation read these declarations, never an estimator's name, so a
    registered estimator with the same declarations is treated exactly as a built-in:

    uses_model: it runs the model (False for relevance proxies that never call it).
    causal: its scores come from the model's likelihood of the response under context ablations
        (leave-one-out, replacement, hierarchical, ContextCite), not from text relevance.
    nats_per_token: its raw score of a passage is the drop in mean per-token log-likelihood of the
        response when that passage is removed, the scale the width-invariant used threshold is
        calibrated on; only such estimators get the tables' thresholded ECR and the "nats/token"
        unit.
    reads_response: its scores depend on the response (False for question-passage relevance proxies:
        the "query-relevance proxies" of the paper's reversal claim, Sec. 4.2).
    needs_seed: it draws random numbers and takes a `seed` option (a per-request seed is derived for it
        where a caller probes many requests).
    needs_embedder: it embeds text and takes an `embedder` option (`--embedder`).
    token_readings: it reads any part of the response (`Scores.scorer()`, `spans="sentences"`): the
        ablation estimators from the per-token log-probabilities of the response under the full prompt
        and under each passage's ablation (`Scores.full_logprobs`, `ablated_logprobs`; `for_span` too),
        ContextCite by refitting on its masks, the relevance proxies by scoring the part's text.
    """

    name: str = ""
    uses_model: bool = True
    causal: bool = False
    nats_per_token: bool = False
    reads_response: bool = True
    needs_seed: bool = False
    needs_embedder: bool = False
    token_readings: bool = False
    params: tuple[Param, ...] = ()  # its options, declared once (`ascp estimators` prints them)

    @abstractmethod
    def score(self, lm: LanguageModel, item: ProbeInput) -> Scores:
        """Raw score per passage (context order), with the tokens processed."""


__all__ = ["Estimator", "ProbeInput", "Reading", "Scores", "free_threshold", "normalize", "read_scores", "used_mask"]
