"""The estimator contract: what an estimator reads (`ProbeInput`) and returns (`Scores`).

Every estimator reads a `ProbeInput` (question, ordered passages, the encoded prompt and the
fixed response) and returns `Scores`: one raw score per passage, in context order, with the
tokens it fed the model. Estimators hold only their settings (they are stateless across calls).
The expensive model passes go through the model seam (`lm.score`); normalisation and thresholds
are cheap functions over the stored numbers (`ascp.reading`, re-exported here).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ascp.lm.encoded import EncodedPrompt
from ascp.params import Param
from ascp.reading import Reading, free_threshold, normalize, read_scores, used_mask
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


__all__ = ["Estimator", "ProbeInput", "Reading", "Scores", "free_threshold", "normalize", "read_scores", "used_mask"]
