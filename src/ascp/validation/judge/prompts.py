"""The judge's prompts: identity-blinded (the answers with passage ids masked, one document's text
without id or title), for coverage (does the portfolio use this document?) and novelty (does y_t say
something y_1..y_{t-1} do not?)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prompts import PromptTemplate
from ascp.lm.protocol import LanguageModel
from ascp.types import Passage
from ascp.validation.judge.scoring import NO_WORDS, USED_AT, YES_WORDS

COVERAGE_INSTRUCTION = ("You are checking which documents a set of answers drew on. Below are the answers "
                        "given to one question, then one document.")
COVERAGE_QUESTION = "Do the answers use information from this document? Answer yes or no."
DOCUMENT_FORMAT = "Document:\n{text}\n\n"
NOVELTY_INSTRUCTION = ("You are checking whether an answer adds anything new. Below are earlier answers to one "
                       "question, then a new answer.")
NOVELTY_QUESTION = ("New answer: {question}\n\nDoes the new answer say something that the earlier answers do not? "
                    "Answer yes or no.")


def masked(response: str, ids: Sequence[str]) -> str:
    """The response with whitespace collapsed and bracketed citations of passage ids ("[d7]") shown as
    "[?]", so no passage id reaches the judge; an empty response reads "(empty)"."""
    text = " ".join(response.split())
    for pid in sorted(ids, key=len, reverse=True):
        text = re.sub(r"\[\s*" + re.escape(pid) + r"\s*\]", "[?]", text)
    return text or "(empty)"


def answers_block(responses: Sequence[str]) -> str:
    """"Answer 1: ...\\nAnswer 2: ..." (the responses as `masked` gives them)."""
    return "\n".join(f"Answer {i}: {r}" for i, r in enumerate(responses, start=1))


def coverage_template(responses: Sequence[str]) -> PromptTemplate:
    """The coverage judge's template: instruction and answers, then one document, then the question."""
    return PromptTemplate(instruction=f"{COVERAGE_INSTRUCTION}\n\nAnswers:\n{answers_block(responses)}",
                          passage_format=DOCUMENT_FORMAT, untitled_passage_format=DOCUMENT_FORMAT,
                          question_format=COVERAGE_QUESTION)


def novelty_template(earlier: Sequence[str]) -> PromptTemplate:
    """The novelty judge's template: instruction and earlier answers, then the new one (the "question")."""
    return PromptTemplate(instruction=f"{NOVELTY_INSTRUCTION}\n\nEarlier answers:\n{answers_block(earlier)}",
                          question_format=NOVELTY_QUESTION)


def blinded(passage: Passage) -> Passage:
    """The passage as the judge sees it: its text only (no id, no title)."""
    return Passage(id="document", text=passage.text)


def coverage_prompts(lm: LanguageModel, responses: Sequence[str], passages: Sequence[Passage]) -> list[EncodedPrompt]:
    """One prompt per passage: does the portfolio use information from it?"""
    template = coverage_template(responses)
    return [lm.encode_prompt("", [blinded(p)], template=template) for p in passages]


def novelty_prompts(lm: LanguageModel, responses: Sequence[str]) -> list[EncodedPrompt]:
    """One prompt per round t >= 2: does y_t say something new relative to y_1..y_{t-1}?"""
    return [lm.encode_prompt(responses[t], [], template=novelty_template(responses[:t]))
            for t in range(1, len(responses))]


def prompts_used() -> dict[str, Any]:
    """The judge's prompt pieces and answer words, verbatim (recorded in judge.json)."""
    return {"coverage": {"instruction": COVERAGE_INSTRUCTION, "answers": "Answers:\nAnswer 1: ...",
                         "document": DOCUMENT_FORMAT, "question": COVERAGE_QUESTION},
            "novelty": {"instruction": NOVELTY_INSTRUCTION, "answers": "Earlier answers:\nAnswer 1: ...",
                        "question": NOVELTY_QUESTION},
            "yes": list(YES_WORDS), "no": list(NO_WORDS), "used_at": USED_AT}
