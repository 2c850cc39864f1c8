"""Data loaders: every real format becomes a tuple of `Case`s with a ranked pool and gold units.

`load_cases(path, format="auto")` dispatches on the format; pools whose retriever scores are
not comparable (ASQA's merged BM25/hybrid pools) are ranked by ascp itself
(`ascp.data.ranking`), and the rank order is written out with every run.
"""

from __future__ import annotations

from pathlib import Path

from ascp.errors import AscpError
from ascp.types import Case

FORMATS = ("auto", "jsonl", "asqa")


def detect_format(path: Path) -> str:
    """`asqa` for an ALCE-style JSON list with `qa_pairs` and `docs`; `jsonl` for a .jsonl file."""
    if path.suffix.lower() == ".jsonl":
        return "jsonl"
    if path.suffix.lower() == ".json":
        with path.open(encoding="utf-8") as handle:
            head = handle.read(4096)
        if head.lstrip().startswith("[") and ('"qa_pairs"' in head or '"docs"' in head):
            return "asqa"
    raise AscpError(f"cannot tell the format of {path}; pass --format jsonl or --format asqa.")


def load_cases(path: str | Path, format: str = "auto", rank_by: str = "dense", limit: int | None = None) -> list[Case]:
    """Read cases from `path`. `rank_by` orders pools without comparable scores: dense | bm25."""
    path = Path(path)
    if not path.is_file():
        raise AscpError(f"data file {path} does not exist or is not a file; pass an existing file with --data.")
    if format not in FORMATS:
        raise AscpError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}.")
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "jsonl":
        from ascp.data.jsonl import load_jsonl_cases

        cases = load_jsonl_cases(path, limit=limit)
    else:
        from ascp.data.asqa import load_asqa

        cases = load_asqa(path, limit=limit)
    if fmt == "asqa":
        from ascp.data.ranking import rank_pools

        cases = rank_pools(cases, rank_by)
    return cases
