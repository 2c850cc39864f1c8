"""Prompt text: instructions and passage blocks with immutable identifiers.

A prompt is kept as segments so that the probe can drop or replace one passage block and
rebuild every ablated prompt exactly:

    prefix = chat head + instruction      (segment 0)
    block_i = "[<passage id>] <title>\\n<text>\\n\\n"   (segments 1..k, in context order)
    tail   = "Question: <question>" + chat tail (up to the assistant turn)

The identifier inside a block is the passage's own id, never its position, so removing one
passage leaves every other block byte-for-byte unchanged (Sec. 4.1: no citation renumbering).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

from ascp.errors import AscpError
from ascp.types import Passage

INSTRUCTIONS: dict[str, str] = {
    # The paper's primary instruction: commit to one supported reading and answer it.
    "commit": (
        "Answer the question using the passages below. Commit to one interpretation of the "
        "question and give a short, direct answer grounded in the passages."
    ),
    # The paper's integrate baseline (Table 16): enumerate every supported interpretation.
    "integrate": (
        "Answer the question using the passages below. If the question is ambiguous, list every "
        "interpretation the passages support, each with its answer."
    ),
}

# The structured-output control of the enumerated single-response baseline (Appendix D.2, Table 17):
# one generation that lists distinct supported interpretations with grounding and stops rather than
# pads. It is appended to a base instruction, giving `commit+structured` and `integrate+structured`,
# because the paper runs it under both instructions (Table 17's rows).
STRUCTURED_SUFFIX = "+structured"
STRUCTURED = (
    "Write your answer as a list with one line per distinct interpretation of the question that the "
    "passages support: the interpretation, its answer, and the id of the passage it rests on in "
    "brackets, e.g. \"- <interpretation>: <answer> [<passage id>]\". Stop when no further supported "
    "interpretation is left; do not pad the list with repeated or unsupported lines."
)
INSTRUCTIONS.update({base + STRUCTURED_SUFFIX: f"{INSTRUCTIONS[base]} {STRUCTURED}"
                     for base in ("commit", "integrate")})


def is_structured(instruction: str) -> bool:
    """Whether a named instruction carries the structured-output control (`commit+structured`, ...)."""
    return instruction.endswith(STRUCTURED_SUFFIX)


def base_instruction(instruction: str) -> str:
    """The instruction without the structured-output control: `integrate+structured` -> `integrate`."""
    return instruction.removesuffix(STRUCTURED_SUFFIX)


@dataclass(frozen=True)
class PromptTemplate:
    """How a question and its passages become user-message text."""

    instruction: str = INSTRUCTIONS["commit"]
    passage_format: str = "[{id}] {title}\n{text}\n\n"
    untitled_passage_format: str = "[{id}]\n{text}\n\n"
    question_format: str = "Question: {question}"
    earlier_format: str = "Earlier answers to this question (give a different one):\n{answers}\n\n"
    system: str = ""  # the system message of the chat ("": none)
    prefix: str | None = None  # a user template's literal text before the passages (replaces the instruction)

    @classmethod
    def from_format(cls, template: str, passage_format: str | None = None, system: str = "") -> PromptTemplate:
        """A user's own prompt: a Python format string with a `{passages}` slot (where the passage
        blocks go, in context order) followed by a `{question}` slot, e.g.
        "Context:\n{passages}\nAnswer briefly: {question}". `passage_format` formats each block
        (fields {id}, {title}, {text}; default: ascp's "[id] title\ntext\n\n"). The probe removes
        one block at a time from this prompt and stays exact."""
        try:
            fields = [(literal, name) for literal, name, _, _ in string.Formatter().parse(template)]
        except ValueError as exc:
            raise AscpError(f"the prompt template is not a format string ({exc}); "
                            "write literal braces as {{ and }}.") from None
        names = [name for _, name in fields if name is not None]
        if names != ["passages", "question"]:
            raise AscpError("the prompt template needs one {passages} slot followed by one {question} slot and "
                            "no other slot (literal braces are {{ and }}), e.g. "
                            "'Context: {passages} Question: {question}'.")
        # Split at the real {passages} field: everything before it, rendered, is the prefix; the rest
        # (literal braces kept escaped) is the question format.
        position = next(i for i, (_, name) in enumerate(fields) if name == "passages")
        head = "".join(literal for literal, _ in fields[: position + 1])
        rest = "".join(literal.replace("{", "{{").replace("}", "}}") + ("{" + name + "}" if name else "")
                       for literal, name in fields[position + 1 :])
        block = passage_format or cls.passage_format
        if passage_format is not None:
            try:
                passage_format.format(id="x", title="t", text="y")
            except (KeyError, IndexError, ValueError) as exc:
                raise AscpError(f"the passage format may use only {{id}}, {{title}} and {{text}} ({exc}).") from None
        return cls(instruction="", passage_format=block, untitled_passage_format=passage_format or
                   cls.untitled_passage_format, question_format=rest, system=system, prefix=head)

    @classmethod
    def named(cls, name: str) -> PromptTemplate:
        """A template with one of the named instructions (`commit`, `integrate`, `commit+structured`,
        `integrate+structured`)."""
        if name not in INSTRUCTIONS:
            raise AscpError(f"unknown instruction {name!r}; choose one of {', '.join(INSTRUCTIONS)}.")
        return cls(instruction=INSTRUCTIONS[name])

    def instruction_text(self) -> str:
        if self.prefix is not None:
            return self.prefix
        return self.instruction.strip() + "\n\n"

    def _block_format(self, passage: Passage) -> str:
        return self.passage_format if passage.title.strip() else self.untitled_passage_format

    def passage_block(self, passage: Passage) -> str:
        return self._block_format(passage).format(id=passage.id, title=passage.title.strip(),
                                                  text=passage.text.strip())

    def passage_block_parts(self, passage: Passage) -> tuple[str, str, str] | None:
        """The block as (what precedes the text, the text, what follows it), so that a part of the text
        can be deleted in place; None when the passage format does not hold the text exactly once."""
        fmt = self._block_format(passage)
        if [name for _, name, _, _ in string.Formatter().parse(fmt)].count("text") != 1:
            return None
        marker = "\x00text\x00"  # no passage field holds a NUL (`ascp.params.check_text`)
        head, _, tail = fmt.format(id=passage.id, title=passage.title.strip(), text=marker).partition(marker)
        return head, passage.text.strip(), tail

    def question_text(self, question: str, earlier_outputs: Sequence[str] = ()) -> str:
        """The tail of the user message; earlier outputs (Carriage) are listed before the question."""
        earlier = ""
        if earlier_outputs:
            answers = "\n".join(f"- {' '.join(o.split())}" for o in earlier_outputs)
            earlier = self.earlier_format.format(answers=answers)
        return earlier + self.question_format.format(question=question.strip())

    def user_message(self, question: str, passages: Sequence[Passage], earlier_outputs: Sequence[str] = ()) -> str:
        """The whole user message as one string (what the model is shown)."""
        blocks = "".join(self.passage_block(p) for p in passages)
        return self.instruction_text() + blocks + self.question_text(question, earlier_outputs)


def prompt_template(instruction: str = "commit", template: PromptTemplate | str | None = None,
                    system: str = "") -> PromptTemplate:
    """The prompt: a named instruction, or the user's own template, with an optional system message."""
    from dataclasses import replace

    if template is not None and instruction != "commit":
        raise AscpError(f"the instruction {instruction!r} does not apply with your own prompt template (the "
                        "template is the whole instruction); give one or the other.")
    if isinstance(template, PromptTemplate):
        return replace(template, system=system or template.system)
    if template is not None:
        return PromptTemplate.from_format(template, system=system)
    return replace(PromptTemplate.named(instruction), system=system)
