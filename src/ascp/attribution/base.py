"""The estimator contract, score normalisation and the binary "used" decision.

Every estimator reads a `ProbeInput` (question, ordered passages, the encoded prompt and the
fixed response) and returns `Scores`: one raw score per passage, in context order, with the
tokens it fed the model. Estimators hold only their settings (they are stateless across calls).
The expensive model passes go through the model seam (`lm.score`); normalisation and thresholds
are cheap functions over the stored numbers (`read_scores`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ascp.lm.encoded import EncodedPrompt
from ascp.params import Param
from ascp.types import Passage

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


@dataclass(frozen=True)
class ProbeInput:
    question: str
    passages: tuple[Passage, ...]
    prompt: EncodedPrompt
    response_text: str
    response_ids: tuple[int, ...]


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


class Estimator(ABC):
    """One attribution estimator. `uses_model` is False for proxies that never run the LM."""

    name: str = ""
    uses_model: bool = True
    params: tuple[Param, ...] = ()  # its options, declared once (`ascp estimators` prints them)

    @abstractmethod
    def score(self, lm: LanguageModel, item: ProbeInput) -> Scores:
        """Raw score per passage (context order), with the tokens processed."""


def normalize(raw: ArrayLike) -> np.ndarray:
    """a(d) = [raw(d)]_+ / sum_d' [raw(d')]_+ ; all zeros when no score is positive."""
    pos = np.clip(np.asarray(raw, dtype=np.float64), 0.0, None)
    total = pos.sum()
    return pos / total if total > 0 else pos


def free_threshold(k: int, scale: float = 0.555, exponent: float = -0.633) -> float:
    """The paper's free-generation threshold tau(k) = 0.555 k^-0.633 on normalised scores."""
    return scale * float(k) ** exponent


def used_mask(normalized: ArrayLike, threshold: float) -> np.ndarray:
    """A passage is used when its normalised score reaches the threshold (and is positive)."""
    a = np.asarray(normalized, dtype=np.float64)
    return (a >= threshold) & (a > 0)


@dataclass(frozen=True)
class Reading:
    """Raw scores turned into the probe's reading of one context (all keyed by passage id)."""

    scores: dict[str, float]
    normalized: dict[str, float]
    used: tuple[str, ...]
    threshold: float


def read_scores(ids: Sequence[str], raw: ArrayLike, threshold: float | None = None) -> Reading:
    """Normalise raw scores and apply the used threshold (None: the free-generation tau(k))."""
    ids = list(ids)
    norm = normalize(raw)
    cut = free_threshold(len(ids)) if threshold is None else float(threshold)
    used = used_mask(norm, cut)
    return Reading(
        scores={d: float(s) for d, s in zip(ids, np.asarray(raw, dtype=np.float64), strict=True)},
        normalized={d: float(s) for d, s in zip(ids, norm, strict=True)},
        used=tuple(d for d, u in zip(ids, used, strict=True) if u),
        threshold=cut,
    )
