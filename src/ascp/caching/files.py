"""Where ascp keeps derived artefacts (converted model weights): `$ASCP_HOME`, default ~/.cache/ascp;
`file_identity`, the one rule for "is this the same file as before" behind every key derived from
a file (converted models, the request cache's model fingerprints, folder embedders' ids); and
`describe_file`, the one record of a data file in results (path relative to the data root it was read
under, SHA-256, size), with `locate_file` to find it again on another machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


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


# ----- a data file described by its content, so results travel between machines -------------------

DATA_ENV = "ASCP_DATA"
_SHA256: dict[tuple[str, int, int], str] = {}


def default_data_root() -> Path:
    """The data root when none is passed: `$ASCP_DATA`, else `../shared/data` (from the repository root)."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path("../shared/data")


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, hashed once per process per `file_identity` (a file rewritten in
    place is hashed again)."""
    import hashlib

    key = file_identity(path)
    if key not in _SHA256:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _SHA256[key] = digest.hexdigest()
    return _SHA256[key]


def relative_path(path: str | Path, root: str | Path) -> str:
    """`path` relative to `root`, with forward slashes: as written under the root when it lies there
    (symbolic links kept), else between the resolved paths (which may climb out with `..`)."""
    absolute, base = os.path.abspath(path), os.path.abspath(root)
    if os.path.commonpath([absolute, base]) != base:
        absolute, base = str(Path(path).resolve()), str(Path(root).resolve())
    return Path(os.path.relpath(absolute, base)).as_posix()


def describe_file(path: str | Path, root: str | Path) -> dict[str, Any]:
    """What a result records of a data file: `{"path": relative to the data root it was read under,
    "sha256": of its bytes, "bytes": its size}`; no folder of the machine it was read on."""
    return {"path": relative_path(path, root), "sha256": file_sha256(path), "bytes": Path(path).stat().st_size}


def is_description(value: Any) -> bool:
    """Whether a recorded data entry is a `describe_file` description (older results hold a path string)."""
    return isinstance(value, dict) and {"path", "sha256", "bytes"} <= set(value)


def locate_file(entry: Any, root: str | Path | None = None, near: str | Path | None = None) -> Path:
    """The file a recorded data entry names: a path string as it is; a description's relative path under
    `root` (default `default_data_root()`), else under the current folder (a command's `--data` is read
    under it), else under the folder `near` (the result that recorded it) or one of its parents (a spec's
    folder); the first candidate when none holds it. Check the bytes with `same_content`."""
    if not is_description(entry):
        return Path(str(entry))
    relative = Path(entry["path"])
    candidates = [Path(root) if root is not None else default_data_root(), Path.cwd()]
    if near is not None:
        here = Path(os.path.abspath(near))
        candidates += [here, *here.parents]
    for base in candidates:
        if (base / relative).is_file():
            return base / relative
    return candidates[0] / relative


def same_content(entry: Any, path: str | Path) -> bool:
    """Whether `path` holds the bytes a description recorded (size, then SHA-256); True for a path string."""
    if not is_description(entry):
        return True
    path = Path(path)
    return path.is_file() and path.stat().st_size == entry["bytes"] and file_sha256(path) == entry["sha256"]
