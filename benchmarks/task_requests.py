"""Requests in `ascp attribute`'s format from the shared data, for the benchmarks that run them:
ASQA and HotpotQA contexts of `../shared/data`, each with its first k passages as the data ranks them
and no response yet (`"response": None`)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
FILES = {"asqa": DATA / "asqa" / "asqa_wikidpr_pools.json",
         "hotpotqa": DATA / "hotpotqa" / "hotpotqa_dev_distractor_ircot.jsonl"}


def check_files() -> None:
    """Stop in one sentence when a data file is absent."""
    missing = [str(p) for p in FILES.values() if not p.is_file()]
    if missing:
        raise SystemExit(f"the data file {missing[0]} is not here; put the files docs/data.md lists at ../shared/data.")


def task_requests(per_task: int, k: int, *, sep: str = "-", last: bool = False,
                  skip: Collection[str] = ()) -> list[dict]:
    """`per_task` requests per task (the first eligible cases in file order, or the last with `last`):
    id `TASK{sep}CASE`, the question and the case's first k passages; cases with fewer passages and
    cases in `skip` are not eligible."""
    from ascp.data import load_cases

    requests: list[dict] = []
    for task, path in FILES.items():
        cases = [c for c in load_cases(path, rank_by="given") if len(c.pool) >= k and c.id not in skip]
        chosen = cases[-per_task:] if last else cases[:per_task]
        requests += [{"id": f"{task}{sep}{c.id}", "question": c.question, "response": None,
                      "passages": [{"id": p.id, "title": p.title, "text": p.text} for p in c.pool[:k]]}
                     for c in chosen]
    return requests


def main(argv: list[str] | None = None) -> int:
    """Print the ids of the requests the benchmarks would build (a check of the shared data)."""
    import argparse

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--last", action="store_true", help="the last eligible cases instead of the first")
    args = parser.parse_args(argv)
    check_files()
    for request in task_requests(args.per_task, args.k, last=args.last):
        print(request["id"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
