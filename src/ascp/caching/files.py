"""Where ascp keeps derived artefacts (converted model weights): `$ASCP_HOME`, default ~/.cache/ascp;
and `file_identity`, the one rule for "is this the same file as before" behind every key derived from
a file (converted models, the request cache's model fingerprints, folder embedders' ids)."""

from __future__ import annotations

import os
from pathlib import Path


def ascp_home() -> Path:
    """The cache root; created on first use."""
    root = Path(os.environ.get("ASCP_HOME") or Path.home() / ".cache" / "ascp").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def file_identity(path: str | Path) -> tuple[str, int, int]:
    """(absolute resolved path, size in bytes, modification time in ns): a file rewritten in place, even
    within the same second, gets another identity."""
    path = Path(path)
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


def folder_identity(folder: str | Path) -> list[tuple[str, int, int]]:
    """`file_identity` of every file directly in `folder`, sorted by path (empty when it is no folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [file_identity(p) for p in sorted(folder.iterdir()) if p.is_file()]


def derived_path(source: Path, suffix: str = "") -> Path:
    """Where a file derived from `source` (a GGUF file) is cached: keyed by its `file_identity`."""
    import hashlib

    resolved, size, mtime_ns = file_identity(source)
    key = hashlib.sha256(f"{resolved}|{size}|{mtime_ns}".encode()).hexdigest()[:12]
    return ascp_home() / "models" / f"{source.stem}-{key}{suffix}"
