"""A RAG-evaluation metric: the causal share of a response's contexts the response really used.

`causal_context_use(question, response, contexts, probe=...)` has the plain
`score(question, response, contexts) -> float` shape evaluation harnesses call (RAGAS-style
single-turn samples: `user_input`, `response`, `retrieved_contexts`); `metric(probe)` binds the
probe and returns exactly that function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ascp.api import Probe


def causal_context_use(question: str, response: str, contexts: Sequence[str], *, probe: Probe) -> float:
    """|used contexts| / |contexts| by the causal probe (contexts in the order the prompt gives them)."""
    result = probe.attribute(question, list(contexts), response)
    return len(result.used) / len(result.scores)


def metric(probe: Probe) -> Callable[[str, str, Sequence[str]], float]:
    """`score(question, response, contexts)` with `probe` bound."""

    def score(question: str, response: str, contexts: Sequence[str]) -> float:
        return causal_context_use(question, response, contexts, probe=probe)

    return score
