"""JSONL in and out: line-numbered parse errors, and the one atomic writer of ascp: a file
(`atomic_writer`) or a folder (`staged_folder`) is written beside its target and renamed into
place only when complete, optionally flushed to disk (`fsync`)."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TypeGuard

from ascp.errors import AscpError, DiskError


def read_jsonl(path: str | Path, *, missing: str | None = None, fix: str = "each line must be one JSON object",
               not_object: str = "not an object; write one object per line",
               empty: str | None = "add at least one request") -> list[tuple[int, dict[str, Any]]]:
    """Parse a JSONL file into (line number, object) pairs; blank lines are skipped.

    Each failure is one sentence naming the file (and line); callers word its fix: `missing` (the
    whole sentence for an absent file), `fix` (after a line that is not JSON), `not_object` (after
    "is a JSON list, "), `empty` (None: an empty file is no error)."""
    path = Path(path)
    if not path.is_file():
        raise AscpError(missing or f"input file {path} does not exist or is not a file; pass an existing JSONL file.")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AscpError(f"cannot read {path} as UTF-8 text ({exc.__class__.__name__}); check the file.") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AscpError(f"{path}:{number} is not valid JSON ({exc.msg} at column {exc.colno}); {fix}.") from None
        except ValueError as exc:  # e.g. an integer longer than Python's digit limit
            raise AscpError(f"{path}:{number} is not valid JSON ({exc}); {fix}.") from None
        if not isinstance(obj, dict):
            raise AscpError(f"{path}:{number} is a JSON {type(obj).__name__}, {not_object}.")
        rows.append((number, obj))
    if not rows and empty is not None:
        raise AscpError(f"{path} holds no JSON lines; {empty}.")
    return rows

# The errors of a disk that refuses a write, in the words a user acts on.
DISK_ERRNOS = {errno.ENOSPC: "no space is left on the device", errno.EDQUOT: "the disk quota is used up",
               errno.EROFS: "its file system is read-only", errno.EACCES: "permission is denied",
               errno.EPERM: "permission is denied", errno.EFBIG: "the file is too large for the file system"}
NOTHING_WRITTEN = "free space or choose another output folder, then rerun (nothing was written)"


def disk_error(exc: OSError, path: str | Path, fix: str = NOTHING_WRITTEN) -> DiskError:
    """One sentence for a write the disk refused: which file, why, and what to do."""
    reason = DISK_ERRNOS.get(exc.errno or 0, exc.strerror or str(exc))
    return DiskError(f"could not write {path}: {reason}; {fix}.")


def is_disk_error(exc: BaseException) -> TypeGuard[OSError]:
    """An OSError of a disk that refuses writes (not, say, a missing file read inside a block)."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def check_writable(folder: str | Path) -> None:
    """Fail before any work when `folder` (an existing output folder or its parent) refuses files."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".ascp-write-check.", dir=folder)
    except OSError as exc:
        if is_disk_error(exc):
            reason = DISK_ERRNOS[exc.errno or 0]
            raise DiskError(f"cannot write into {folder}: {reason}; choose another output folder (nothing was "
                            "run).") from None
        raise
    os.close(fd)
    os.unlink(probe)


@contextlib.contextmanager
def atomic_writer(path: str | Path, mode: str = "w", fsync: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file beside `path` (`mode` "w": UTF-8 text, "wb": bytes); rename it over
    `path` only if the block succeeds, else remove it, so `path` is either the old file or the
    whole new one.

    `fsync`: flush the file to disk before the rename and the folder's entry after it (a file
    that must survive a power cut, such as an experiment store's plan). The handle's `name` is
    the temporary path, for a writer that writes by path (llama.cpp's converter).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_writer mode must be 'w' or 'wb', not {mode!r}")
    path = Path(path)
    check_parent(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as exc:
        if is_disk_error(exc):
            raise disk_error(exc, path) from None
        raise
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it private; the file becomes `path`
        with open(tmp, mode, encoding="utf-8" if mode == "w" else None) as handle:
            os.close(fd)
            fd = -1
            yield handle
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_error(exc):
            raise disk_error(exc, path) from None
        raise
    if fsync:
        fsync_folder(path.parent)


def fsync_folder(folder: str | Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _published_name(exc: OSError, tmp: Path, out: Path) -> Path:
    """The path a failed write in a staged folder would have had once published (else `out`)."""
    name = Path(str(exc.filename)) if exc.filename else None
    if name is not None and name.is_relative_to(tmp):
        return out / name.relative_to(tmp)
    return out


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        elif path.is_dir():
            fsync_folder(path)
    fsync_folder(folder)


def json_safe(obj: Any) -> Any:
    """`obj` with non-finite floats as None and numpy scalars as Python ones (strict JSON)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and type(obj).__module__ == "numpy":
        return json_safe(obj.item())
    return obj


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Write all records atomically, one JSON object per line."""
    with atomic_writer(path) as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def check_parent(path: str | Path, what: str | None = None) -> Path:
    """THE output-folder check: the folder `path` will be written into, or one sentence when it does not
    exist (`what` names the option or file, e.g. "--out"). Every writer and every command's output
    check calls it before any work."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        label = f"{what} {path}" if what else str(path)
        raise AscpError(f"the output folder {parent} of {label} does not exist; create it first.")
    return parent


