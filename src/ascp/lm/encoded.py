"""A prompt as text segments plus the ids of the whole text, so any passage block can be edited.

Canonical tokenization: every prompt ascp feeds a model, the full one and each ablated or
replaced variant, is the chat-templated text tokenized as a whole (`tokenizer(text)`, no special
tokens added), exactly what a user's own stack feeds for that text. Segments are kept as text
only: tokenizing them one by one and concatenating the ids is not the same (with byte-level BPE a
block ending in "\\n\\n" before "[" is one token on its own but two inside the text).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate

# Segment index -> replacement text; "" deletes the segment.
Edit = Mapping[int, str]


@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt's text, kept per segment [prefix, passage_1..passage_k, tail], and its token ids.

    `text` is exactly the concatenation of `segment_texts`; `ids` is `tokenizer(text)` of that
    whole text, the ids every pass scores. `passage_ids` are the ids of the *sources*, the units an
    estimator deletes, in context order: by default one passage block each, segment i + 1 for source
    i. With sentence sources (`ascp.attribution.sources`) the same text is cut finer:
    `source_segments` names the segment each source's deletion removes (a sentence of a passage,
    the block's identifier and title staying) and `source_passages` the passage each source lies in.
    """

    segment_texts: tuple[str, ...]
    ids: tuple[int, ...]
    passage_ids: tuple[str, ...]
    source_segments: tuple[int, ...] = ()  # (): source i is segment i + 1
    source_passages: tuple[str, ...] = ()  # (): every source is a whole passage

    def segment_of(self, source: int) -> int:
        """The segment index source `source` (its context position) deletes."""
        return self.source_segments[source] if self.source_segments else source + 1

    def deletion(self, sources: Iterable[int]) -> dict[int, str]:
        """The edit that deletes the given sources (context positions)."""
        return {self.segment_of(i): "" for i in sources}

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
        """Character span [start, end) inside `text` of each source: what its deletion removes (a passage
        block, or a sentence of one)."""
        starts = [0, *accumulate(len(s) for s in self.segment_texts)]
        return {pid: (starts[self.segment_of(i)], starts[self.segment_of(i) + 1])
                for i, pid in enumerate(self.passage_ids)}


def common_prefix(a, b) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
