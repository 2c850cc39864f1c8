"""Adapters, tested with the real libraries' objects (no imitations of their classes)."""

from __future__ import annotations

import pytest

import ascp
from ascp.errors import AscpError

langchain_core = pytest.importorskip("langchain_core", reason="LangChain is an optional extra: pip install "
                                     "'ascp[langchain]'")
from langchain_core.documents import Document  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402

from ascp.integrations.langchain import annotate_documents, attribution_step  # noqa: E402

QUESTION = "Who wrote the novel and when was it published?"
ANSWER = "The author was born in 1850 in a small town."
DOCS = [
    Document(page_content="Mary Shelley wrote the novel, published in 1818.", metadata={"title": "Shelley"},
             id="shelley"),
    Document(page_content="The quick brown fox jumps over the lazy dog.", metadata={"source": "web"}),
    Document(page_content="The first edition of 1899 names the author.", metadata={"id": "ed", "title": "Edition"}),
]


def test_documents_come_back_annotated_with_the_probe_reading(tiny_lm):
    probe = ascp.Probe(tiny_lm, threshold=0.2)
    out = annotate_documents(QUESTION, DOCS, ANSWER, probe=probe)
    assert all(isinstance(d, Document) for d in out) and [d.page_content for d in out] == [d.page_content for d in DOCS]
    expected = probe.attribute(QUESTION, [{"id": "shelley", "title": "Shelley", "text": DOCS[0].page_content},
                                          {"id": "2", "text": DOCS[1].page_content},
                                          {"id": "ed", "title": "Edition", "text": DOCS[2].page_content}], ANSWER)
    assert [d.metadata["ascp_score"] for d in out] == list(expected.scores.values())
    assert [d.metadata["ascp_used"] for d in out] == [pid in expected.used for pid in expected.scores]
    assert out[1].metadata["source"] == "web" and "ascp_score" not in DOCS[1].metadata  # copies, originals kept


def test_attribution_step_runs_after_a_chain(tiny_lm):
    probe = ascp.Probe(tiny_lm, threshold=0.2)
    chain = RunnableLambda(lambda q: {"question": q, "context": DOCS, "answer": ANSWER}) | attribution_step(probe)
    state = chain.invoke(QUESTION)
    assert state["answer"] == ANSWER and len(state["context"]) == 3
    assert all("ascp_normalized" in d.metadata for d in state["context"])
    broken = RunnableLambda(lambda q: {"question": q, "docs": DOCS}) | attribution_step(probe)
    with pytest.raises(AscpError, match="has no 'context', 'answer'"):
        broken.invoke(QUESTION)


# ----- LlamaIndex ---------------------------------------------------------------------------------
def test_llamaindex_response_source_nodes_are_annotated(tiny_lm):
    pytest.importorskip("llama_index.core", reason="LlamaIndex is an optional extra: pip install 'ascp[llamaindex]'")
    from llama_index.core.base.response.schema import Response
    from llama_index.core.schema import NodeWithScore, TextNode

    from ascp.integrations.llamaindex import annotate_response

    nodes = [NodeWithScore(node=TextNode(text=d.page_content, id_=f"n{i}", metadata=dict(d.metadata)),
                           score=0.9 - i / 10) for i, d in enumerate(DOCS)]
    probe = ascp.Probe(tiny_lm, threshold=0.2)
    out = annotate_response(QUESTION, Response(response=ANSWER, source_nodes=nodes), probe=probe)
    assert isinstance(out, Response) and out.response == ANSWER
    assert [n.node.node_id for n in out.source_nodes] == ["n0", "n1", "n2"]
    assert [n.score for n in out.source_nodes] == [n.score for n in nodes]
    expected = probe.attribute(QUESTION, [{"id": f"n{i}", "title": d.metadata.get("title", ""),
                                           "text": d.page_content} for i, d in enumerate(DOCS)], ANSWER)
    assert [n.node.metadata["ascp_score"] for n in out.source_nodes] == list(expected.scores.values())
    assert "ascp_score" not in nodes[0].node.metadata  # copies


