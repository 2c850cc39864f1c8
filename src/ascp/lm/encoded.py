"""A prompt tokenised segment by segment, so that any passage block can be dropped or replaced."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True)
class EncodedPrompt:
    """Token ids and text of a prompt, kept per segment: [prefix, passage_1..passage_k, tail].

    `text` is exactly the concatenation of `segment_texts`; the ids are the concatenation of each
    segment tokenised on its own (no special tokens added), which is what every pass scores.
    """

    segment_texts: tuple[str, ...]
    segments: tuple[tuple[int, ...], ...]
    passage_ids: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.segment_texts)

    @property
    def ids(self) -> list[int]:
        return [t for seg in self.segments for t in seg]

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.segments)

    @property
    def token_starts(self) -> list[int]:
        """Token offset at which each segment starts (one entry per segment)."""
        return [0, *accumulate(len(s) for s in self.segments)][:-1]

    def passage_char_spans(self) -> dict[str, tuple[int, int]]:
        """Character span [start, end) of each passage block inside `text`."""
        starts = [0, *accumulate(len(s) for s in self.segment_texts)]
        return {pid: (starts[i + 1], starts[i + 2]) for i, pid in enumerate(self.passage_ids)}

    def passage_token_counts(self) -> list[int]:
        return [len(s) for s in self.segments[1:-1]]
