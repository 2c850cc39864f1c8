"""Causal leave-one-out (Eq. 3): deletion (`loo`) and in-place replacement (`replace`).

score(d) = (1/|y|) [log p(y | q, C) - log p(y | q, C \\ {d})], nats per response token.
Scored through `Ablations` (the model seam; with transformers an exact shared-prefix KV cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.ablation import REUSE_PREFIX, Ablations
from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.errors import AscpError
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel

# Neutral filler for in-place replacement: its words are repeated until the replaced prompt has
# exactly the full prompt's token count, so every later token keeps its position.
NEUTRAL_TEXT = "This passage has been removed and intentionally left blank."
# Padding after the filler's words when the next whole word would overshoot the token count.
_PADS = (".", ",", " -", "!", " a")


class LeaveOneOut(Estimator):
    """Deletion LOO. `reuse_prefix=False` gives the naive k+1 full passes (the reference)."""

    name = "loo"
    causal = True
    nats_per_token = True
    token_readings = True
    params: tuple[Param, ...] = (REUSE_PREFIX,)

    def __init__(self, reuse_prefix: bool = True) -> None:
        self.reuse_prefix = reuse_prefix

    def score(self, lm: LanguageModel, item: ProbeInput) -> Scores:
        k = len(item.passages)
        ablations = Ablations(lm, item.prompt, item.response_ids, reuse_prefix=self.reuse_prefix)
        ablated = ablations.score([{item.prompt.segment_of(i): self.replacement(lm, item, i)} for i in range(k)])
        full = ablations.full_logprobs
        return Scores(
            values=np.array([full.mean() - a.mean() for a in ablated]),
            tokens_processed=ablations.tokens_processed,
            full_logprobs=full,
            ablated_logprobs=np.array(ablated).reshape(k, len(full)),
        )

    def replacement(self, lm: LanguageModel, item: ProbeInput, index: int) -> str:
        """The text that stands in for passage `index`'s block ("" deletes it)."""
        return ""


class Replacement(LeaveOneOut):
    """In-place replacement of a passage block by length-matched neutral text (Sec. 4.4).

    The whole rendered block (identifier, title, text) is replaced by words of `filler` followed
    by the block separator, as many as make `tokenizer(text)` of the replaced prompt exactly as
    long as the full prompt's, so no later token moves. With an empty filler this is `loo`.
    """

    name = "replace"
    params: tuple[Param, ...] = (
        Param("filler", str, NEUTRAL_TEXT, "neutral text whose words stand in for the passage"),
        REUSE_PREFIX,
    )

    def __init__(self, filler: str = NEUTRAL_TEXT, reuse_prefix: bool = True):
        super().__init__(reuse_prefix=reuse_prefix)
        self.filler = filler

    def replacement(self, lm: LanguageModel, item: ProbeInput, index: int) -> str:
        if not self.filler.strip():
            return ""
        prompt = item.prompt
        segment = prompt.segment_of(index)
        target = prompt.num_tokens
        words = self.filler.split()
        block = prompt.segment_texts[segment]
        separator = block[len(block.rstrip()):]  # the block's trailing whitespace ("\n\n")

        def text(m: int, pad: str = "") -> str:
            return " ".join(words[j % len(words)] for j in range(m)) + pad + separator

        def length(candidate: str) -> int:
            return len(lm.encode(prompt.edited_text({segment: candidate})))

        lo, hi = 0, max(1, target)  # smallest word count whose prompt reaches the target length
        while lo < hi:
            mid = (lo + hi) // 2
            if length(text(mid)) >= target:
                hi = mid
            else:
                lo = mid + 1
        # Fewer whole words, then pad the missing tokens (a word can be several tokens).
        for m in range(lo, max(-1, lo - 4), -1):
            short = target - length(text(m))
            if short == 0:
                return text(m)
            if short < 0:
                continue
            for pad in _PADS:
                for r in (short, short - 1, short + 1, short - 2):
                    candidate = text(m, pad * r)
                    if r > 0 and length(candidate) == target:
                        return candidate
        raise AscpError(
            f"replace: no neutral filler matches the {target}-token length of the prompt without passage "
            f"{item.passages[index].id!r} under model {getattr(lm, 'name', '?')!r}'s tokenizer; use --estimator loo "
            "or another filler."
        )