# ----- Haystack -----------------------------------------------------------------------------------
def test_haystack_component_runs_alone_and_in_a_pipeline(tiny_lm, monkeypatch):
    monkeypatch.setenv("HAYSTACK_TELEMETRY_ENABLED", "False")
    haystack = pytest.importorskip("haystack", reason="Haystack is an optional extra: pip install 'ascp[haystack]'")
    from ascp.integrations.haystack import AscpAttributor

    docs = [haystack.Document(content=d.page_content, meta=dict(d.metadata), id=f"h{i}") for i, d in enumerate(DOCS)]
    probe = ascp.Probe(tiny_lm, threshold=0.2)
    alone = AscpAttributor(probe).run(query=QUESTION, replies=[ANSWER], documents=docs)
    expected = probe.attribute(QUESTION, [{"id": f"h{i}", "title": d.metadata.get("title", ""),
                                           "text": d.page_content} for i, d in enumerate(DOCS)], ANSWER)
    assert [d.meta["ascp_score"] for d in alone["documents"]] == list(expected.scores.values())
    assert [d.id for d in alone["used"]] == list(expected.used)
    pipeline = haystack.Pipeline()
    pipeline.add_component("attribution", AscpAttributor(probe))
    result = pipeline.run({"attribution": {"query": QUESTION, "replies": [ANSWER], "documents": docs}})
    assert [d.meta["ascp_used"] for d in result["attribution"]["documents"]] == [
        d.meta["ascp_used"] for d in alone["documents"]]
    with pytest.raises(AscpError, match="got no reply"):
        AscpAttributor(probe).run(query=QUESTION, replies=[], documents=docs)


# ----- per sentence, in every adapter ---------------------------------------------------------------
SENTENCED = "Mary Shelley wrote the novel. It was published in 1818."


def expected_sentences(result, pid: str) -> list[dict]:
    """The reading of passage `pid` per answer sentence, from the probe's own result."""
    return [{"text": s.text, "start": s.start, "end": s.end, "score": s.reading.scores[pid],
             "normalized": s.reading.normalized[pid], "used": pid in s.reading.used} for s in result.spans]


def test_every_adapter_returns_the_per_sentence_readings_of_a_sentence_probe(tiny_lm, monkeypatch):
    """With `Probe(model, spans="sentences")`, LangChain documents, LlamaIndex nodes and Haystack
    documents carry `ascp_sentences`: this passage's reading by each answer sentence."""
    probe = ascp.Probe(tiny_lm, threshold=0.2, spans="sentences")
    passages = [{"id": "shelley", "title": "Shelley", "text": DOCS[0].page_content},
                {"id": "2", "text": DOCS[1].page_content},
                {"id": "ed", "title": "Edition", "text": DOCS[2].page_content}]
    expected = probe.attribute(QUESTION, passages, SENTENCED)
    assert [s.text for s in expected.spans] == ["Mary Shelley wrote the novel.", "It was published in 1818."]
    out = annotate_documents(QUESTION, DOCS, SENTENCED, probe=probe)
    assert [d.metadata["ascp_sentences"] for d in out] == [expected_sentences(expected, p) for p in expected.scores]
    assert "ascp_sentences" not in annotate_documents(QUESTION, DOCS, SENTENCED,
                                                      probe=ascp.Probe(tiny_lm))[0].metadata  # whole answer only

    pytest.importorskip("llama_index.core", reason="LlamaIndex is an optional extra: pip install 'ascp[llamaindex]'")
    from llama_index.core.base.response.schema import Response
    from llama_index.core.schema import NodeWithScore, TextNode

    from ascp.integrations.llamaindex import annotate_response

    nodes = [NodeWithScore(node=TextNode(text=d.page_content, id_=f"n{i}", metadata=dict(d.metadata)), score=0.5)
             for i, d in enumerate(DOCS)]
    annotated = annotate_response(QUESTION, Response(response=SENTENCED, source_nodes=nodes), probe=probe)
    by_node = probe.attribute(QUESTION, [{"id": f"n{i}", "title": d.metadata.get("title", ""), "text": d.page_content}
                                         for i, d in enumerate(DOCS)], SENTENCED)
    assert [n.node.metadata["ascp_sentences"] for n in annotated.source_nodes] == [
        expected_sentences(by_node, f"n{i}") for i in range(3)]

    monkeypatch.setenv("HAYSTACK_TELEMETRY_ENABLED", "False")
    haystack = pytest.importorskip("haystack", reason="Haystack is an optional extra: pip install 'ascp[haystack]'")
    from ascp.integrations.haystack import AscpAttributor

    docs = [haystack.Document(content=d.page_content, meta=dict(d.metadata), id=f"h{i}") for i, d in enumerate(DOCS)]
    run = AscpAttributor(probe).run(query=QUESTION, replies=[SENTENCED], documents=docs)
    by_doc = probe.attribute(QUESTION, [{"id": f"h{i}", "title": d.metadata.get("title", ""), "text": d.page_content}
                                        for i, d in enumerate(DOCS)], SENTENCED)
    assert [d.meta["ascp_sentences"] for d in run["documents"]] == [expected_sentences(by_doc, f"h{i}")
                                                                     for i in range(3)]
