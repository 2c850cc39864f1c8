"""A RAG-evaluation metric: which of a response's contexts the response really used, causally.

`causal_context_use(question, response, contexts, probe=...)` has the plain
`score(question, response, contexts) -> float` shape evaluation harnesses call (RAGAS-style
single-turn samples: `user_input`, `response`, `retrieved_contexts`); `metric(probe)` binds the
probe and returns exactly that function. `read_sample` is the one reading behind it and behind
the RAGAS and DeepEval metrics (`integrations/ragas.py`, `integrations/deepeval.py`): the
sample's inputs checked, then the probe's per-context reading. Two aggregates of that reading:
`used_fraction` (|used| / |contexts|) and `utilization` (RAGAS's ContextUtilization formula, the
rank-weighted average precision of the per-context verdicts, with the probe's causal verdict
in place of an LLM judge's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ascp.api import Probe
from ascp.errors import AscpError
from ascp.types import AttributionResult

AGGREGATES = ("used_fraction", "utilization")
_REQUEST_PREFIX = "request 'sample': "


def sample_label(question: object, limit: int = 60) -> str:
    """How error sentences name a sample: its question, shortened."""
    text = " ".join(str(question).split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def read_sample(question: object, response: object, contexts: object, *, probe: Probe) -> AttributionResult:
    """The probe's reading of one sample (contexts in the order the prompt gave them).

    Raises one `AscpError` sentence naming the sample for a missing question, an empty response,
    no contexts, or a prompt longer than the model's window.
    """
    name = sample_label(question)
    if not isinstance(question, str) or not question.strip():
        raise AscpError(f"sample {name}: the question (user_input / input) is empty; give the question the "
                        "response answers.")
    if not isinstance(response, str) or not response.strip():
        raise AscpError(f"sample {name}: the response is empty; the causal probe scores a given response, so "
                        "give the response your RAG system produced.")
    if isinstance(contexts, str) or not isinstance(contexts, Sequence) or not contexts:
        raise AscpError(f"sample {name}: it has no retrieved contexts; give the list of context strings the "
                        "response was generated from.")
    if not all(isinstance(c, str) and c.strip() for c in contexts):
        raise AscpError(f"sample {name}: every retrieved context must be a non-empty string.")
    try:
        return probe.attribute(question, list(contexts), response, id="sample")
    except AscpError as err:
        # the probe names the request by its id; name the sample by its question instead
        raise AscpError(f"sample {name}: {str(err).removeprefix(_REQUEST_PREFIX)}") from None


def bound_probe(probe: Probe | None) -> Probe:
    """`probe`, or a probe of the embedded default model (loaded once per process) when None."""
    if probe is not None:
        return probe
    from ascp.api import default_model

    return Probe(default_model())


def used_flags(result: AttributionResult) -> list[bool]:
    """The probe's used verdict per context, in context order."""
    used = set(result.used)
    return [pid in used for pid in result.scores]


def used_fraction(result: AttributionResult) -> float:
    """|used contexts| / |contexts|."""
    return len(result.used) / len(result.scores)


def utilization(result: AttributionResult) -> float:
    """RAGAS's ContextUtilization aggregate (rank-weighted average precision) of the used verdicts.

    sum_i precision@i * v_i / (sum_i v_i + 1e-10), exactly as RAGAS computes it from its LLM
    verdicts (0 when nothing was used).
    """
    flags = used_flags(result)
    hits, total = 0, 0.0
    for i, used in enumerate(flags, start=1):
        if used:
            hits += 1
            total += hits / i
    return total / (hits + 1e-10)


def aggregate(result: AttributionResult, how: str) -> float:
    """`used_fraction` or `utilization` of one reading."""
    if how == "used_fraction":
        return used_fraction(result)
    if how == "utilization":
        return utilization(result)
    raise AscpError(f"unknown aggregate {how!r}; use one of {', '.join(AGGREGATES)}.")


def causal_context_use(question: str, response: str, contexts: Sequence[str], *, probe: Probe) -> float:
    """|used contexts| / |contexts| by the causal probe (contexts in the order the prompt gives them)."""
    return used_fraction(read_sample(question, response, contexts, probe=probe))


def metric(probe: Probe) -> Callable[[str, str, Sequence[str]], float]:
    """`score(question, response, contexts)` with `probe` bound."""

    def score(question: str, response: str, contexts: Sequence[str]) -> float:
        return causal_context_use(question, response, contexts, probe=probe)

    return score
