"""The model seam: what the probe, the loop, the decoder and the experiments need from a model.

A model is anything with these methods; `HFLanguageModel` (transformers, in process) is one
implementation, and a test runs the whole probe and loop on a numpy bigram model through it.
Chat framing, canonical tokenization and the context-window check come with `TokenizedModel`
(`ascp.lm.tokenized`), so a new backend usually subclasses it and implements `generate` and
`score` only. Steered decoding (Eq. 5) needs per-step logits of several prompts in lockstep:
that is the separate, optional `SteerableModel` capability.

Besides its methods, a model declares the facts the rest of ascp acts on (`SeamDefaults` gives
the defaults; `TokenizedModel` inherits them): `fingerprint` (what the request cache keys rows
on; None: the model runs uncached), `in_flight` (how many cases' probes the loop keeps in flight),
`prefixes` (its `PrefixStore`, or None), `response_token_spans` (None where the model cannot
map tokens to characters) and `close()`. An object of one's own without them is wrapped once, at
the front door, by `as_language_model`, which gives it those defaults.

`tokens_fed` is the one rule every "tokens fed" count follows (scoring, the engines, the request
cache's savings).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

import numpy as np

from ascp.errors import AscpError

if TYPE_CHECKING:
    from ascp.lm.encoded import EncodedPrompt
    from ascp.lm.prefixes import PrefixStore
    from ascp.lm.prompts import PromptTemplate
    from ascp.lm.sampling import Generation, LogitMix, SamplingConfig
    from ascp.types import Passage


def tokens_fed(prompt_tokens: int, continuation_tokens: int = 0) -> int:
    """THE token-counting rule: the tokens one pass from scratch feeds the model for a prompt
    followed by a continuation: every prompt token and every continuation token but the last
    (nothing is predicted from the last token, so no backend needs it fed).

    Every count of tokens fed or not fed follows it: `ScoredPrompts.tokens_processed` (a pass
    that reuses a cached prefix subtracts the positions it reused), an engine's count (the server's
    own prefix cache is invisible to ascp, so each prompt counts whole), and the request cache's
    savings (`CacheStats.tokens_saved`: a scored prompt answered from the file saves its whole
    pass; a generation row its prompt's prefill, `continuation_tokens=0`: a record keeps the
    response's text, not the ids sampled). A count is therefore recomputed from the records: the
    prompt's and the response's token ids of each scored prompt (tests/test_lm_request_cache.py).
    """
    return prompt_tokens + max(continuation_tokens - 1, 0)


@dataclass(frozen=True)
class ScoredPrompts:
    """Per-token log-probabilities of one fixed response under each of several prompts.

    `logprobs[i][j]` = log p(response[j] | prompts[i], response[:j]) in nats;
    `tokens_processed`: tokens the model was fed to compute them (its cost, by `tokens_fed`).
    """

    logprobs: tuple[np.ndarray, ...]
    tokens_processed: int


@runtime_checkable
class LanguageModel(Protocol):
    """A generator the probe can score: template + tokenize, generate, and score fixed responses,
    declaring the facts ascp acts on (module docstring; `SeamDefaults` has their defaults)."""

    name: str
    prefixes: PrefixStore | None  # prompt prefixes computed in this process (`ascp.lm.prefixes`), or None

    @property
    def fingerprint(self) -> str | None:
        """What the request cache keys rows on: a string that changes whenever the model's numbers
        would (ascp's backends: a digest of weights, dtype, config, ...); None: run uncached."""
        ...

    @property
    def in_flight(self) -> int:
        """Cases whose probes the loop keeps in flight at once (a server batches them); 1 in process."""
        ...

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

    def response_token_spans(self, response: str) -> list[tuple[int, int]] | None:
        """Character span [start, end) of each token of `encode(response)`, or None when the model
        cannot tell (the probe then keeps no per-token reading)."""
        ...

    def close(self) -> None:
        """Release what the model holds (engines, files); the object is not used afterwards."""
        ...


class SeamDefaults:
    """The declared facts of a model that holds nothing special: uncached (no fingerprint), one
    probe in flight, no prefix store, no token spans, nothing to close. Backends override what
    they know."""

    in_flight: int = 1
    prefixes: PrefixStore | None = None

    @property
    def fingerprint(self) -> str | None:
        return None

    def response_token_spans(self, response: str) -> list[tuple[int, int]] | None:
        return None

    def close(self) -> None:
        return None


SEAM_METHODS = ("encode", "decode", "encode_prompt", "check_fits", "generate", "score")
DECLARED = ("fingerprint", "in_flight", "prefixes", "response_token_spans", "close")


class _WithDefaults:
    """A model of one's own that lacks some of `DECLARED`: its own members where it has them,
    `SeamDefaults`' facts where it does not."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)

    @property
    def context_window(self) -> int:
        return int(self.lm.context_window)

    @property
    def fingerprint(self) -> str | None:
        own = getattr(self.lm, "fingerprint", None)
        return own if isinstance(own, str) and own else None

    @property
    def in_flight(self) -> int:
        return int(getattr(self.lm, "in_flight", 1))

    @property
    def prefixes(self) -> PrefixStore | None:
        return getattr(self.lm, "prefixes", None)

    @prefixes.setter
    def prefixes(self, store: PrefixStore | None) -> None:
        self.lm.prefixes = store

    def response_token_spans(self, response: str) -> list[tuple[int, int]] | None:
        spans = getattr(self.lm, "response_token_spans", None)
        return None if spans is None else spans(response)

    def close(self) -> None:
        close = getattr(self.lm, "close", None)
        if callable(close):
            close()


class _SteerableWithDefaults(_WithDefaults):
    def generate_streams(self, *args: Any, **kwargs: Any) -> Any:
        return self.lm.generate_streams(*args, **kwargs)


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


@dataclass(frozen=True)
class AttentionPass:
    """What one pass over prompt + response gives.

    features: shape (k, layers, heads), the pooled attention mass per passage block.
    knockout: shape (k,), mean log-probability per response token lost when the response rows
        cannot attend to the passage (the prompt's own states unchanged); nats per response token
        (NaN for a passage not in the pass's `knockout_of`).
    full_logprobs: shape (R,), log p(response token | full prompt, earlier response tokens).
    tokens_processed: tokens fed (`tokens_fed`, less a prompt prefix taken from the prefix store).
    pooling_bytes: the largest working set the pooling held at once (one layer's response-row
        logits and weights in float32 and their boolean mask), next to eager attention's
        layers x heads x T x T weights.
    spans: each passage block's token span [start, end) in the prompt (`passage_token_spans`).
    row_features: shape (R, k, layers, heads), the attention mass of each response row (the row that
        predicts response token r) per block: `features` is their mean over the rows.
    knockout_logprobs: shape (k, R), the per-token log-probabilities behind each knockout score (NaN
        rows where `knockout` is NaN): a part of the response reads both over its own tokens.
    """

    features: np.ndarray
    knockout: np.ndarray
    full_logprobs: np.ndarray
    tokens_processed: int
    pooling_bytes: int = 0
    spans: tuple[tuple[int, int], ...] = ()
    row_features: np.ndarray | None = None
    knockout_logprobs: np.ndarray | None = None

    def over(self, tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(features, knockout) read over some response tokens only (their indexes): the rows that predict
        them, and the knockout's mean drop over them."""
        if self.row_features is None or self.knockout_logprobs is None:
            raise ValueError("this pass kept no per-row features")
        rows = list(tokens)
        knockout = self.full_logprobs[rows].mean() - self.knockout_logprobs[:, rows].mean(axis=1)
        return self.row_features[rows].astype(np.float64).mean(axis=0), knockout


@runtime_checkable
class AttentionModel(LanguageModel, Protocol):
    """A model whose forward pass can be read (transformers in process, `ascp.lm.attention`):
    pooled attention features and knockout scores per passage, and the weights' portable identity
    (what an attention map is keyed by). Wrappers (`as_language_model`, the request cache) forward
    it exactly when the model they wrap has it."""

    parameter_digest: str

    def read_attention(self, prompt: EncodedPrompt, response: Sequence[int],
                       knockout_of: Sequence[int] | None = None, what: str = "the attention pass") -> AttentionPass:
        ...


def reads_attention(lm: object) -> TypeGuard[AttentionModel]:
    """Whether `lm` gives its attention (`AttentionModel.read_attention`), asked without evaluating
    any declared fact."""
    return callable(getattr(lm, "read_attention", None))


def steers(lm: object) -> TypeGuard[SteerableModel]:
    """Whether `lm` decodes lockstep streams (`SteerableModel.generate_streams`); asked without
    evaluating the declared facts (a fingerprint may hash a model's weights)."""
    return callable(getattr(lm, "generate_streams", None))


def _declares(model: object, name: str) -> bool:
    try:
        inspect.getattr_static(model, name)
    except AttributeError:
        return False
    return True


def as_language_model(model: object, what: str = "model") -> LanguageModel:
    """`model` as the seam: itself when it declares every member, else wrapped with the defaults of
    `SeamDefaults` for the facts it does not declare; one sentence when a method is missing."""
    missing = [name for name in SEAM_METHODS if not callable(getattr(model, name, None))]
    if missing or not hasattr(model, "context_window"):
        lacks = ", ".join(f"`{m}`" for m in missing) or "`context_window`"
        raise AscpError(f"{what} must be a language model (ascp.load_model, or an object with the model seam's "
                        f"methods, docs/api.md), but a {type(model).__name__} has no {lacks}.")
    if all(_declares(model, name) for name in DECLARED):
        return model  # type: ignore[return-value]
    wrapped = _SteerableWithDefaults(model) if steers(model) else _WithDefaults(model)
    return wrapped


def model_name(lm: Any) -> str:
    return str(getattr(lm, "name", type(lm).__name__))


def backend_name(lm: Any) -> str:
    """The backend that runs a model (`hf`, `llamacpp`, ...), or its class name for other models."""
    return str(getattr(lm, "backend", type(lm).__name__))
