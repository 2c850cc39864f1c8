"""LlamaIndex: which of a `Response`'s `source_nodes` the answer really used.

    from ascp.integrations.llamaindex import annotate_response
    response = query_engine.query(question)
    response = annotate_response(question, response, probe=ascp.Probe(model))
    [(n.node.metadata["ascp_score"], n.node.metadata["ascp_used"]) for n in response.source_nodes]

The source nodes keep their order (the probe's context order) and their retriever `score`; each
node comes back as a copy whose metadata has `ascp_score`, `ascp_normalized` and `ascp_used` (and
`ascp_sentences` per answer sentence when the probe reads sentences: `Probe(model, spans="sentences")`).
A node's passage id is its `node_id`, its title `metadata["title"]` (or `file_name`), its text
`get_content()` without metadata.
"""

from __future__ import annotations

from typing import Any

from ascp.api import Probe
from ascp.integrations import reading_metadata, require
from ascp.types import Passage


def annotate_nodes(question: str, nodes: list[Any], answer: str | None, *, probe: Probe) -> list[Any]:
    """Copies of `nodes` (`NodeWithScore`) annotated with the probe's reading of `answer`."""
    schema = require("llama_index.core.schema", "llamaindex")
    passages = []
    for item in nodes:
        meta = item.node.metadata or {}
        passages.append(Passage(id=str(item.node.node_id), title=str(meta.get("title") or meta.get("file_name") or ""),
                                text=item.node.get_content(metadata_mode=schema.MetadataMode.NONE)))
    result = probe.attribute(question, passages, answer)
    out = []
    for item, pid in zip(nodes, result.scores, strict=True):
        meta = {**(item.node.metadata or {}), **reading_metadata(result, pid)}
        out.append(schema.NodeWithScore(node=item.node.model_copy(update={"metadata": meta}), score=item.score))
    return out


def annotate_response(question: str, response: Any, *, probe: Probe) -> Any:
    """A copy of a LlamaIndex `Response` whose `source_nodes` carry the probe's reading of its text."""
    require("llama_index.core", "llamaindex")
    nodes = annotate_nodes(question, list(response.source_nodes), str(response.response), probe=probe)
    return response.__class__(response=response.response, source_nodes=nodes, metadata=response.metadata)
