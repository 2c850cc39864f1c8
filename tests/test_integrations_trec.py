"""`ascp export`: probe readings as TREC runs and qrels, evaluated with the real `ir_measures`.

The validation contexts come from `ascp validate-probe` on real ASQA items of ../shared/data
with the tiny model (skipped, with the reason, where the data is absent); `ir_measures` is the
`ir` extra, in the lock, so these tests run wherever the locked environment is installed.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from ascp.integrations.trec import per_unit
from ascp.metrics.ranking import auc
from ascp.validation.analysis import context_auc, context_cover, contexts

ir_measures = pytest.importorskip("ir_measures", reason="ir_measures is not installed: pip install 'ascp[ir]'")

ROOT = Path(__file__).resolve().parents[1]
ASQA = ROOT.parent / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"
needs_asqa = pytest.mark.skipif(not ASQA.is_file(), reason=f"real ASQA pools {ASQA} not found (../shared/data "
                                "is absent here)")


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()]


def check_trec_run(path: Path) -> None:
    """The TREC run format (trec_eval's): six whitespace-separated columns `qid Q0 docid rank score
    tag`, ranks 1..n per query, scores non-increasing with rank, each document once per query."""
    by_q: dict[str, list[list[str]]] = defaultdict(list)
    for cols in lines(path):
        assert len(cols) == 6 and cols[1] == "Q0", cols
        by_q[cols[0]].append(cols)
    for rows in by_q.values():
        assert [int(r[3]) for r in rows] == list(range(1, len(rows) + 1))
        scores = [float(r[4]) for r in rows]
        assert all(math.isfinite(s) for s in scores) and scores == sorted(scores, reverse=True)
        assert len({r[2] for r in rows}) == len(rows) and len({r[5] for r in rows}) == 1


def ties(scores: np.ndarray, positive: np.ndarray) -> bool:
    return bool(set(scores[positive].tolist()) & set(scores[~positive].tolist()))


def cutoff_tie(scores: np.ndarray, m: int) -> bool:
    s = np.sort(scores)[::-1]
    return len(s) > m and s[m - 1] == s[m]


@pytest.fixture(scope="module")
def validation(tiny_model_dir, tmp_path_factory):
    if not ASQA.is_file():
        pytest.skip(f"real ASQA pools {ASQA} not found (../shared/data is absent here)")
    from conftest import invoke_cli

    out = tmp_path_factory.mktemp("validation") / "vp"
    res = invoke_cli(["validate-probe", "--data", ASQA, "--out", out, "--model", tiny_model_dir, "--widths", "3,6",
                      "--estimators", "loo,bm25", "--protocol", "fixed", "--limit", 3, "--max-new-tokens", 8,
                      "--bootstrap", 100, "--device", "cpu"])
    assert res.exit_code == 0, res.output
    return out


def test_validation_export_gives_ascps_auc_and_cover_in_ir_measures(validation, tmp_path, cli):
    res = cli("export", validation, "--out", tmp_path / "trec")
    assert res.exit_code == 0, res.output
    trec = tmp_path / "trec"
    assert sorted(p.name for p in trec.iterdir()) == ["bm25.run", "loo.run", "qrels.txt", "units.qrels"]
    summary = json.loads((validation / "summary.json").read_text())
    m = summary["config"]["m"]
    rows = [json.loads(line) for line in (validation / "scores.jsonl").read_text().splitlines()]
    ours = {(c.estimator, f"{c.case_id}|k{c.width}|{c.padding}|{c.protocol}"): c for c in contexts(rows)}
    qrels = list(ir_measures.read_trec_qrels(str(trec / "qrels.txt")))
    assert all(len(cols) == 4 and cols[1] == "0" and cols[3] in ("0", "1") for cols in lines(trec / "qrels.txt"))
    compared = {"auc": 0, "cover": 0}
    for estimator in ("loo", "bm25"):
        check_trec_run(trec / f"{estimator}.run")
        run = list(ir_measures.read_trec_run(str(trec / f"{estimator}.run")))
        acc = {x.query_id: x.value for x in ir_measures.iter_calc([ir_measures.Accuracy], qrels, run)}
        unit_qrels, unit_run = per_unit(trec / "units.qrels", trec / f"{estimator}.run")
        hits: dict[str, list[float]] = defaultdict(list)
        for x in ir_measures.iter_calc([ir_measures.Success @ m], unit_qrels, unit_run):
            hits[x.query_id.rsplit("#", 1)[0]].append(x.value)
        groups: dict[tuple, list[tuple[float, float, float, float, bool, bool]]] = defaultdict(list)
        for (est, qid), c in ours.items():
            if est != estimator:
                continue
            tied, cut = ties(c.scores, c.necessary), cutoff_tie(c.scores, m)
            if not tied:  # Accuracy is ascp's AUC wherever no positive ties a negative
                assert acc[qid] == pytest.approx(context_auc(c)), qid
                compared["auc"] += 1
            cover = context_cover(c, m)[0]
            if not cut:  # Success@m over the context's units is cover@m wherever no tie straddles m
                assert np.mean(hits[qid]) == pytest.approx(cover), qid
                compared["cover"] += 1
            groups[(c.width, c.padding)].append((acc[qid], context_auc(c), np.mean(hits[qid]), cover, tied, cut))
        # the means summary.json reports, where every context of the group is tie-free
        for r in summary["metrics"]["auc"]:
            g = groups.get((r["width"], r["padding"])) if r["estimator"] == estimator else None
            if g and not any(x[4] for x in g):
                assert np.mean([x[0] for x in g]) == pytest.approx(r["mean"])
        for r in summary["metrics"]["cover"]:
            g = groups.get((r["width"], r["padding"])) if r["estimator"] == estimator else None
            if g and not any(x[5] for x in g):
                assert np.mean([x[2] for x in g]) == pytest.approx(r["cover"])
    assert compared["auc"] >= 12 and compared["cover"] >= 12  # loo's float scores never tie: all 12 contexts


@needs_asqa
def test_run_folder_export_ranks_each_round_and_judges_attesting_passages(cli, tiny_model_dir, tmp_path):
    from ascp.data import load_cases
    from ascp.metrics.attestation import attestation_matrix

    run = cli("run", "--data", ASQA, "--format", "asqa", "--rank-by", "given", "--limit", 3, "--policy", "rotate",
              "--k", 4, "--T", 2, "--model", tiny_model_dir, "--max-new-tokens", 8, "--out", tmp_path / "run")
    assert run.exit_code == 0, run.output
    res = cli("export", tmp_path / "run", "--out", tmp_path / "trec", "--score", "normalized", "--tag", "mine")
    assert res.exit_code == 0, res.output
    check_trec_run(tmp_path / "trec" / "rotate.run")
    cases = {c.id: c for c in load_cases(ASQA, format="asqa", rank_by="given", limit=3)}
    rounds = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "trec" / "qrels.txt")))
    scored = list(ir_measures.read_trec_run(str(tmp_path / "trec" / "rotate.run")))
    assert {d.query_id for d in scored} == {f"{r['case_id']}/{r['round']}" for r in rounds}
    assert all(cols[5] == "mine" for cols in lines(tmp_path / "trec" / "rotate.run"))
    acc = {x.query_id: x.value for x in ir_measures.iter_calc([ir_measures.Accuracy], qrels, scored)}
    for r in rounds:
        case, qid = cases[r["case_id"]], f"{r['case_id']}/{r['round']}"
        labels = attestation_matrix([case.passage(p) for p in r["context"]], case.units).any(axis=1)
        assert {q.doc_id: q.relevance for q in qrels if q.query_id == qid} == \
            {p: int(x) for p, x in zip(r["context"], labels, strict=True)}
        s = np.array([r["normalized"][p] for p in r["context"]])
        if 0 < labels.sum() < len(labels) and not ties(s, labels):
            assert acc[qid] == pytest.approx(auc(s, labels))


def test_attribute_output_is_one_query_per_request_and_bad_input_is_one_sentence(cli, tmp_path):
    good = {"id": "r1", "estimator": "loo", "scores": {"a": 0.5, "b": 0.5, "c": -1.0}, "normalized": {}}
    (tmp_path / "att.jsonl").write_text(json.dumps(good) + "\n")
    res = cli("export", tmp_path / "att.jsonl", "--out", tmp_path / "trec")
    assert res.exit_code == 0, res.output
    assert lines(tmp_path / "trec" / "loo.run") == [["r1", "Q0", "a", "1", "0.5", "loo"],
                                                   ["r1", "Q0", "b", "2", "0.5", "loo"],
                                                   ["r1", "Q0", "c", "3", "-1.0", "loo"]]
    assert not (tmp_path / "trec" / "qrels.txt").exists()
    for record, message in (({**good, "id": "r 1"}, "request id 'r 1' is empty or holds whitespace"),
                            ({**good, "scores": {"a": float("nan")}}, "is not a finite number"),
                            ({"id": "r1"}, "is not a result of `ascp attribute`")):
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(record) + "\n")
        bad = cli("export", path, "--out", tmp_path / "bad")
        assert bad.exit_code == 2 and message in bad.output, bad.output
        assert bad.output.strip().startswith("error:") and "Traceback" not in bad.output
        assert not (tmp_path / "bad").exists()
    missing = cli("export", tmp_path / "nothing", "--out", tmp_path / "bad")
    assert missing.exit_code == 2 and "is neither" in missing.output


@needs_asqa
def test_the_documented_example_runs(cli, tiny_model_dir, tmp_path, monkeypatch):
    """docs/trec.md's example: its commands (validate-probe on the tiny model) and Python, verbatim."""
    import shlex

    text = (ROOT / "docs" / "trec.md").read_text(encoding="utf-8")
    bash = re.findall(r"```bash\n(.*?)```", text, flags=re.S)[0].replace("\\\n", " ")
    monkeypatch.chdir(tmp_path)
    for line in bash.splitlines():
        if line.startswith("mkdir -p "):
            (tmp_path / line.split()[-1]).mkdir(parents=True)
        elif line.startswith("ascp "):
            args = [str(ASQA) if a.endswith("asqa_wikidpr_pools.json") else a for a in shlex.split(line)[1:]]
            if args[0] == "validate-probe":
                args += ["--model", str(tiny_model_dir), "--max-new-tokens", "8", "--bootstrap", "100"]
            res = cli(*args)
            assert res.exit_code == 0, res.output
    namespace: dict = {}
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        exec(compile(block, "docs/trec.md example", "exec"), namespace)  # noqa: S102 - the documented code itself
    assert namespace["auc"] and set(namespace["cover"]) <= set(namespace["auc"])
    assert all(0 <= v <= 1 for v in [*namespace["auc"].values(), *namespace["cover"].values()])


def test_where_ties_make_ir_measures_differ(cli, tmp_path):
    """The documented tie rules on a hand-made validation context: ascp's AUC counts a tied
    (positive, negative) pair as one half, `Accuracy` follows the file's order (ascp's rank order);
    at the cutoff ascp keeps context order, pytrec_eval orders ties by document id, descending."""
    folder = tmp_path / "vp"
    folder.mkdir()
    base = {"protocol": "fixed", "estimator": "loo", "case_id": "c", "width": 3, "padding": "off-query"}
    passages = [("a", "necessary", ["u1"], 1.0), ("b", "padding", [], 1.0), ("z", "necessary", ["u2"], 0.0)]
    with (folder / "scores.jsonl").open("w") as h:
        for j, (pid, role, answers, score) in enumerate(passages):
            h.write(json.dumps({**base, "position": j, "passage_id": pid, "role": role, "answers": answers,
                                "score": score, "normalized": score}) + "\n")
    assert cli("export", folder, "--out", tmp_path / "trec").exit_code == 0
    trec = tmp_path / "trec"
    assert [c[2] for c in lines(trec / "loo.run")] == ["a", "b", "z"]  # ties in context order
    (c,) = contexts([json.loads(line) for line in (folder / "scores.jsonl").read_text().splitlines()])
    qrels = list(ir_measures.read_trec_qrels(str(trec / "qrels.txt")))
    run = list(ir_measures.read_trec_run(str(trec / "loo.run")))
    (acc,) = ir_measures.iter_calc([ir_measures.Accuracy], qrels, run)
    # pairs (a, b) and (z, b): ascp (0.5 + 0) / 2; Accuracy in file order (1 + 0) / 2
    assert context_auc(c) == 0.25 and acc.value == 0.5
    swapped = [run[1], run[0], run[2]]  # the same scores listed b, a, z
    (acc,) = ir_measures.iter_calc([ir_measures.Accuracy], qrels, swapped)
    assert acc.value == 0.0
    unit_qrels, unit_run = per_unit(trec / "units.qrels", trec / "loo.run")
    got = {x.query_id: x.value for x in ir_measures.iter_calc([ir_measures.Success @ 1], unit_qrels, unit_run)}
    # cover@1: ascp's top 1 is "a" (context order) and covers u1; pytrec_eval's is "b" (b > a), covering nothing
    assert context_cover(c, 1)[0] == 0.5 and got == {"c|k3|off-query|fixed#u1": 0.0, "c|k3|off-query|fixed#u2": 0.0}
