"""Teacher-forced log-likelihood of a fixed response under a prompt and under edited prompts.

This is the one scoring path every causal estimator uses (deletion and replacement LOO,
hierarchical LOO, the ContextCite surrogate). An *edit* maps segment indices of an
`EncodedPrompt` to replacement text; "" deletes the segment. Every variant is scored as
`tokenizer(text)` of its whole edited text (canonical tokenization, see `ascp.lm.encoded`).

Exact prefix sharing. The full prompt + response is scored once while filling a KV cache. The
variants are then scored in order of decreasing common token prefix with the full prompt (the
last passage's deletion first); before each, the cache is cropped to the longest common token
prefix of what it holds and the variant's ids, and only the rest + the response is run. Tokens
in a common prefix are identical at identical positions, so reusing their keys and values is
exact by construction, whatever the tokenizer does at a passage boundary. Each variant is fed at
most `len(ids) - LCP(full, ids)` prompt tokens: the exact floor.

Position convention (contiguous re-indexing). After a deletion, later tokens move up exactly as
if the ablated prompt had been written from scratch: it is scored as the prompt a user would
have sent without that passage. In-place replacement (`replace`) picks filler text whose prompt
has the full prompt's token count, so later tokens keep their positions.

Only the logits at response positions are computed (`logits_to_keep`), and the last response
token is never fed (nothing is predicted from it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ascp.lm.encoded import Edit, EncodedPrompt, common_prefix


class AblationScorer:
    """Per-token log-probabilities of `response` under the full prompt and under edits of it.

    `reuse_prefix=False` scores every variant from scratch (the naive reference, k+1 full passes
    for LOO); `True` shares common prefixes through a cropped KV cache and gives the same
    numbers up to floating-point reassociation. `tokens_processed` counts tokens fed to the model.
    """

    def __init__(self, lm, prompt: EncodedPrompt, response: Sequence[int], reuse_prefix: bool = True) -> None:
        if not response:
            raise ValueError("the response must have at least one token")
        self.lm = lm
        self.prompt = prompt
        self.response = list(response)
        self.reuse_prefix = reuse_prefix and lm.supports_prefix_cache
        self.tokens_processed = 0
        self._cache = None
        self._cached: list[int] = []  # the ids whose keys and values the cache holds
        self.full_logprobs = self._score_ids(prompt.ids)

    @property
    def full_logprob(self) -> float:
        return float(self.full_logprobs.sum())

    def variant_ids(self, edit: Edit) -> tuple[int, ...]:
        """`tokenizer(text)` of the edited prompt text."""
        return tuple(self.lm.encode(self.prompt.edited_text(edit))) if edit else self.prompt.ids

    def score(self, edits: Sequence[Edit]) -> list[np.ndarray]:
        """Per-token response log-probabilities for each edit, in the order given."""
        variants = [self.variant_ids(e) for e in edits]
        full = self.prompt.ids
        # Longest shared prefix with the full prompt first; ties in id order, which puts variants
        # that share more with each other next to each other (ContextCite's random masks).
        order = sorted(range(len(edits)), key=lambda i: (-common_prefix(full, variants[i]), variants[i]))
        results: list[np.ndarray | None] = [None] * len(edits)
        for i in order:
            results[i] = self.full_logprobs.copy() if variants[i] == full else self._score_ids(variants[i])
        return [r for r in results if r is not None]

    # ----- internals -------------------------------------------------------------------------
    def _score_ids(self, ids: Sequence[int]) -> np.ndarray:
        """Score the response after the prompt `ids`."""
        sequence = [*ids, *self.response[:-1]]
        if not self.reuse_prefix:
            return self._forward(sequence, cache=None)
        # Keep the longest cached prefix, but re-run the last prompt token: the logits that
        # predict the response must be computed in this pass.
        keep = min(common_prefix(self._cached, sequence), len(ids) - 1)
        if self._cache is None or keep <= 0:
            self._cache, keep = self.lm.new_cache(), 0
        else:
            current = self._cache.get_seq_length()
            if current > keep:
                self._cache.crop(-(current - keep))
        out = self._forward(sequence[keep:], cache=self._cache)
        self._cached = sequence
        return out

    def _forward(self, ids: Sequence[int], cache) -> np.ndarray:
        import torch

        n_resp = len(self.response)
        self.tokens_processed += len(ids)
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.lm.device)
        with torch.inference_mode():
            out = self.lm.model(input_ids=input_ids, cache=cache, use_cache=cache is not None, logits_to_keep=n_resp)
        logits = out.logits[0].to(torch.float64)
        logprobs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(self.response, dtype=torch.long, device=logprobs.device)
        return logprobs.gather(-1, target[:, None])[:, 0].cpu().numpy()


def exact_floor_tokens(full: Sequence[int], variants: Sequence[Sequence[int]], response_tokens: int) -> int:
    """Tokens an exact scorer must feed: the full prompt, then each variant after its common prefix.

    Each variant reuses at most its longest common token prefix with the full prompt (minus the
    last prompt token, whose logits predict the response). Counted like
    `AblationScorer.tokens_processed` (the last response token is never fed).
    """
    total = len(full) + response_tokens - 1
    for ids in variants:
        reused = min(common_prefix(full, ids), len(ids) - 1)
        total += len(ids) - reused + response_tokens - 1
    return total


def exact_loo_floor_tokens(lm, prompt: EncodedPrompt, response_tokens: int) -> int:
    """`exact_floor_tokens` for the k single-passage deletions of leave-one-out."""
    k = len(prompt.passage_ids)
    variants = [lm.encode(prompt.edited_text({i + 1: ""})) for i in range(k)]
    return exact_floor_tokens(prompt.ids, variants, response_tokens)
