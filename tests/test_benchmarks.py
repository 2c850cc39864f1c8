"""Every benchmark script imports and answers --help: a benchmark that no longer runs (a renamed
helper it imports, a moved module) is found here, not when someone needs its numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_answers_help(script):
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300,
                          cwd=script.parent)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


@pytest.mark.slow
def test_committed_results_recompute_from_their_records():
    """The Fig. 3 summaries recompute whole from their scores, and the reports of the stores whose report
    the current report code wrote (cpu-small, heldout-small) rebuild number for number from units.jsonl
    (benchmarks/recompute_results.py; the other stores' committed reports predate later table code)."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "recompute_results.py"
    proc = subprocess.run([sys.executable, str(script), "--only", "cpu-small,heldout-small,probe-validation"],
                          capture_output=True, text=True, timeout=600, cwd=script.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "folder" not in line]
    assert len(rows) == 5 and all(line.endswith("| 0 |") for line in rows), proc.stdout


def test_spans_head_to_head_redoes_one_pair_and_keeps_the_rest(tmp_path, monkeypatch):
    """`--redo GRANULARITY:METHOD` drops exactly that pair's cost and sentence rows, rewriting the store
    whole, so the resumed run reads that pair again on those contexts only; a bad pair is one sentence."""
    import json

    monkeypatch.syspath_prepend(str(BENCHMARKS[0].parent))
    import spans_head_to_head as bench

    rows = [{"kind": kind, "context": context, "granularity": g, "method": m, "sentence": 0}
            for context in ("asqa/1", "hotpotqa/2") for g, m in sorted(bench.PAIRS) for kind in ("cost", "sentence")]
    rows.append({"kind": "naive", "context": "asqa/1", "granularity": "sentences", "max_gap": 1e-6})
    assert all(pairs == bench.PAIRS for pairs in bench.pairs_done(rows).values())
    store = tmp_path / "rows.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in rows))
    redo = {bench.redo_pair("sentences:attention"), bench.redo_pair("sentences:gated")}
    kept = bench.drop_pairs(store, rows, redo)
    assert [json.loads(line) for line in store.read_text().splitlines()] == kept
    assert len(rows) - len(kept) == 2 * 2 * 2  # two pairs, two contexts, a cost and a sentence row each
    assert all(pairs == bench.PAIRS - redo for pairs in bench.pairs_done(kept).values())
    assert list(tmp_path.iterdir()) == [store]  # no temporary file left beside it
    script = BENCHMARKS[0].parent / "spans_head_to_head.py"
    proc = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--redo", "sentences:nope"],
                          capture_output=True, text=True, timeout=300, cwd=script.parent)
    assert proc.returncode == 2 and "'sentences:nope' is not GRANULARITY:METHOD" in proc.stderr
    assert store.read_text().count("\n") == len(kept)  # refused before anything was touched


def test_spans_head_to_head_pairs_each_method_with_loo_on_the_same_sentence(monkeypatch):
    """`against_loo` is the mean, per metric, of (method - loo) over the sentences both read finitely, with
    an interval over contexts: a copy of `loo` differs by exactly 0, a shifted reading by its shift, and a
    sentence whose LDS is undefined for either method leaves that metric only."""
    import math

    monkeypatch.syspath_prepend(str(BENCHMARKS[0].parent))
    import spans_head_to_head as bench

    rows = []
    for c in range(4):
        for sentence in range(3):
            base = {"kind": "sentence", "context": f"asqa/{c}", "granularity": "sentences", "sentence": sentence}
            loo = {"top1_drop": 1.0 + c, "top3_drop": 2.0 + sentence, "lds": 0.5 if sentence else math.nan}
            for name in bench.METHODS:
                shift = {"hierarchical": 0.0, "bm25": -1.0}.get(name, 0.25)
                row = {k: v + shift for k, v in loo.items()} if name != "loo" else dict(loo)
                rows.append({**base, "method": name, **row})
    table = {e["method"]: e for e in bench.against_loo(rows, n_boot=200)["sentences"]}
    assert set(table) == set(bench.METHODS) - {"loo"}
    assert table["hierarchical"]["top-3 drop"] == {"mean": 0.0, "lo": 0.0, "hi": 0.0, "sentences": 12, "contexts": 4}
    for metric in ("top-1 drop", "top-3 drop", "LDS"):
        assert math.isclose(table["bm25"][metric]["mean"], -1.0)
        assert math.isclose(table["contextcite-64"][metric]["lo"], 0.25)
    assert table["bm25"]["LDS"]["sentences"] == 8 and table["bm25"]["top-1 drop"]["sentences"] == 12
    assert bench.against_loo(rows)["passages"] == [{"method": m, "top-1 drop": None, "top-3 drop": None, "LDS": None}
                                                   for m in bench.METHODS if m != "loo"]
