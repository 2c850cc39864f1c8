"""Causal leave-one-out (Eq. 3): deletion (`loo`) and in-place replacement (`replace`).

score(d) = (1/|y|) [log p(y | q, C) - log p(y | q, C \\ {d})], nats per response token.
Scored through `AblationScorer` (shared-prefix KV cache, logits only at response positions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ascp.attribution.base import Estimator, ProbeInput
from ascp.lm.scoring import AblationScorer

# Neutral filler for in-place replacement: its tokens are cycled to the exact token length of
# the replaced block, so every later token keeps its position.
NEUTRAL_TEXT = " This passage has been removed and intentionally left blank."


class LeaveOneOut(Estimator):
    """Deletion LOO. `reuse_prefix=False` gives the naive k+1 full passes (the reference)."""

    name = "loo"

    def __init__(self, reuse_prefix: bool = True) -> None:
        self.reuse_prefix = reuse_prefix

    def score(self, lm, item: ProbeInput) -> np.ndarray:
        k = len(item.passages)
        scorer = AblationScorer(lm, item.prompt, item.response_ids, reuse_prefix=self.reuse_prefix)
        ablated = scorer.score([{i + 1: self.replacement(lm, item, i)} for i in range(k)])
        self.last_tokens_processed = scorer.tokens_processed
        full = scorer.full_logprobs.mean()
        return np.array([full - a.mean() for a in ablated])

    def replacement(self, lm, item: ProbeInput, index: int) -> Sequence[int]:
        return ()


class Replacement(LeaveOneOut):
    """In-place replacement of a passage block by length-matched neutral text (Sec. 4.4).

    The whole rendered block (identifier, title, text) is replaced by the same number of tokens
    of `filler`, so no later token moves. With an empty filler this is exactly `loo`.
    """

    name = "replace"

    def __init__(self, filler: str | Callable[[int], Sequence[int]] = NEUTRAL_TEXT, reuse_prefix: bool = True):
        super().__init__(reuse_prefix=reuse_prefix)
        self.filler = filler

    def replacement(self, lm, item: ProbeInput, index: int) -> Sequence[int]:
        n = len(item.prompt.segments[index + 1])
        if callable(self.filler):
            return list(self.filler(n))
        unit = lm.encode(self.filler) if self.filler else []
        if not unit:
            return []
        return [unit[j % len(unit)] for j in range(n)]
