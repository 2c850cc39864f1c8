"""The model seam: what the probe, the loop, the decoder and the experiments need from a model.

A model is anything with these methods; `HFLanguageModel` (transformers, in process) is one
implementation, and a test runs the whole probe and loop on a numpy bigram model through it.
Chat framing, canonical tokenization and the context-window check come with `TokenizedModel`
(`ascp.lm.tokenized`), so a new backend usually subclasses it and implements `generate` and
`score` only. Steered decoding (Eq. 5) needs per-step logits of several prompts in lockstep:
that is the separate, optional `SteerableModel` capability.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from ascp.lm.encoded import EncodedPrompt
    from ascp.lm.prompts import PromptTemplate
    from ascp.lm.sampling import Generation, LogitMix, SamplingConfig
    from ascp.types import Passage


@dataclass(frozen=True)
class ScoredPrompts:
    """Per-token log-probabilities of one fixed response under each of several prompts.

    `logprobs[i][j]` = log p(response[j] | prompts[i], response[:j]) in nats;
    `tokens_processed`: tokens the model was fed to compute them (its cost).
    """

    logprobs: tuple[np.ndarray, ...]
    tokens_processed: int


@runtime_checkable
class LanguageModel(Protocol):
    """A generator the probe can score: template + tokenize, generate, and score fixed responses."""

    name: str

    @property
    def context_window(self) -> int:
        """Most tokens (prompt + response) one sequence may hold."""
        ...

    def encode(self, text: str) -> list[int]:
        """`tokenizer(text)` without special tokens added."""
        ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def encode_prompt(
        self, question: str, passages: Sequence[Passage], template: PromptTemplate | None = None,
        earlier_outputs: Sequence[str] = (),
    ) -> EncodedPrompt:
        """The chat-templated prompt as text segments plus `tokenizer(text)` of the whole text."""
        ...

    def check_fits(self, what: str, prompt_tokens: int, response_tokens: int) -> None:
        """Raise a one-sentence `AscpError` when the sequence exceeds the context window."""
        ...

    def generate(
        self, prompts: Sequence[Sequence[int]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """One sampled continuation per prompt; each prompt draws from its own seeded stream."""
        ...

    def score(self, prompts: Sequence[Sequence[int]], response: Sequence[int],
              reuse_prefix: bool = True) -> ScoredPrompts:
        """Teacher-forced log-probabilities of `response` after each prompt. Sharing work between
        prompts (a prefix cache) is the backend's own business; `reuse_prefix=False` asks for
        independent passes (the naive reference), which a backend without reuse ignores."""
        ...


@runtime_checkable
class SteerableModel(LanguageModel, Protocol):
    """A model that decodes several prompts of one item in lockstep and mixes their logits."""

    def generate_streams(
        self, streams: Sequence[Sequence[Sequence[int]]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None, mix: LogitMix | None = None,
    ) -> list[Generation]:
        """Like `generate`, but an item is several prompts; `mix` turns their next-token logits into
        the logits the item samples from (see `ascp.lm.sampling.LogitMix`)."""
        ...


def model_name(lm: Any) -> str:
    return str(getattr(lm, "name", type(lm).__name__))


def backend_name(lm: Any) -> str:
    """The backend that runs a model (`hf`, `llamacpp`, ...), or its class name for other models."""
    return str(getattr(lm, "backend", type(lm).__name__))
