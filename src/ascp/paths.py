"""Where ascp keeps derived artefacts (converted model weights): `$ASCP_HOME`, default ~/.cache/ascp."""

from __future__ import annotations

import os
from pathlib import Path


def ascp_home() -> Path:
    """The cache root; created on first use."""
    root = Path(os.environ.get("ASCP_HOME") or Path.home() / ".cache" / "ascp").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root
