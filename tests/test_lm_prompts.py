"""Prompt segments: exact concatenation, passage spans, immutable identifiers under removal."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ascp.errors import AscpError
from ascp.experiments import Condition
from ascp.experiments.plan import loop_config
from ascp.experiments.spec import Settings
from ascp.lm.prompts import INSTRUCTIONS, STRUCTURED, PromptTemplate, base_instruction, is_structured
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


def test_ids_are_the_tokenizer_on_the_whole_text(tiny_lm, prompt):
    assert len(prompt.segment_texts) == len(PASSAGES) + 2
    assert prompt.text == "".join(prompt.segment_texts)
    # Canonical: the ids a user's own stack feeds for this text, not per-segment ids joined.
    assert list(prompt.ids) == tiny_lm.tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
    assert prompt.num_tokens == len(prompt.ids)
    assert prompt.passage_ids == tuple(p.id for p in PASSAGES)
    assert tiny_lm.tokenizer.decode(list(prompt.ids), skip_special_tokens=False) == prompt.text



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


def test_untitled_block_format():
    template = PromptTemplate()
    assert template.passage_block(Passage(id="x", text=" body ")) == "[x]\nbody\n\n"
    assert template.passage_block(Passage(id="x", text="body", title="T ")) == "[x] T\nbody\n\n"


@pytest.mark.parametrize("removed", range(len(PASSAGES)))
def test_removing_a_passage_leaves_every_other_block_unchanged(tiny_lm, prompt, removed):
    kept = PASSAGES[:removed] + PASSAGES[removed + 1 :]
    ablated = tiny_lm.encode_prompt(QUESTION, kept)
    full_blocks = {pid: prompt.segment_texts[i + 1] for i, pid in enumerate(prompt.passage_ids)}
    assert ablated.passage_ids == tuple(p.id for p in kept)
    for i, pid in enumerate(ablated.passage_ids):
        assert ablated.segment_texts[i + 1] == full_blocks[pid]
    assert ablated.segment_texts[0] == prompt.segment_texts[0]
    assert ablated.segment_texts[-1] == prompt.segment_texts[-1]
    # The ablated prompt is the full prompt with one block cut out of the text, tokenized whole.
    start, end = prompt.passage_char_spans()[PASSAGES[removed].id]
    assert ablated.text == prompt.text[:start] + prompt.text[end:]
    assert ablated.text == prompt.edited_text({removed + 1: ""})
    assert list(ablated.ids) == tiny_lm.tokenizer(ablated.text, add_special_tokens=False)["input_ids"]
    # The removed id appears nowhere else.
    assert f"[{PASSAGES[removed].id}]" not in ablated.text


def test_block_text_does_not_depend_on_position(tiny_lm):
    rng = np.random.default_rng(0)
    for _ in range(5):
        order = list(rng.permutation(len(PASSAGES)))
        shuffled = tuple(PASSAGES[i] for i in order)
        p = tiny_lm.encode_prompt(QUESTION, shuffled)
        for j, passage in enumerate(shuffled):
            assert p.segment_texts[j + 1] == PromptTemplate().passage_block(passage)


def test_named_templates():
    assert PromptTemplate.named("commit").instruction == INSTRUCTIONS["commit"]
    assert PromptTemplate.named("integrate").instruction == INSTRUCTIONS["integrate"]
    assert INSTRUCTIONS["commit"] != INSTRUCTIONS["integrate"]
    with pytest.raises(AscpError, match="unknown instruction"):
        PromptTemplate.named("summarise")


def test_instruction_changes_only_the_prefix(tiny_lm, prompt):
    other = tiny_lm.encode_prompt(QUESTION, PASSAGES, PromptTemplate.named("integrate"))
    assert other.segment_texts[0] != prompt.segment_texts[0]
    assert other.segment_texts[1:] == prompt.segment_texts[1:]


# ----- the user's own prompt ---------------------------------------------------------------------
def test_a_user_template_and_system_message_frame_the_prompt(tiny_lm):
    template = PromptTemplate.from_format("Use these {{sources}}:\n{passages}Now answer: {question}",
                                          passage_format="<{id}> {text}\n\n", system="You are terse.")
    prompt = tiny_lm.encode_prompt(QUESTION, PASSAGES, template)
    user = "Use these {sources}:\n" + "".join(f"<{p.id}> {p.text.strip()}\n\n" for p in PASSAGES) + \
        f"Now answer: {QUESTION}"
    rendered = tiny_lm.tokenizer.apply_chat_template(
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": user}],
        tokenize=False, add_generation_prompt=True)
    assert prompt.text == rendered
    assert list(prompt.ids) == tiny_lm.tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
    start, end = prompt.passage_char_spans()["p2"]
    assert prompt.text[start:end] == "<p2> Percy Bysshe Shelley was an English Romantic poet.\n\n"


@pytest.mark.parametrize(("template", "message"), [
    ("Answer {question}", "needs one {passages} slot"),
    ("{question} then {passages}", "needs one {passages} slot"),
    ("{passages}{passages}{question}", "needs one {passages} slot"),
    ("{passages} {question} {other}", "no other slot"),
    ("Ctx: {passages}Write {{question}} then answer.", "needs one {passages} slot"),
    ("{passages} {question", "not a format string"),
])
def test_a_template_without_its_slots_is_one_sentence(template, message):
    with pytest.raises(AscpError, match=re.escape(message)):
        PromptTemplate.from_format(template)


def test_literal_braces_stay_literal():
    template = PromptTemplate.from_format("Use {{passages}} as {{x}}:\n{passages}Q {{y}}: {question}")
    assert template.instruction_text() == "Use {passages} as {x}:\n"
    assert template.question_text("why?") == "Q {y}: why?"


def test_loo_stays_exact_under_a_user_template(tiny_lm, random_item):
    from ascp.attribution.base import ProbeInput
    from ascp.attribution.loo import LeaveOneOut

    item = random_item(tiny_lm, 4, seed=90)
    template = PromptTemplate.from_format("Docs:\n{passages}Q: {question}", passage_format="* {text}\n",
                                          system="Be brief.")
    prompt = tiny_lm.encode_prompt(item.question, item.passages, template)
    custom = ProbeInput(item.question, item.passages, prompt, item.response_text, item.response_ids)
    cached, naive = LeaveOneOut().score(tiny_lm, custom), LeaveOneOut(reuse_prefix=False).score(tiny_lm, custom)
    np.testing.assert_allclose(cached.values, naive.values, rtol=0, atol=1e-5)
    assert cached.tokens_processed < naive.tokens_processed


def test_an_instruction_and_a_template_do_not_mix():
    from ascp.lm.prompts import prompt_template

    assert prompt_template("commit", "A {passages} B {question}").prefix == "A "
    with pytest.raises(AscpError, match="does not apply with your own prompt template"):
        prompt_template("integrate", "A {passages} B {question}")


def test_structured_prompt_contains_the_instruction_and_the_control(tiny_lm):
    for base in ("commit", "integrate"):
        name = f"{base}+structured"
        assert is_structured(name) and base_instruction(name) == base and not is_structured(base)
        assert INSTRUCTIONS[name] == INSTRUCTIONS[base] + " " + STRUCTURED
        template = loop_config(Condition.parse(f"rotate(k=2,T=1,instruction={name},budget=3)"), 0,
                               Settings()).template
        assert template == PromptTemplate.named(name)
        passages = (Passage(id="wiki:7", title="A", text="Born in 1850."), Passage(id="p2", title="", text="x"))
        text = tiny_lm.encode_prompt("When was A born?", passages, template).text
        assert INSTRUCTIONS[base] in text and STRUCTURED in text
        assert "stop" in STRUCTURED.lower() and "pad" in STRUCTURED and "passage id" in STRUCTURED
