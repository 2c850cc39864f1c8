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
