"""Prompt segments: exact concatenation, passage spans, immutable identifiers under removal."""

from __future__ import annotations

import numpy as np
import pytest

from ascp.errors import AscpError
from ascp.prompts import INSTRUCTIONS, PromptTemplate
from ascp.types import Passage

PASSAGES = (
    Passage(id="doc-17", title="Mary Shelley", text="Mary Shelley wrote Frankenstein, published in 1818."),
    Passage(id="p2", title="", text="  Percy Bysshe Shelley was an English Romantic poet.  "),
    Passage(id="wiki:42", title="Frankenstein (1931 film)", text="A 1931 horror film directed by James Whale."),
    Passage(id="7", title="Creature", text="The creature is brought to life by Victor Frankenstein."),
)
QUESTION = "Who wrote Frankenstein?"


@pytest.fixture(scope="module")
def prompt(tiny_lm):
    return tiny_lm.encode_prompt(QUESTION, PASSAGES)


def test_segments_concatenate_to_text_and_ids(tiny_lm, prompt):
    assert len(prompt.segment_texts) == len(prompt.segments) == len(PASSAGES) + 2
    assert prompt.text == "".join(prompt.segment_texts)
    assert prompt.ids == [t for seg in prompt.segments for t in seg]
    assert prompt.num_tokens == len(prompt.ids)
    assert prompt.token_starts == [sum(len(s) for s in prompt.segments[:i]) for i in range(len(prompt.segments))]
    assert prompt.passage_ids == tuple(p.id for p in PASSAGES)
    # Each segment is tokenised on its own; the ids decode back to the text exactly.
    for text, ids in zip(prompt.segment_texts, prompt.segments, strict=True):
        assert list(ids) == tiny_lm.encode(text)
    assert tiny_lm.tokenizer.decode(prompt.ids, skip_special_tokens=False) == prompt.text


def test_text_is_the_chat_template_applied_to_the_user_message(tiny_lm, prompt):
    user = PromptTemplate().user_message(QUESTION, PASSAGES)
    rendered = tiny_lm.tokenizer.apply_chat_template(
        [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.text == rendered
    assert prompt.text.endswith("<|im_start|>assistant\n")


def test_passage_spans_slice_each_block(prompt):
    template = PromptTemplate()
    spans = prompt.passage_char_spans()
    assert list(spans) == [p.id for p in PASSAGES]
    previous_end = len(prompt.segment_texts[0])
    for p in PASSAGES:
        start, end = spans[p.id]
        assert start == previous_end  # blocks are contiguous, in context order
        block = prompt.text[start:end]
        assert block == template.passage_block(p)
        assert f"[{p.id}]" in block
        assert p.text.strip() in block
        if p.title:
            assert p.title in block
        previous_end = end
    assert prompt.text[previous_end:].startswith("Question: " + QUESTION)
    assert prompt.passage_token_counts() == [len(s) for s in prompt.segments[1:-1]]


def test_untitled_block_format():
    template = PromptTemplate()
    assert template.passage_block(Passage(id="x", text=" body ")) == "[x]\nbody\n\n"
    assert template.passage_block(Passage(id="x", text="body", title="T ")) == "[x] T\nbody\n\n"


@pytest.mark.parametrize("removed", range(len(PASSAGES)))
def test_removing_a_passage_leaves_every_other_block_unchanged(tiny_lm, prompt, removed):
    kept = PASSAGES[:removed] + PASSAGES[removed + 1 :]
    ablated = tiny_lm.encode_prompt(QUESTION, kept)
    full_blocks = {
        pid: (prompt.segment_texts[i + 1], prompt.segments[i + 1]) for i, pid in enumerate(prompt.passage_ids)
    }
    assert ablated.passage_ids == tuple(p.id for p in kept)
    for i, pid in enumerate(ablated.passage_ids):
        assert (ablated.segment_texts[i + 1], ablated.segments[i + 1]) == full_blocks[pid]
    assert ablated.segment_texts[0] == prompt.segment_texts[0] and ablated.segments[0] == prompt.segments[0]
    assert ablated.segment_texts[-1] == prompt.segment_texts[-1] and ablated.segments[-1] == prompt.segments[-1]
    # The ablated prompt is the full prompt with one block cut out, as text and as ids.
    start, end = prompt.passage_char_spans()[PASSAGES[removed].id]
    assert ablated.text == prompt.text[:start] + prompt.text[end:]
    t0 = prompt.token_starts[removed + 1]
    assert ablated.ids == prompt.ids[:t0] + prompt.ids[t0 + len(prompt.segments[removed + 1]) :]
    # The removed id appears nowhere else.
    assert f"[{PASSAGES[removed].id}]" not in ablated.text


def test_block_tokens_do_not_depend_on_position(tiny_lm):
    rng = np.random.default_rng(0)
    for _ in range(5):
        order = list(rng.permutation(len(PASSAGES)))
        shuffled = tuple(PASSAGES[i] for i in order)
        p = tiny_lm.encode_prompt(QUESTION, shuffled)
        for j, passage in enumerate(shuffled):
            assert p.segments[j + 1] == tuple(tiny_lm.encode(PromptTemplate().passage_block(passage)))


def test_named_templates():
    assert PromptTemplate.named("commit").instruction == INSTRUCTIONS["commit"]
    assert PromptTemplate.named("integrate").instruction == INSTRUCTIONS["integrate"]
    assert INSTRUCTIONS["commit"] != INSTRUCTIONS["integrate"]
    with pytest.raises(AscpError, match="unknown instruction"):
        PromptTemplate.named("summarise")


def test_instruction_changes_only_the_prefix(tiny_lm, prompt):
    other = tiny_lm.encode_prompt(QUESTION, PASSAGES, PromptTemplate.named("integrate"))
    assert other.segments[0] != prompt.segments[0]
    assert other.segments[1:] == prompt.segments[1:]
