"""Portfolios in the result format ALCE's `eval.py` reads (princeton-nlp/ALCE).

`eval.py --f FILE` loads `json.load(FILE)["data"]`: a list of the task's items, each with all of
its fields (`question`, `qa_pairs`, `answers` or `claims`, `annotations`, `docs`, ...) plus the
system's `output`. `alce_results` writes, per ALCE task found in the run:

- `<task>-round<t>.json`: the item with `output` = round t's response and `docs` = the passages of
  round t's context in prompt order (ALCE's `--citations` reads a citation "[n]" as `docs[n-1]`);
- `<task>-portfolio.json`: the item with `output` = the T responses joined by one space (the
  concatenated portfolio) and `docs` = every passage offered, in the order first offered.

The task is in the file name because `eval.py` switches to its QAMPARI metrics when the file
name contains "qampari". `eval.py` keeps only the first line of `output`, so every response is
written on one line (each whitespace run, newlines included, becomes one space): the output ALCE
scores is the text ascp scored. Each item also carries an `ascp` field (case id, policy, rounds,
contexts, used passages), which `eval.py` ignores. Where ALCE's STR-EM and ascp's recall agree
and where they differ: docs/alce.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ascp.data.alce import item_task
from ascp.data.detect import read_json_list
from ascp.errors import AscpError
from ascp.jsonio import check_parent, staged_folder
from ascp.types import Case, Portfolio

ALCE_FORMATS = ("alce", "asqa", "qampari", "eli5")


def one_line(response: str) -> str:
    """`response` with every whitespace run (newlines included) replaced by one space."""
    return " ".join(response.split())


def portfolio_output(portfolio: Portfolio) -> str:
    """The concatenated portfolio: the rounds' responses, each on one line, joined by one space."""
    return " ".join(one_line(r.response) for r in portfolio.rounds)


def item_id(item: dict[str, Any], position: int) -> str:
    """An ALCE item's case id, by `ascp.data.alce.read_alce`'s rule: `id`, else `sample_id`, else
    its position in the file."""
    return str(item.get("id") or item.get("sample_id") or position)


