"""The estimator contract, score normalisation and the binary "used" decision.

Every estimator reads a `ProbeInput` (question, ordered passages, the encoded prompt and the
fixed response) and returns one raw score per passage, in context order. The expensive model
passes live in `ascp.lm.scoring`; normalisation and thresholds are cheap functions over the
stored numbers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ascp.lm.encoded import EncodedPrompt
from ascp.types import Passage


@dataclass(frozen=True)
class ProbeInput:
    question: str
    passages: tuple[Passage, ...]
    prompt: EncodedPrompt
    response_text: str
    response_ids: tuple[int, ...]


class Estimator(ABC):
    """One attribution estimator. `uses_model` is False for proxies that never run the LM."""

    name: str = ""
    uses_model: bool = True

    @abstractmethod
    def score(self, lm, item: ProbeInput) -> np.ndarray:
        """Raw score per passage (context order)."""


def normalize(raw: Sequence[float]) -> np.ndarray:
    """a(d) = [raw(d)]_+ / sum_d' [raw(d')]_+ ; all zeros when no score is positive."""
    pos = np.clip(np.asarray(raw, dtype=np.float64), 0.0, None)
    total = pos.sum()
    return pos / total if total > 0 else pos


def free_threshold(k: int, scale: float = 0.555, exponent: float = -0.633) -> float:
    """The paper's free-generation threshold tau(k) = 0.555 k^-0.633 on normalised scores."""
    return scale * float(k) ** exponent


def used_mask(normalized: Sequence[float], threshold: float) -> np.ndarray:
    """A passage is used when its normalised score reaches the threshold (and is positive)."""
    a = np.asarray(normalized, dtype=np.float64)
    return (a >= threshold) & (a > 0)
