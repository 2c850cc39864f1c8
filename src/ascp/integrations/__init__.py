"""Adapters to the RAG stacks people already run, each behind an extra (`pip install ascp[NAME]`)."""

from __future__ import annotations

import importlib
from types import ModuleType

from ascp.errors import AscpError


def require(module: str, extra: str) -> ModuleType:
    """Import an optional framework, or one sentence naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise AscpError(f"this adapter needs {module.split('.')[0]}, which is not installed; install it with "
                        f"`pip install -e '.[{extra}]'` in a clone of ascp.") from None
