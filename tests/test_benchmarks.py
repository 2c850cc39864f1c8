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
