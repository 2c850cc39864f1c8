"""`HFLanguageModel`: a transformers causal LM with its tokenizer, chat framing and context window."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.prompts import PromptTemplate
from ascp.types import Passage

_SENTINEL = "\u0000ASCP_USER_MESSAGE\u0000"


@dataclass
class HFLanguageModel:
    """A loaded causal LM. `name` is what the user asked for (e.g. `default`, a path or a hub id)."""

    model: Any
    tokenizer: Any
    name: str

    def __post_init__(self) -> None:
        self.model.eval()
        self._head, self._tail = self._chat_frame()

    # ----- framing and tokenisation -------------------------------------------------------
    def _chat_frame(self) -> tuple[str, str]:
        """Text before and after the user message, from the model's own chat template."""
        if getattr(self.tokenizer, "chat_template", None):
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": _SENTINEL}], tokenize=False, add_generation_prompt=True
            )
            head, sep, tail = rendered.partition(_SENTINEL)
            if sep:
                return head, tail
        # A base model without a chat template: plain text framing.
        return "", "\nAnswer:"

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def encode_prompt(
        self,
        question: str,
        passages: Sequence[Passage],
        template: PromptTemplate | None = None,
        earlier_outputs: Sequence[str] = (),
    ) -> EncodedPrompt:
        """The chat-templated prompt as text segments [head + instruction, block_1..block_k,
        question + tail] and `tokenizer(text)` of the whole text."""
        template = template or PromptTemplate()
        texts = (
            self._head + template.instruction_text(),
            *(template.passage_block(p) for p in passages),
            template.question_text(question, earlier_outputs) + self._tail,
        )
        prompt = EncodedPrompt(segment_texts=texts, ids=(), passage_ids=tuple(p.id for p in passages))
        ids = self._encode_mapped(prompt.text, prompt.passage_char_spans())
        return EncodedPrompt(segment_texts=texts, ids=ids, passage_ids=prompt.passage_ids)

    def _encode_mapped(self, text: str, spans: dict[str, tuple[int, int]]) -> tuple[int, ...]:
        """`tokenizer(text)`, refusing a tokenizer whose tokens cannot be mapped back to the text:
        one that gives no character offsets, or normalises some passage's characters away."""
        try:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        except (NotImplementedError, TypeError, ValueError) as exc:
            raise AscpError(
                f"model {self.name!r}: its tokenizer gives no character offsets ({exc}), so the tokens ascp "
                "scores cannot be mapped to the prompt's passages; load the model with a fast tokenizer "
                "(tokenizer.json)."
            ) from None
        starts = [a for a, b in enc["offset_mapping"] if b > a]
        if any(b < a for a, b in zip(starts, starts[1:], strict=False)) or (starts and starts[-1] >= len(text)):
            raise AscpError(
                f"model {self.name!r}: its tokenizer's character offsets do not follow the prompt text, so the "
                "tokens ascp scores cannot be mapped to the prompt's passages; use another tokenizer."
            )
        for pid, (lo, hi) in spans.items():
            first = bisect.bisect_left(starts, lo)
            if first == len(starts) or starts[first] >= hi:
                raise AscpError(
                    f"model {self.name!r}: no token of its tokenizer maps to the characters of passage {pid!r} "
                    "(it normalises them away), so that passage could not be attributed; use another tokenizer."
                )
        return tuple(enc["input_ids"])

    # ----- model facts ----------------------------------------------------------------------
    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)

    @property
    def eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    @property
    def pad_token_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = min(self.eos_token_ids) if self.eos_token_ids else 0
        return int(pad)

    @property
    def supports_prefix_cache(self) -> bool:
        """False for sliding-window or recurrent caches, which cannot be cropped back exactly."""
        config = self.model.config
        layer_types = getattr(config, "layer_types", None) or []
        if any(t != "full_attention" for t in layer_types):
            return False
        return getattr(config, "sliding_window", None) is None or not getattr(config, "use_sliding_window", True)

    def check_fits(self, what: str, prompt_tokens: int, response_tokens: int) -> None:
        """Raise a clear error when prompt + response exceed the context window."""
        if prompt_tokens + response_tokens > self.context_window:
            raise AscpError(
                f"{what}: the prompt ({prompt_tokens} tokens) plus the response ({response_tokens} tokens) "
                f"exceed the model's context window of {self.context_window} tokens; use fewer or shorter "
                "passages or a shorter response."
            )

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)
