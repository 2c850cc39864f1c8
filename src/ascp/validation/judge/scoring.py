"""The judge's verdict: P(yes) = P("yes") / (P("yes") + P("no")) from the teacher-forced
log-probabilities of the answer words after a prompt (`lm.score`), never sampled."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.protocol import LanguageModel

USED_AT = 0.5  # a passage counts as judged used when P(yes) >= this

# Answer words scored after the prompt; each side's probability is summed over its spellings.
YES_WORDS = ("Yes", "yes")
NO_WORDS = ("No", "no")


def answer_ids(lm: LanguageModel, prompt_text: str, words: Sequence[str]) -> list[tuple[int, ...]]:
    """Token ids of each answer word as the judge's reply: after a space when the prompt ends in a
    non-space character (a base model's "Answer:"), else as is (a chat template's assistant turn)."""
    space = " " if prompt_text and not prompt_text[-1].isspace() else ""
    return [tuple(lm.encode(space + w)) for w in words]


def p_yes(lm: LanguageModel, prompts: Sequence[EncodedPrompt]) -> np.ndarray:
    """P(yes) / (P(yes) + P(no)) per prompt, from teacher-forced log-probabilities (never sampled).

    P(side) sums exp(sum of token log-probs) over the side's spellings (`YES_WORDS`, `NO_WORDS`).
    """
    if not prompts:
        return np.zeros(0)
    from ascp.lm.prefixes import fresh_prefixes

    fresh_prefixes(lm)  # each prompt is prefilled once for all its answers, the same way in every call
    groups: dict[tuple[tuple[int, ...], ...], list[int]] = {}  # prompts sharing the answer tokenisation
    for i, p in enumerate(prompts):
        ids = (*answer_ids(lm, p.text, YES_WORDS), *answer_ids(lm, p.text, NO_WORDS))
        groups.setdefault(ids, []).append(i)
    out = np.zeros(len(prompts))
    for answers, members in groups.items():
        totals = np.array([_answer_logprob(lm, [prompts[i] for i in members], a) for a in answers])
        yes = np.logaddexp.reduce(totals[: len(YES_WORDS)], axis=0)
        no = np.logaddexp.reduce(totals[len(YES_WORDS):], axis=0)
        out[members] = 1.0 / (1.0 + np.exp(no - yes))
    return out


def _answer_logprob(lm: LanguageModel, prompts: Sequence[EncodedPrompt], answer: Sequence[int]) -> np.ndarray:
    """log p(answer | prompt) for each prompt (nats), one `score` call."""
    if not answer:
        raise AscpError(f"judge model {getattr(lm, 'name', '?')!r}: an answer word tokenises to nothing.")
    for p in prompts:
        lm.check_fits("judge prompt", p.num_tokens, len(answer))
    scored = lm.score([p.ids for p in prompts], answer)
    return np.array([float(np.sum(lp)) for lp in scored.logprobs])
