"""LangChain: which of a chain's retrieved `Document`s the answer really used.

    from ascp.integrations.langchain import annotate_documents, attribution_step
    docs = annotate_documents(question, docs, answer, probe=ascp.Probe(model))
    chain = rag_chain | attribution_step(ascp.Probe(model))

Documents keep their order (the context order of the probe) and come back as copies with
`metadata["ascp_score"]` (raw score, nats per response token for `loo`),
`metadata["ascp_normalized"]` and `metadata["ascp_used"]` (and `metadata["ascp_sentences"]`, the
reading per answer sentence, when the probe reads sentences: `Probe(model, spans="sentences")`). A
document's passage id is its `id`,
else `metadata["id"]`, else its position ("1".."n"); its title is `metadata["title"]` if any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ascp.api import Probe
from ascp.errors import AscpError
from ascp.integrations import reading_metadata, require
from ascp.types import AttributionResult, Passage


def _passages(documents: Sequence[Any]) -> list[Passage]:
    passages = []
    for i, doc in enumerate(documents, start=1):
        meta = dict(getattr(doc, "metadata", None) or {})
        pid = getattr(doc, "id", None) or meta.get("id") or str(i)
        passages.append(Passage(id=str(pid), text=str(doc.page_content), title=str(meta.get("title") or "")))
    return passages


def annotate_documents(question: str, documents: Sequence[Any], answer: str | None, *,
                       probe: Probe) -> list[Any]:
    """Copies of `documents` with the probe's reading of `answer` (None: the model answers first)
    in their metadata; returns them in the given order."""
    require("langchain_core", "langchain")
    result: AttributionResult = probe.attribute(question, _passages(documents), answer)
    out = []
    for doc, pid in zip(documents, result.scores, strict=True):
        meta = {**(doc.metadata or {}), **reading_metadata(result, pid)}
        out.append(doc.model_copy(update={"metadata": meta}))
    return out


def attribution_step(probe: Probe, documents_key: str = "context", answer_key: str = "answer",
                     question_key: str = "question"):
    """A `RunnableLambda` for the end of a chain whose output is a dict with the question, the
    retrieved documents and the answer: it returns the dict with the documents annotated."""
    runnables = require("langchain_core.runnables", "langchain")

    def annotate(state: Mapping[str, Any]) -> dict[str, Any]:
        missing = [k for k in (question_key, documents_key, answer_key) if k not in state]
        if missing:
            raise AscpError(f"the chain's output has no {', '.join(map(repr, missing))}; name the keys with "
                            "attribution_step(probe, documents_key=..., answer_key=..., question_key=...).")
        docs = annotate_documents(state[question_key], state[documents_key], state[answer_key], probe=probe)
        return {**state, documents_key: docs}

    return runnables.RunnableLambda(annotate, name="ascp_attribution")
