"""Plugins: a user's own schedulers and estimators, registered before a name is resolved.

Two sources, each loaded lazily (the first time a policy or estimator name is resolved, so the
library, the command line and experiment specs all see them) and once per process:

- entry points of the group `ascp.plugins` (installed packages): each names a module, which is
  imported, or a callable, which is imported and then called with no arguments;
- `ASCP_PLUGINS`: comma-separated importable module names, for code that is not packaged
  (`ASCP_PLUGINS=my_policies PYTHONPATH=. ascp run --policy mine ...`).

Either registers its classes with `ascp.schedulers.register_scheduler` and
`ascp.attribution.register_estimator` (usually at import). See docs/extending.md.
"""

from __future__ import annotations

import functools
import importlib
import os
import types
from collections.abc import Callable
from importlib import metadata

from ascp.errors import AscpError

ENTRY_POINT_GROUP = "ascp.plugins"
ENV_VAR = "ASCP_PLUGINS"

# What has been loaded (entry points as "ep:name=value", modules as "env:name"). A key is added
# before its plugin runs, so a plugin that resolves a name while it loads does not load itself
# again, and removed when the plugin fails, so the next resolution reports the failure again.
_done: set[str] = set()
_entry_points: list[metadata.EntryPoint] | None = None


def env_modules() -> tuple[str, ...]:
    """The module names listed in `ASCP_PLUGINS` (empty entries skipped)."""
    return tuple(name.strip() for name in os.environ.get(ENV_VAR, "").split(",") if name.strip())


def load_plugins() -> None:
    """Load every plugin not loaded yet; a plugin that fails raises a one-sentence AscpError."""
    global _entry_points
    if _entry_points is None:
        _entry_points = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    for ep in _entry_points:
        dist = getattr(ep, "dist", None)
        source = f"package {dist.name!r}" if dist is not None else "an installed package"
        _load(f"ep:{ep.name}={ep.value}", f"entry point {ep.name!r} ({ep.value}) of {source}",
              "fix or uninstall that package", ep.load, call=True)
    for name in env_modules():
        _load(f"env:{name}", f"module {name!r} in {ENV_VAR}",
              f"make it importable (install it, or put its folder on PYTHONPATH) or remove it from {ENV_VAR} "
              "(it takes module names such as my_policies, not file names)",
              functools.partial(importlib.import_module, name), call=False)


def _load(key: str, what: str, fix: str, load: Callable[[], object], call: bool) -> None:
    if key in _done:
        return
    _done.add(key)
    try:
        obj = load()
        if call and not isinstance(obj, types.ModuleType) and callable(obj):
            obj()
    except AscpError as exc:  # a registration refused: the plugin's own sentence, with its source
        _done.discard(key)
        raise AscpError(f"plugin {what}: {str(exc).rstrip('.')}.") from exc
    except Exception as exc:
        _done.discard(key)
        detail = (str(exc).strip().splitlines() or [""])[0].rstrip(".")
        raise AscpError(f"plugin {what} failed to load ({type(exc).__name__}: {detail}); {fix}.") from exc


__all__ = ["ENTRY_POINT_GROUP", "ENV_VAR", "env_modules", "load_plugins"]
