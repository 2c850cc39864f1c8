"""Read-only browsing below the service's root: folders, the results folders in them (run folders,
simulations, experiment stores, validations) and the files a report is made of.

Every path a client names is relative to the root and resolved (symbolic links followed) before it
is read; one that lands outside the root is refused (`OutsideRoot`), whatever `..` or link got it there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascp.errors import AscpError

# What /v1/files serves, by suffix: the report's tables and figures and the records beside them.
FILE_TYPES = {".md": "text/markdown; charset=utf-8", ".txt": "text/plain; charset=utf-8",
              ".json": "application/json", ".jsonl": "application/x-ndjson", ".csv": "text/csv; charset=utf-8",
              ".yaml": "text/plain; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
              ".html": "text/html; charset=utf-8"}


class OutsideRoot(AscpError):
    """A path that leaves the served root (HTTP 403)."""


class NotFound(AscpError):
    """A path below the root that does not exist, or is not what was asked for (HTTP 404)."""


class Root:
    """The folder the service may read."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise AscpError(f"--root {root} is not a folder; pass the folder whose runs and stores the workbench "
                            "may browse.")
        self.path = root.resolve()

    def contains(self, path: Path) -> bool:
        return path.resolve().is_relative_to(self.path)

    def resolve(self, relative: str) -> Path:
        """`relative` (a path below the root, '' or '.' for the root) as a real path below the root."""
        if "\x00" in relative:
            raise OutsideRoot("the path holds a NUL character; name a path below the served folder.")
        if Path(relative).is_absolute():
            raise OutsideRoot(f"the path {relative!r} is absolute; name a path relative to the served folder.")
        path = (self.path / relative).resolve()
        if not path.is_relative_to(self.path):
            raise OutsideRoot(f"the path {relative!r} leaves the served folder; name a path below it.")
        if not path.exists():
            raise NotFound(f"nothing at {relative!r} below the served folder.")
        return path

    def relative(self, path: Path) -> str:
        return path.resolve().relative_to(self.path).as_posix() or "."

    def listing(self, relative: str) -> dict[str, Any]:
        """The folder's entries: sub-folders with the kind of results each holds, and the files served."""
        from ascp.records.reader import kind_of

        folder = self.resolve(relative)
        if not folder.is_dir():
            raise NotFound(f"{relative!r} is a file, not a folder.")
        entries: list[dict[str, Any]] = []
        for child in sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name)):
            if child.name.startswith(".") or not self.contains(child):
                continue
            if child.is_dir():
                entries.append({"name": child.name, "path": self.relative(child), "kind": kind_of(child) or "folder"})
            elif child.suffix in FILE_TYPES:
                entries.append({"name": child.name, "path": self.relative(child), "kind": "file",
                                "bytes": child.stat().st_size})
        return {"path": self.relative(folder), "kind": kind_of(folder) or "folder", "entries": entries}

    def file(self, relative: str) -> tuple[Path, str]:
        """A file of a served type, with its media type."""
        path = self.resolve(relative)
        if not path.is_file():
            raise NotFound(f"{relative!r} is a folder, not a file.")
        if path.suffix not in FILE_TYPES:
            raise NotFound(f"{relative!r} is not a file the workbench shows (it shows {', '.join(FILE_TYPES)}).")
        return path, FILE_TYPES[path.suffix]

    def view(self, relative: str) -> tuple[str, str | None]:
        """The `ascp view` page of a results folder; questions only from data files below the root."""
        from ascp.render.pages import folder_view

        folder = self.resolve(relative)
        if not folder.is_dir():
            raise NotFound(f"{relative!r} is a file, not a results folder.")
        return folder_view(folder, may_read=self.contains)
