"""Data loaders: every real format becomes a list of `Case`s with a ranked pool and gold units.

`load_cases(path, format="auto")` detects (`ascp.data.detect`) or takes the format, reads the
file with that format's loader, orders every pool (`ascp.data.ranking`; the order used is stored
in `Passage.rank`) and optionally cuts pools to `depth`. Formats (docs/data.md):

    jsonl           generic case JSONL (ascp.data.jsonl)                      default order: given
    asqa            ALCE ASQA JSON (ascp.data.alce)                           given (GTR order)
    qampari, eli5   ALCE QAMPARI / ELI5 JSON (ascp.data.alce)                 given (GTR / BM25 order)
    alce            ALCE JSON, task decided per item by its fields            given
    hotpotqa        official HotpotQA JSON (ascp.data.hotpotqa)               dense (file order is shuffled)
    hotpotqa-ircot  IRCoT HotpotQA JSON lines (ascp.data.hotpotqa)            dense
    recipes         Carriage recipe retrieval file (ascp.data.recipes)        given (retriever order)

`rank_by="auto"` uses the default above, except for a file that says its order is not a ranking
(an ALCE file whose docs name several retrievers in `source`: a merged union such as the shared
ASQA pools), which is re-ranked `dense` (`UNRANKED_ORDER`). The paper keeps ALCE's retriever order
("strictly preserving the exact top N=30 passages", Sec. 7.1), hence `given` for ALCE files.
`given`, `dense` or `bm25` forces one order; `load_cases_with_order` also returns the order used.
`require_pool=False` admits cases without passages (the gold-only ALCE files), for gold
statistics only; portfolio runs need the default `True`, which rejects them with a clear error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ascp.errors import AscpError
from ascp.params import check_id, check_text
from ascp.types import Case

if TYPE_CHECKING:
    import numpy as np

FORMATS = ("auto", "jsonl", "asqa", "qampari", "eli5", "alce", "hotpotqa", "hotpotqa-ircot", "recipes")
DEFAULT_ORDER = {"jsonl": "given", "asqa": "given", "qampari": "given", "eli5": "given", "alce": "given",
                 "hotpotqa": "dense", "hotpotqa-ircot": "dense", "recipes": "given"}
UNRANKED_ORDER = "dense"  # `auto` for a file whose list order is known not to be a ranking


def auto_order(fmt: str, ranked: bool = True) -> str:
    """The order `rank_by="auto"` uses for format `fmt`; `ranked=False`: the file says its order is
    not a ranking."""
    return DEFAULT_ORDER[fmt] if ranked else UNRANKED_ORDER


def detect_format(path: str | Path) -> str:
    """The format of `path` (rules in `ascp.data.detect`); AscpError when it cannot tell."""
    from ascp.data.detect import detect_format as detect

    return detect(Path(path))


def _loader(fmt: str) -> Callable[..., tuple[list[Case], bool]]:
    """The reader of `fmt`: (path, limit, require_pool, depth) -> (cases, whether the file order is a ranking)."""
    if fmt == "jsonl":
        from ascp.data.jsonl import load_jsonl_cases

        return lambda path, limit, require_pool, depth: (load_jsonl_cases(path, limit=limit), True)
    if fmt in ("asqa", "qampari", "eli5", "alce"):
        from ascp.data.alce import read_alce

        return lambda path, limit, require_pool, depth: read_alce(
            path, task=None if fmt == "alce" else fmt, limit=limit, require_pool=require_pool)
    if fmt in ("hotpotqa", "hotpotqa-ircot"):
        from ascp.data.hotpotqa import load_hotpotqa, load_hotpotqa_ircot

        read = load_hotpotqa if fmt == "hotpotqa" else load_hotpotqa_ircot
        return lambda path, limit, require_pool, depth: (read(path, limit=limit, require_pool=require_pool), True)
    from ascp.data.recipes import load_recipes

    return lambda path, **kwargs: (load_recipes(path, **kwargs), True)


def load_cases(
    path: str | Path, format: str = "auto", rank_by: str = "auto", limit: int | None = None, *,
    require_pool: bool = True, depth: int | None = None, min_pool: int | None = None,
    embed_fn: Callable[[Sequence[str]], np.ndarray] | None = None,
) -> list[Case]:
    """Read, order and (optionally) cut the cases in `path` (arguments: `load_cases_with_order`)."""
    return load_cases_with_order(path, format, rank_by, limit, require_pool=require_pool, depth=depth,
                                 min_pool=min_pool, embed_fn=embed_fn)[0]


def load_cases_with_order(
    path: str | Path, format: str = "auto", rank_by: str = "auto", limit: int | None = None, *,
    require_pool: bool = True, depth: int | None = None, min_pool: int | None = None,
    embed_fn: Callable[[Sequence[str]], np.ndarray] | None = None, positions: tuple[int, int] | None = None,
) -> tuple[list[Case], str]:
    """(the cases of `path`, read, ordered and optionally cut; the order used: given | dense | bm25).

    `rank_by`: auto | given | dense | bm25 (auto: `auto_order`). `limit`: the first N cases (after `min_pool`).
    `min_pool`: keep only cases whose pool holds at least this many passages (before `depth`), e.g.
    the 24 a (k=2, T=12) rotation or a k=24 context needs without repeats. `depth`: keep the top
    `depth` passages of each pool after ordering (recipes: also extend the pool to `depth` from
    the corpus). `require_pool`: reject cases without passages (False: gold-only statistics).
    `embed_fn`: the embedder of `dense` ranking (default: the embedded MiniLM). `positions`: (first, last),
    0-based and inclusive, the items in file order taken before `min_pool` and `limit` apply.
    """
    from ascp.data.ranking import RANKERS, rank_pools

    path = Path(path)
    if not path.is_file():
        raise AscpError(f"data file {path} does not exist or is not a file; pass an existing file with --data.")
    if format not in FORMATS:
        raise AscpError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}.")
    if rank_by != "auto" and rank_by not in RANKERS:
        raise AscpError(f"unknown ranker {rank_by!r}; choose one of auto, {', '.join(RANKERS)}.")
    for name, value in (("limit", limit), ("depth", depth), ("min_pool", min_pool)):
        if value is not None and value < 1:
            raise AscpError(f"{name} must be at least 1, got {value}.")
    fmt = detect_format(path) if format == "auto" else format
    head = positions[1] + 1 if positions is not None else limit if min_pool is None else None
    cases, ranked = _loader(fmt)(path, limit=head, require_pool=require_pool, depth=depth)
    if positions is not None:
        if len(cases) <= positions[1]:
            raise AscpError(f"positions {positions[0]}-{positions[1]} go past the end of {path}, which holds "
                            f"{len(cases)} items (positions 0-{len(cases) - 1}).")
        cases = cases[positions[0]:][:limit] if min_pool is None else cases[positions[0]:]
    if min_pool is not None:
        cases = [c for c in cases if len(c.pool) >= min_pool][:limit]
    order = auto_order(fmt, ranked) if rank_by == "auto" else rank_by
    cases = rank_pools(cases, order, embed_fn)
    if depth is not None:
        cases = [replace(c, pool=c.pool[:depth]) for c in cases]
    check_case_text(path, cases)
    return cases, order


def check_case_text(path: Path, cases: Sequence[Case]) -> None:
    """One sentence naming the file, the case and the field for an id with a line break or another
    control character, or a question, title or passage text holding a NUL character or invalid
    Unicode (`ascp.params.check_id` / `check_text`), whatever the format."""
    for case in cases:
        where = f"{path}: case {case.id!r}"
        check_id(f"{path}: case id", case.id)
        check_text(f"{where}: the question", case.question)
        for p in case.pool:
            check_id(f"{where}: passage id", p.id)
            check_text(f"{where}: passage {p.id!r}'s text", p.text)
            check_text(f"{where}: passage {p.id!r}'s title", p.title)
