"""Haystack: a pipeline component that marks which retrieved `Document`s the reply used.

    from ascp.integrations.haystack import AscpAttributor
    pipeline.add_component("attribution", AscpAttributor(ascp.Probe(model)))
    pipeline.connect("llm.replies", "attribution.replies")
    pipeline.connect("retriever.documents", "attribution.documents")
    # run with {"attribution": {"query": question}, ...}

`run(query, replies, documents)` scores the first reply against the documents (in their order,
the probe's context order) and returns the documents as copies with `meta["ascp_score"]`,
`meta["ascp_normalized"]` and `meta["ascp_used"]` (and `meta["ascp_sentences"]` per answer sentence
when the probe reads sentences: `Probe(model, spans="sentences")`), and `used`, the used ones. A document's
passage id is its `id`, its title `meta["title"]`, its text `content`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ascp.api import Probe
from ascp.errors import AscpError
from ascp.integrations import reading_metadata, require
from ascp.types import Passage

haystack = require("haystack", "haystack")


@haystack.component
class AscpAttributor:
    """Marks the documents a reply relied on, by ascp's causal probe."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    @haystack.component.output_types(documents=list[Any], used=list[Any])
    def run(self, query: str, replies: list[str], documents: list[Any]) -> dict[str, Any]:
        if not replies:
            raise AscpError("AscpAttributor got no reply to attribute; connect the generator's replies.")
        passages = [Passage(id=str(d.id), title=str((d.meta or {}).get("title") or ""), text=d.content or "")
                    for d in documents]
        result = self.probe.attribute(query, passages, replies[0])
        annotated = [
            dataclasses.replace(d, meta={**(d.meta or {}), **reading_metadata(result, p.id)})
            for d, p in zip(documents, passages, strict=True)
        ]
        return {"documents": annotated, "used": [d for d in annotated if d.meta["ascp_used"]]}