def append_line(path: str | Path, line: bytes) -> None:
    """THE append-only record log (an experiment store's units, a fit's readings): `line`, one whole
    JSON record ending in a newline, appended with one write under an exclusive lock on the file, then
    synced. A last line left torn by a writer that died is cut first (writers hold the lock for a
    whole line, so under the lock a torn tail is never one still being written); a write that fails
    (a full disk) is cut back, so the file always ends at its last whole line. Readers skip a torn
    last line (`ascp.records.format.parse_units`, `ascp.fitprobe.readings`)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = _cut_torn_tail(fd)
        try:
            view = memoryview(line)
            while view:  # a regular file takes the whole buffer; loop only for safety
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise
    finally:
        os.close(fd)  # closing releases the lock


def _cut_torn_tail(fd: int) -> int:
    """Cut the file open at `fd` back to its last newline when it does not end in one; its new size."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:  # the last newline, read backwards in blocks (a torn tail is one line at most)
        start = max(0, end - 65536)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            end = start + found + 1
            break
        end = start
    os.ftruncate(fd, end)
    return end


def check_replaceable(out: str | Path, marker: str, what: str) -> None:
    """Refuse to replace a folder as a whole unless it is absent, empty, or holds `marker` (the
    file an earlier output of the same kind left): never wipe a folder of other files."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise AscpError(f"{out} exists and is not a folder; pass a folder path.")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).exists():
        raise AscpError(f"{out} holds other files and is not an earlier {what}; write the {what} into a new or "
                        "empty folder.")


@contextlib.contextmanager
def staged_folder(out: str | Path, whole: bool = False, fsync: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder beside `out` to write into; publish it when the block ends.

    On success: if `out` does not exist the folder is renamed to `out`; if it does, each file
    written is moved over its namesake in `out` (other files in `out` stay), or with `whole` the
    old `out` is replaced as a whole. On any error the temporary folder is removed and `out` is
    untouched, so a failed write leaves nothing half-written. `fsync`: flush every file and
    folder written to disk before publishing, and `out` and its parent after.
    """
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        if is_disk_error(exc):
            raise disk_error(exc, out) from None
        raise
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the folder becomes `out`
        yield tmp
        if fsync:
            _fsync_tree(tmp)
        if not out.exists():
            os.replace(tmp, out)
        elif whole:
            old = parent / f".{out.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            for path in tmp.iterdir():
                os.replace(path, out / path.name)
            tmp.rmdir()
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_error(exc):
            raise disk_error(exc, _published_name(exc, tmp, out)) from None
        raise
    if fsync:
        fsync_folder(out)
        fsync_folder(parent)
