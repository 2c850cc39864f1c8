"""Check a response's inline citations against what the probe found used.

A RAG system that asks its model to cite (`[1]`, `[doc-id]`) makes a claim the causal probe can
test: every cited passage should be used, and every used passage cited. `check_citations` reads
the bracketed citations of the response, maps each to a passage (a number n is the n-th passage
when no passage has that id; otherwise ids match exactly) and compares with the reading.
Brackets holding prose ("[citation needed]") and markdown links ("[text](url)") are not
citations; a bracket of id-like tokens that names no passage is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ascp.errors import AscpError
from ascp.types import AttributionResult

CITATION = re.compile(r"\[([^\[\]]+)\](?!\()")  # not a markdown link [text](url)
_ID_LIKE = re.compile(r"^[\w:./#-]+$")  # a bracket of id-like tokens is a citation; "[citation needed]" is not


@dataclass(frozen=True)
class CitationCheck:
    cited: tuple[str, ...]  # passage ids cited, in order of first citation
    cited_and_used: tuple[str, ...]
    cited_not_used: tuple[str, ...]  # the response credits a passage the probe finds it did not use
    used_not_cited: tuple[str, ...]  # the response relied on a passage without crediting it

    @property
    def precision(self) -> float:
        """Share of cited passages that were used (nan without citations)."""
        return len(self.cited_and_used) / len(self.cited) if self.cited else float("nan")


def check_citations(result: AttributionResult, response: str | None = None) -> CitationCheck:
    """Compare the citations in `response` (default: the attributed response) with `result.used`.
    A citation that names no passage of the context raises one sentence."""
    text = result.response if response is None else response
    ids = list(result.scores)
    cited: dict[str, None] = {}
    for match in CITATION.finditer(text):
        tokens = [t.strip() for t in match.group(1).split(",")]
        if not all(_ID_LIKE.match(t) for t in tokens):
            continue  # prose in brackets, not a citation
        for token in tokens:
            if token in result.scores:
                cited.setdefault(token, None)
            elif token.isdigit() and 1 <= int(token) <= len(ids):
                cited.setdefault(ids[int(token) - 1], None)
            else:
                raise AscpError(f"citation [{token}] in the response names no passage of the context "
                                f"(ids: {', '.join(ids)}; or a number 1..{len(ids)}).")
    used = set(result.used)
    return CitationCheck(
        cited=tuple(cited),
        cited_and_used=tuple(d for d in cited if d in used),
        cited_not_used=tuple(d for d in cited if d not in used),
        used_not_cited=tuple(d for d in ids if d in used and d not in cited),
    )
