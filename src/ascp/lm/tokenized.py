"""`TokenizedModel`: chat framing and canonical tokenization for any model with a HF tokenizer.

Backends subclass it and add `generate` and `score` (the model seam, `ascp.lm.protocol`); the
prompt every backend is shown is then built one way: the model's own chat template applied as
text, tokenized as a whole (`tokenizer(text)`, no special tokens added), with the tokenizer's
character offsets checked so the scored tokens map back to the prompt's passages.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prompts import PromptTemplate
from ascp.lm.protocol import SeamDefaults
from ascp.types import Passage

_SENTINEL = "\u0000ASCP_USER_MESSAGE\u0000"


class TokenizedModel(SeamDefaults):
    """The tokenizer side of a model: `tokenizer` (a transformers tokenizer) and `name`.

    Subclasses set both attributes and define `context_window`; the seam's declared facts default
    to `SeamDefaults`' (token spans come from the tokenizer's offsets here).
    """

    tokenizer: Any
    name: str

    @property
    def context_window(self) -> int:
        raise NotImplementedError

    # ----- framing and tokenisation -------------------------------------------------------
    @cached_property
    def chat_frame(self) -> tuple[str, str]:
        """Text before and after the user message, from the model's own chat template."""
        return self.frame("")

    def frame(self, system: str = "") -> tuple[str, str]:
        """Text before and after the user message, with `system` as the system message."""
        cache = self.__dict__.setdefault("_frames", {})
        if system not in cache:
            cache[system] = self._render_frame(system)
        return cache[system]

    def _render_frame(self, system: str) -> tuple[str, str]:
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "system", "content": system}] if system else []
            try:
                rendered = self.tokenizer.apply_chat_template(
                    [*messages, {"role": "user", "content": _SENTINEL}], tokenize=False, add_generation_prompt=True
                )
            except Exception as exc:  # the model's own template refuses (e.g. no system role)
                raise AscpError(f"model {self.name!r}: its chat template cannot render this conversation ({exc}); "
                                "drop the system message.") from None
            head, sep, tail = rendered.partition(_SENTINEL)
            if sep:
                return head, tail
        # A base model without a chat template: plain text framing.
        return (system + "\n\n" if system else ""), "\nAnswer:"

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
        head, tail = self.frame(template.system)
        texts = (
            head + template.instruction_text(),
            *(template.passage_block(p) for p in passages),
            template.question_text(question, earlier_outputs) + tail,
        )
        prompt = EncodedPrompt(segment_texts=texts, ids=(), passage_ids=tuple(p.id for p in passages))
        ids = self._encode_mapped(prompt.text, prompt.passage_char_spans())
        return EncodedPrompt(segment_texts=texts, ids=ids, passage_ids=prompt.passage_ids)

    def _encode_mapped(self, text: str, spans: dict[str, tuple[int, int]]) -> tuple[int, ...]:
        """`tokenizer(text)`, refusing a tokenizer whose tokens cannot be mapped back to the text:
        one that gives no character offsets, or normalises some passage's characters away. Text
        that is not valid Unicode (an unpaired surrogate) is refused first, naming where it is: every
        tokenizer fails on it, and not for want of offsets."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            at = exc.start
            where = next((f"passage {pid!r}" for pid, (lo, hi) in spans.items() if lo <= at < hi),
                         "the question, the instruction or the system message")
            raise AscpError(
                f"model {self.name!r}: the prompt's {where} holds an unpaired surrogate (invalid Unicode, "
                f"{text[at]!r} at prompt character {at}); remove it or decode the source text as UTF-8 with "
                "errors='replace'."
            ) from None
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

    def response_token_spans(self, response: str) -> list[tuple[int, int]]:
        """Character span [start, end) of each token of `tokenizer(response)` in the response text."""
        enc = self.tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)
        return [(int(a), int(b)) for a, b in enc["offset_mapping"]]

    # ----- special tokens and limits ----------------------------------------------------------
    def _config_sources(self) -> tuple[Any, ...]:
        """Objects that may carry eos/pad ids besides the tokenizer (a model's configs)."""
        return ()

    @property
    def eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (*self._config_sources(), self.tokenizer):
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

    def check_fits(self, what: str, prompt_tokens: int, response_tokens: int) -> None:
        """Raise a clear error when prompt + response exceed the context window."""
        if prompt_tokens + response_tokens > self.context_window:
            raise AscpError(
                f"{what}: the prompt ({prompt_tokens} tokens) plus the response ({response_tokens} tokens) "
                f"exceed the model's context window of {self.context_window} tokens; use fewer or shorter "
                "passages or a shorter response."
            )
