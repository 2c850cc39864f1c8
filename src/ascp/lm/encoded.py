"""A prompt as text segments plus the ids of the whole text, so any passage block can be edited.

Canonical tokenization: every prompt ascp feeds a model, the full one and each ablated or
replaced variant, is the chat-templated text tokenized as a whole (`tokenizer(text)`, no special
tokens added), exactly what a user's own stack feeds for that text. Segments are kept as text
only: tokenizing them one by one and concatenating the ids is not the same (with byte-level BPE a
block ending in "\\n\\n" before "[" is one token on its own but two inside the text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate

# Segment index -> replacement text; "" deletes the segment.
Edit = Mapping[int, str]


@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt's text, kept per segment [prefix, passage_1..passage_k, tail], and its token ids.

    `text` is exactly the concatenation of `segment_texts`; `ids` is `tokenizer(text)` of that
    whole text, the ids every pass scores.
    """

    segment_texts: tuple[str, ...]
    ids: tuple[int, ...]
    passage_ids: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.segment_texts)

    @property
    def num_tokens(self) -> int:
        return len(self.ids)

    def edited_text(self, edit: Edit) -> str:
        """The prompt text with the segments named in `edit` replaced (or deleted, by "")."""
        return "".join(edit.get(i, seg) for i, seg in enumerate(self.segment_texts))

    def passage_char_spans(self) -> dict[str, tuple[int, int]]:
        """Character span [start, end) of each passage block inside `text`."""
        starts = [0, *accumulate(len(s) for s in self.segment_texts)]
        return {pid: (starts[i + 1], starts[i + 2]) for i, pid in enumerate(self.passage_ids)}


def common_prefix(a, b) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
