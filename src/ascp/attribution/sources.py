"""Sources at sentence granularity: each passage's sentences become what an estimator deletes.

`sources="sentences"` keeps the prompt's text and token ids exactly as they are (the model reads the
same prompt) and cuts each passage block finer: the block's identifier and title stay a segment of
their own, and every sentence of its text, with the whitespace after it, becomes a source with the
id `<passage id>#<n>` (n from 1 in passage order). Deleting a source removes exactly those
characters (`AttributionResult.passage_spans` names them), so every estimator that edits the prompt
through `EncodedPrompt.deletion` attributes over sentences unchanged, and the prefix store shares the
common prefix of each deletion as it does for passages. `hierarchical` groups the sentences by their
passage (`EncodedPrompt.source_passages`). Sentences are split by the response splitter
(`ascp.attribution.spans.sentence_spans`: sentencex, rules, no download).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ascp.attribution.spans import sentence_spans
from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prompts import PromptTemplate
from ascp.types import Passage

SOURCE_KINDS = ("passages", "sentences")
"""What `sources=` may name: the passages (the default) or their sentences."""
SENTENCE_MARK = "#"
"""Between a passage id and a sentence's number in a sentence source's id: `doc-7#2`."""


def check_sources(sources: object) -> str:
    """`sources` when it is one of `SOURCE_KINDS`, else one sentence."""
    if sources not in SOURCE_KINDS:
        raise AscpError(f"sources must be {' or '.join(SOURCE_KINDS)}, got {sources!r}.")
    return str(sources)


def sentence_pieces(text: str) -> list[str]:
    """`text` cut into its sentences, each with the whitespace that follows it (the pieces join back to
    `text`; whitespace before the first sentence joins it)."""
    starts = [start for start, _ in sentence_spans(text)]
    if not starts:
        return []
    bounds = [0, *starts[1:], len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def sentence_sources(prompt: EncodedPrompt, passages: Sequence[Passage], template: PromptTemplate,
                     where: str) -> tuple[EncodedPrompt, tuple[Passage, ...]]:
    """`prompt` (encoded from `passages` under `template`) with each passage's sentences as its sources,
    and those sources as passages (id `<passage id>#<n>`, the sentence's text, the passage's title).
    One sentence, naming `where`, when a passage's block cannot be cut (the passage format does not hold
    its text once) or its text holds no sentence."""
    if prompt.source_segments:
        return prompt, tuple(passages)  # already cut
    if len(prompt.passage_ids) != len(passages) or len(prompt.segment_texts) != len(passages) + 2:
        raise AscpError(f"{where}: the prompt does not hold one block per passage, so its sentences cannot be "
                        "the sources.")
    segments = [prompt.segment_texts[0]]
    source_segments: list[int] = []
    source_passages: list[str] = []
    sources: list[Passage] = []
    for j, passage in enumerate(passages):
        parts = template.passage_block_parts(passage)
        block = prompt.segment_texts[j + 1]
        if parts is None or "".join(parts) != block:
            raise AscpError(f"{where}: passage {passage.id!r}: its block does not hold its text once (the passage "
                            "format needs exactly one {text} slot), so its sentences cannot be the sources; use "
                            "sources=passages.")
        head, text, tail = parts
        pieces = sentence_pieces(text)
        if not pieces:
            raise AscpError(f"{where}: passage {passage.id!r} splits into no sentence, so it has no sentence "
                            "source; give it some text or use sources=passages.")
        segments.append(head)
        for n, piece in enumerate(pieces, start=1):
            source_segments.append(len(segments))
            segments.append(piece)
            source_passages.append(passage.id)
            sources.append(Passage(id=f"{passage.id}{SENTENCE_MARK}{n}", text=piece.strip(), title=passage.title))
        segments.append(tail)
    segments.append(prompt.segment_texts[-1])
    cut = replace(prompt, segment_texts=tuple(segments), passage_ids=tuple(s.id for s in sources),
                  source_segments=tuple(source_segments), source_passages=tuple(source_passages))
    assert cut.text == prompt.text  # the model reads the very same prompt
    return cut, tuple(sources)


__all__ = ["SENTENCE_MARK", "SOURCE_KINDS", "check_sources", "sentence_pieces", "sentence_sources"]
