"""Edits of a prompt scored through the model seam: the one scoring path of every causal estimator.

An *edit* maps segment indices of an `EncodedPrompt` to replacement text ("" deletes the
segment): deletion and replacement LOO, hierarchical groups and ContextCite masks are all lists
of edits. Each edited prompt is `tokenizer(text)` of its whole edited text (canonical
tokenization), and the full prompt and the edited ones go to `lm.score` in one call, full prompt
first, so a backend with a prefix cache (`HFLanguageModel`) shares the common token prefixes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ascp.lm.encoded import Edit, EncodedPrompt
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel

REUSE_PREFIX = Param("reuse_prefix", bool, True,
                     "share common token prefixes through the KV cache (false: naive passes)")


class Ablations:
    """Per-token log-probabilities of a fixed `response` under `prompt` and under edits of it.

    `reuse_prefix=False` asks the backend for independent passes (the naive reference).
    `tokens_processed` adds up what the model was fed over every `score` call.
    """

    def __init__(self, lm: LanguageModel, prompt: EncodedPrompt, response: Sequence[int],
                 reuse_prefix: bool = True) -> None:
        if not response:
            raise ValueError("the response must have at least one token")
        self.lm = lm
        self.prompt = prompt
        self.response = tuple(response)
        self.reuse_prefix = reuse_prefix
        self.tokens_processed = 0
        self._full: np.ndarray | None = None
        self._variants: dict[tuple[tuple[int, str], ...], tuple[int, ...]] = {}

    @property
    def full_logprobs(self) -> np.ndarray:
        """Per-token log-probabilities under the unedited prompt."""
        if self._full is None:
            self.score([])
        assert self._full is not None
        return self._full

    def variant_ids(self, edit: Edit) -> tuple[int, ...]:
        """`tokenizer(text)` of the edited prompt text (encoded once per edit)."""
        if not edit:
            return self.prompt.ids
        key = tuple(sorted(edit.items()))
        if key not in self._variants:
            self._variants[key] = tuple(self.lm.encode(self.prompt.edited_text(edit)))
        return self._variants[key]

    def stored(self, edits: Sequence[Edit]) -> list[int]:
        """Positions in `edits` whose edited prompt the model's prefix store holds: scoring one
        feeds the last prompt token and the response only."""
        store = self.lm.prefixes if self.reuse_prefix else None
        if store is None:
            return []
        return [n for n, edit in enumerate(edits) if self.variant_ids(edit) in store]

    def score(self, edits: Sequence[Edit]) -> list[np.ndarray]:
        """Per-token response log-probabilities for each edit, in the order given.

        The full prompt leads the call: the backend orders the edited prompts by their common
        prefix with it and feeds each one's tail only. In a later call it leads again where the
        prefix store holds it (re-fed for the response only); without that, each edited prompt
        of a later call would be fed from its start."""
        if not edits and self._full is not None:
            return []
        variants = [self.variant_ids(e) for e in edits]
        store = self.lm.prefixes if self.reuse_prefix else None
        lead = self._full is None or (store is not None and self.prompt.ids in store)
        prompts = [self.prompt.ids, *variants] if lead else variants
        scored = self.lm.score(prompts, self.response, reuse_prefix=self.reuse_prefix)
        self.tokens_processed += scored.tokens_processed
        out = list(scored.logprobs)
        if lead:
            full, out = out[0], out[1:]
            if self._full is None:
                self._full = full
        return out
