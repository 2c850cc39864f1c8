"""ALCE-style ASQA files (`../shared/data/asqa/asqa_wikidpr_pools.json`); kept as an entry point.

The reader is `ascp.data.alce` (task `asqa`): gold unit = one `qa_pair`, aliases = its
`short_answers`; pool = `docs`. The shared pools merge BM25 and hybrid hits (each doc names its
`source`) whose scores are not comparable, so their order is not a ranking and `load_cases`
re-ranks them (dense under `rank_by="auto"`); ALCE's own GTR files keep their order.
"""

from __future__ import annotations

from pathlib import Path

from ascp.data.alce import load_alce
from ascp.types import Case


def load_asqa(path: Path, limit: int | None = None, require_pool: bool = True) -> list[Case]:
    return load_alce(Path(path), task="asqa", limit=limit, require_pool=require_pool)
