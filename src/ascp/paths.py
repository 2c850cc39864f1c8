"""Where ascp keeps derived artefacts (converted model weights): `$ASCP_HOME`, default ~/.cache/ascp."""

from __future__ import annotations

import os
from pathlib import Path


def ascp_home() -> Path:
    """The cache root; created on first use."""
    root = Path(os.environ.get("ASCP_HOME") or Path.home() / ".cache" / "ascp").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def derived_path(source: Path, suffix: str = "") -> Path:
    """Where a file derived from `source` (a GGUF file) is cached: keyed by its path, size and mtime."""
    import hashlib

    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()}|{stat.st_size}|{int(stat.st_mtime)}".encode()).hexdigest()[:12]
    return ascp_home() / "models" / f"{source.stem}-{key}{suffix}"