def _docs_by_id(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = item.get("docs")
    if not isinstance(docs, list):
        return {}
    # the loader's passage ids: the doc's `id`, else d<position>; first occurrence kept
    out: dict[str, dict[str, Any]] = {}
    for j, doc in enumerate(docs):
        if isinstance(doc, dict):
            out.setdefault(str(doc["id"]) if doc.get("id") is not None else f"d{j}", doc)
    return out


def _doc(case: Case, by_id: dict[str, dict[str, Any]], pid: str) -> dict[str, Any]:
    if pid in by_id:
        return by_id[pid]
    p = case.passage(pid)  # a passage the file did not hold as a doc: written from the case
    return {"id": p.id, "title": p.title, "text": p.text}


def alce_results(items: Sequence[Any], cases: Sequence[Case], portfolios: Sequence[Portfolio],
                 args: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """{file name: ALCE result object} for the portfolios of `cases`, read from `items` (the ALCE
    file's JSON list). `args` is stored as the object's "args" (ALCE's own result files keep their
    run configuration there). A case whose item is not in `items`: one sentence naming it."""
    if len(cases) != len(portfolios):
        raise ValueError(f"{len(cases)} cases but {len(portfolios)} portfolios")
    by_id = {item_id(item, n): item for n, item in enumerate(items) if isinstance(item, dict)}
    files: dict[str, list[dict[str, Any]]] = {}
    for case, portfolio in zip(cases, portfolios, strict=True):
        item = by_id.get(case.id)
        if item is None:
            raise AscpError(f"case {case.id!r} is not an item of the ALCE file; --alce-out needs the ALCE file the "
                            "run read (--data).")
        if portfolio.case_id != case.id:
            raise ValueError(f"portfolio is for case {portfolio.case_id!r}, not {case.id!r}")
        task = case.task or item_task(item) or "alce"
        docs = _docs_by_id(item)
        rounds = portfolio.rounds
        for r in rounds:
            files.setdefault(f"{task}-round{r.round}.json", []).append({
                **item, "docs": [_doc(case, docs, pid) for pid in r.context], "output": one_line(r.response),
                "ascp": {"case_id": case.id, "policy": portfolio.policy, "round": r.round,
                         "context": list(r.context), "used": list(r.used)}})
        files.setdefault(f"{task}-portfolio.json", []).append({
            **item, "docs": [_doc(case, docs, pid) for pid in portfolio.offered], "output": portfolio_output(portfolio),
            "ascp": {"case_id": case.id, "policy": portfolio.policy, "rounds": len(rounds),
                     "contexts": [list(r.context) for r in rounds], "used": [list(r.used) for r in rounds],
                     "responses": [r.response for r in rounds]}})
    return {name: {"args": args or {}, "data": data} for name, data in sorted(files.items())}


def check_alce_out(out: Path, fmt: str, overwrite: bool = False, run_dir: Path | None = None) -> None:
    """Fail before any work when `--alce-out` cannot be written: data that is no ALCE file, a path
    that is not a folder, a missing parent (the run folder `run_dir`, written first, counts as
    present), or earlier ALCE results without `overwrite`."""
    if fmt not in ALCE_FORMATS:
        raise AscpError(f"--alce-out writes ALCE results, and the data is {fmt!r}, not an ALCE file; pass an ALCE "
                        f"file ({', '.join(ALCE_FORMATS)}) or drop --alce-out.")
    if out.exists() and not out.is_dir():
        raise AscpError(f"--alce-out {out} exists and is not a folder; pass a folder path.")
    parent = out.parent if str(out.parent) else Path(".")
    if not (run_dir is not None and parent.resolve() == run_dir.resolve()):
        check_parent(out, "--alce-out")
    earlier = sorted(p.name for p in out.glob("*-portfolio.json")) if out.is_dir() else []
    if earlier and not overwrite:
        raise AscpError(f"--alce-out {out} already holds ALCE results ({earlier[0]}); pass --overwrite to replace "
                        "them or choose another folder.")


def write_alce(out: Path, results: dict[str, dict[str, Any]]) -> list[Path]:
    """Write `alce_results` into the folder `out`, all files or none (other files in `out` stay)."""
    with staged_folder(out) as tmp:
        for name, obj in results.items():
            (tmp / name).write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return [out / name for name in results]


def export_alce(out: Path, data: Path, cases: Sequence[Case], portfolios: Sequence[Portfolio],
                args: dict[str, Any] | None = None) -> list[Path]:
    """`alce_results` of the ALCE file `data`, written into `out`; returns the files written."""
    return write_alce(out, alce_results(read_json_list(data, "ALCE items"), cases, portfolios, args))


def export_run(run_dir: str | Path, out: str | Path, data: str | Path | None = None) -> list[Path]:
    """The ALCE result files of an existing `ascp run` folder, written into `out`: the portfolios of
    `rounds.jsonl` over the items of `data` (default: the ALCE file the run read, from its
    `summary.json`). A run of no ALCE file, or a missing data file: one sentence."""
    from ascp.data import detect_format, load_cases
    from ascp.records.reader import read_run

    run = read_run(run_dir)
    path = Path(data if data is not None else str(run.config.get("data", "")))
    if not path.is_file():
        raise AscpError(f"the ALCE file {path} of the run {run_dir} is not here; pass it as data=PATH.")
    fmt = str(run.config.get("format", "auto"))
    fmt = detect_format(path) if fmt == "auto" else fmt
    check_alce_out(Path(out), fmt, overwrite=True)
    cases = {c.id: c for c in load_cases(path, format=fmt, rank_by="given", require_pool=False)}
    rounds = run.rounds()
    missing = [cid for cid in rounds if cid not in cases]
    if missing:
        raise AscpError(f"case {missing[0]!r} of the run {run_dir} is not an item of {path}; pass the ALCE file the "
                        "run read.")
    policy = str(run.config.get("policy", ""))
    portfolios = [Portfolio(cid, policy, tuple(rs)) for cid, rs in rounds.items()]
    return export_alce(Path(out), path, [cases[p.case_id] for p in portfolios], portfolios, run.config)
