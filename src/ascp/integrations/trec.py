"""Probe readings as TREC run files and qrels, for trec_eval, `ir_measures` and `ranx` (docs/trec.md).

A *query* is one context the probe read; its *documents* are the passages of that context, ranked
by the probe's score. The sources (folders read by `ascp.records.read_results`):

- `ascp validate-probe` folder (`scores.jsonl`): query `<case>|k<K>|<padding>|<protocol>`, one run
  file per estimator; qrels: the necessary passages 1, every other passage 0 (the necessity
  labels); unit qrels: passage -> the designed units it attests.
- `ascp run` folder, `ascp simulate` output or experiment store: query `<case>/<round>` (in a
  store `<task>/<case>/<round>`), one run file per policy or condition (a store with several
  models or seeds: one per condition and model/seed, `Results.groups`); qrels: the context's
  passages that attest a gold unit 1, the others 0 (`ascp.metrics.attestation`, alias units; claim
  units need an NLI model and are not judged); unit qrels: passage -> the units.
- `ascp attribute` output (JSONL): query = the request id, one run file per estimator; no qrels.

Run lines are `qid Q0 docid rank score tag`, ranked by score, highest first, ties in context order
(the order `ascp.validation.analysis.context_cover` ranks by); qrels lines are `qid 0 docid rel`
with every passage of the context judged. Unit qrels are the diversity qrels of TREC's Web track
(ndeval, `ir_measures` `StRecall`): `qid unit docid 1`, the second column a subtopic (an answer
unit), so subtopic recall at m is cover@m.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.jsonio import check_parent, read_jsonl, staged_folder
from ascp.records import Results, read_results

SCORES = ("score", "normalized")
Ranking = list[tuple[str, float]]  # (docid, score) in context order


@dataclass
class TrecExport:
    """Runs per system ({system: {qid: ranking}}), qrels ({qid: {docid: rel}}) and unit qrels
    ({qid: {docid: units}}), in the order read."""

    runs: dict[str, dict[str, Ranking]] = field(default_factory=dict)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    units: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)


def _token(value: str, what: str, where: str) -> str:
    # TREC files are whitespace-separated: an id with a space would shift every column after it
    if not value or any(ch.isspace() for ch in value):
        raise AscpError(f"{where}: {what} {value!r} is empty or holds whitespace, which a TREC file cannot carry; "
                        "rename it in the input.")
    return value


def _score(value: Any, where: str) -> float:
    try:
        s = float(value)
    except (TypeError, ValueError):
        s = math.nan
    if not math.isfinite(s):
        raise AscpError(f"{where}: score {value!r} is not a finite number; rerun the command that wrote it.")
    return s


def ranked(ranking: Ranking) -> Ranking:
    """The ranking by score, highest first; ties keep their (context) order."""
    return sorted(ranking, key=lambda d: -d[1])


def run_lines(run: Mapping[str, Ranking], tag: str) -> list[str]:
    """`qid Q0 docid rank score tag` lines (rank from 1)."""
    _token(tag, "run tag", "--tag")
    return [f"{qid} Q0 {docid} {rank} {score!r} {tag}"
            for qid, ranking in run.items() for rank, (docid, score) in enumerate(ranked(ranking), start=1)]


def qrels_lines(qrels: Mapping[str, Mapping[str, int]]) -> list[str]:
    """`qid 0 docid rel` lines."""
    return [f"{qid} 0 {docid} {rel}" for qid, docs in qrels.items() for docid, rel in docs.items()]


def unit_qrels_lines(units: Mapping[str, Mapping[str, Iterable[str]]]) -> list[str]:
    """`qid unit docid 1` lines (ndeval's diversity qrels: the second column is the subtopic)."""
    return [f"{qid} {_token(u, 'unit id', qid)} {docid} 1"
            for qid, docs in units.items() for docid, us in docs.items() for u in us]


def _add(export: TrecExport, system: str, qid: str, docid: str, score: float, where: str) -> None:
    ranking = export.runs.setdefault(system, {}).setdefault(qid, [])
    if any(d == docid for d, _ in ranking):
        raise AscpError(f"{where}: passage {docid!r} appears twice in query {qid!r}; a TREC run ranks each "
                        "document once.")
    ranking.append((docid, score))


def from_validation(results: Results, score: str = "score") -> TrecExport:
    """The contexts of an `ascp validate-probe` output folder (its score rows)."""
    path = results.path / "scores.jsonl"
    export = TrecExport()
    for number, row in enumerate(results.scores, start=1):
        where = f"{path} (row {number})"
        qid = "|".join((_token(str(row["case_id"]), "case id", where), f"k{int(row['width'])}",
                        str(row["padding"]), str(row["protocol"])))
        docid = _token(str(row["passage_id"]), "passage id", where)
        system, role = _token(str(row["estimator"]), "estimator", where), str(row["role"])
        _add(export, system, qid, docid, _score(row[score], where), where)
        export.qrels.setdefault(qid, {})[docid] = int(role == "necessary")
        if role == "necessary":
            export.units.setdefault(qid, {})[docid] = tuple(str(a) for a in row["answers"])
    # cover@m counts the designed units only (those the necessary passages attest): a padding
    # passage is a unit's document only for a designed unit
    for row in results.scores:
        qid = f"{row['case_id']}|k{int(row['width'])}|{row['padding']}|{row['protocol']}"
        if row["role"] != "necessary":
            designed = {u for us in export.units.get(qid, {}).values() for u in us}
            hits = tuple(str(a) for a in row["answers"] if str(a) in designed)
            if hits:
                export.units.setdefault(qid, {})[str(row["passage_id"])] = hits
    return export


def from_run(results: Results, data: Path | None = None, score: str = "score") -> TrecExport:
    """The rounds of an `ascp run` folder, an `ascp simulate` output or an experiment store: one
    system per condition (a run's policy); the qrels need each task's data file (default: the one
    the run's config or the store's plan names; `data` replaces it) for the gold units."""
    from ascp.data import load_cases
    from ascp.metrics.attestation import attestation_matrix

    folder = results.path
    cases: dict[str, dict] = {}
    for task, (named, format) in results.sources.items():
        path = data if data is not None else Path(named)
        if not path.is_file():
            raise AscpError(f"the data file {path} of the run {folder} is not here; pass it with --data.")
        cases[task] = {c.id: c for c in load_cases(path, format=format, rank_by="given", require_pool=False)}
    export = TrecExport()
    for label, units in results.groups().items():
        system = _token(label.replace(" ", ""), "condition", str(folder))
        for unit in units:
            cid, task = unit.case_id, unit.key.task
            path = data if data is not None else Path(results.sources.get(task, ("", ""))[0])
            case = cases.get(task, {}).get(cid)
            if case is None:
                raise AscpError(f"case {cid!r} of the run {folder} is not in {path}; pass the data file the run read "
                                "with --data.")
            for r in unit.rounds:
                where = f"{unit.where} ({cid}, round {r.round})"
                qid = f"{_token(cid, 'case id', where)}/{r.round}"
                if task:  # a store: the task names the query too (a case id is unique within its task)
                    qid = f"{_token(task, 'task', where)}/{qid}"
                values = r.scores if score == "score" else r.normalized
                passages = [case.passage(pid) for pid in r.context]
                units_ = [u for u in case.units if u.aliases]  # claim units (ELI5) need an NLI model: not judged
                matrix = attestation_matrix(passages, units_)
                for i, pid in enumerate(r.context):
                    if pid not in values:
                        raise AscpError(f"{where}: passage {pid!r} has no {score}; rerun the command that wrote it.")
                    _add(export, system, qid, _token(pid, "passage id", where), _score(values[pid], where), where)
                    attested = tuple(u.id for j, u in enumerate(units_) if matrix[i, j])
                    export.qrels.setdefault(qid, {})[pid] = int(bool(attested))
                    if attested:
                        export.units.setdefault(qid, {})[pid] = attested
    return export


def from_attribute(path: Path, score: str = "score") -> TrecExport:
    """The results of `ascp attribute` (one JSONL line per request); no labels, so no qrels."""
    records = read_jsonl(path, missing=f"{path} does not exist; give the --out file of `ascp attribute`.",
                         fix="rerun `ascp attribute`", not_object="not a result of `ascp attribute`", empty=None)
    export = TrecExport()
    for number, rec in records:
        where = f"{path}:{number}"
        key = "scores" if score == "score" else score  # the record's field of that reading
        values = rec.get(key)
        if not isinstance(values, dict) or "id" not in rec:
            raise AscpError(f"{where} is not a result of `ascp attribute` (no 'id' or {key!r}); rerun it.")
        qid = _token(str(rec["id"]), "request id", where)
        system = _token(str(rec.get("estimator", "ascp")), "estimator", where)
        for pid, value in values.items():
            _add(export, system, qid, _token(str(pid), "passage id", where), _score(value, where), where)
    return export


def read_source(source: Path, data: Path | None = None, score: str = "score") -> tuple[str, TrecExport]:
    """(kind, export) of a results folder (`ascp.records.read_results`: validate-probe, run,
    simulation or store) or an `ascp attribute` file."""
    if score not in SCORES:
        raise AscpError(f"--score must be one of {', '.join(SCORES)}, got {score!r}.")
    if source.is_file():
        kind, export = "attribute", from_attribute(source, score)
    elif source.is_dir():
        results = read_results(source)
        kind = results.kind
        export = from_validation(results, score) if kind == "validate-probe" else from_run(results, data, score)
    else:
        raise AscpError(f"{source} is neither a results folder (of `ascp validate-probe`, `ascp run`, `ascp simulate` "
                        "or `ascp experiment run`) nor an `ascp attribute` output file; give one of those.")
    if data is not None and kind in ("attribute", "validate-probe"):
        raise AscpError(f"--data applies to run folders and stores only, and {source} is {kind} output; drop --data.")
    if not export.runs:
        raise AscpError(f"{source} holds no probe readings to export; rerun the command that wrote it.")
    return kind, export


def write_export(out: Path, export: TrecExport, tag: str | None = None) -> list[Path]:
    """`<system>.run` per system (tag: `tag`, else the system's name), plus `qrels.txt` and
    `units.qrels` when the source has labels, into the folder `out`, all files or none."""
    files = {f"{_token(system, 'system name', str(out))}.run": run_lines(run, tag or system)
             for system, run in export.runs.items()}
    if export.qrels:
        files["qrels.txt"] = qrels_lines(export.qrels)
        files["units.qrels"] = unit_qrels_lines(export.units)
    check_parent(out, "--out")
    if out.exists() and not out.is_dir():
        raise AscpError(f"--out {out} exists and is not a folder; pass a folder path.")
    with staged_folder(out) as tmp:
        for name, lines in files.items():
            (tmp / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return [out / name for name in files]



def per_unit(units_qrels: str | Path, run: str | Path) -> tuple[list[Any], list[Any]]:
    """`ir_measures` (qrels, run) with one query `<qid>#<unit>` per designed unit of each context:
    the unit's documents are those attesting it, so `Success@m` of `<qid>#<unit>` is 1 when the
    top m of that context attest the unit, and its mean over a context's units is cover@m (what
    ndeval's `StRecall@m` computes from `units.qrels` directly). Needs `pip install 'ascp[ir]'`."""
    from ascp.integrations import require

    ir_measures = require("ir_measures", "ir")
    qrels = list(ir_measures.read_trec_qrels(str(units_qrels)))
    units: dict[str, list[str]] = {}
    for q in qrels:
        units.setdefault(q.query_id, [])
        if q.iteration not in units[q.query_id]:
            units[q.query_id].append(q.iteration)
    expanded = [ir_measures.Qrel(f"{q.query_id}#{q.iteration}", q.doc_id, q.relevance) for q in qrels]
    scored = [ir_measures.ScoredDoc(f"{d.query_id}#{u}", d.doc_id, d.score)
              for d in ir_measures.read_trec_run(str(run)) for u in units.get(d.query_id, ())]
    return expanded, scored
