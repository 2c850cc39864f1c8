"""The run store: a folder that loses nothing.

    DIR/spec.yaml     the spec as given (copied on the first run)
    DIR/plan.json     the resolved plan: tasks with their data file (path relative to the data root it
                      was read under, SHA-256, size: `ascp.caching.files.describe_file`) and case ids,
                      models, seeds, condition names, settings, number of units; a rerun must resolve to
                      the same plan, its data files to the same bytes (wherever the data root lies)
    DIR/units.jsonl   append-only, one JSON line per finished unit (key, condition, metrics, pool,
                      rounds), each appended whole by the one record log (`ascp.jsonio.append_line`)
    DIR/.lock         held (flock) by the one process writing the store, with its pid

A unit is written whole or not at all: a process killed in the middle of a write leaves at most
one partial last line (no newline at its end), which the next append cuts off; readers ignore it.
Keys already in the file are never written again, so a killed
and restarted run ends with exactly the units of an uninterrupted one.

The line format and its parser are `ascp.records.format`; readers (`read_plan`, `read_units`,
`ascp.records.read_results`) live in `ascp.records`, which every stage may import.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.jsonio import append_line, atomic_writer, check_parent, check_writable, disk_error, is_disk_error
from ascp.records.format import PLAN, UNITS, UnitKey, parse_units
from ascp.records.reader import read_plan, read_units

__all__ = ["LOCK", "PLAN", "SPEC", "UNITS", "RunStore", "check_out_location", "iter_rounds", "parse_units",
           "read_plan", "read_units", "writer_pid"]

SPEC = "spec.yaml"
LOCK = ".lock"


def _first_difference(old: Any, new: Any, where: str = "") -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{where}.{key}" if where else key)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{where}[{i}]")
    return where or "plan"


def _same_data(directory: Path, stored: Any, manifest: dict[str, Any],
               files: Mapping[str, Path] | None) -> dict[str, Any]:
    """`stored` with each task's data entry taken from `manifest` where both name the same bytes (the
    same SHA-256 and size, under any data root; an older store's absolute path: the same file), so the
    rest of the plan compares as a whole; one sentence for a task whose data file differs."""
    from ascp.caching.files import is_description

    if not isinstance(stored, dict) or not isinstance(stored.get("tasks"), list):
        return stored
    new_tasks = {t["name"]: t for t in manifest.get("tasks", [])}
    tasks = []
    for task in stored["tasks"]:
        new = new_tasks.get(task.get("name")) if isinstance(task, dict) else None
        if new is None or "data" not in task:
            tasks.append(task)
            continue
        old, now = task["data"], new["data"]
        name = task["name"]
        file = (files or {}).get(name) or now.get("path")
        if is_description(old) and is_description(now):
            if (old["sha256"], old["bytes"]) != (now["sha256"], now["bytes"]):
                raise AscpError(f"task {name}: {file} has SHA-256 {now['sha256'][:12]}… ({now['bytes']} bytes) but "
                                f"the store {directory} was run on {old['path']} with SHA-256 {old['sha256'][:12]}… "
                                f"({old['bytes']} bytes); pass the data file it was run on, or a new --out.")
        elif isinstance(old, str) and is_description(now) and (  # written before data files were described
                files is None or name not in files or old != str(Path(files[name]).resolve())):
            raise AscpError(f"task {name}: the store {directory} names its data file by the absolute path {old}, "
                                f"not {file}; record it by content with `ascp experiment relocate {directory} "
                                "--data-root ROOT`, or pass a new --out.")
        tasks.append({**task, "data": now})
    return {**stored, "tasks": tasks}


def check_out_location(out: Path) -> None:
    """The cheap checks of an --out folder, made before any data is read or model loaded."""
    if out.exists() and not out.is_dir():
        raise AscpError(f"--out {out} exists and is not a folder; pass a folder path.")
    check_parent(out, "--out")
    check_writable(out if out.is_dir() else out.parent)


class RunStore:
    """The writer's view of a store folder; use as a context manager (takes the lock)."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self._lock_fd: int | None = None
        self._open = False
        self.done: set[UnitKey] = set()

    # -- opening ------------------------------------------------------------------------------

    def __enter__(self) -> RunStore:
        self._check_folder()
        self.dir.mkdir(exist_ok=True)
        self._lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_folder(self) -> None:
        check_out_location(self.dir)
        if self.dir.is_dir() and not (self.dir / PLAN).exists():
            ours = {SPEC, LOCK, UNITS}
            foreign = [p.name for p in self.dir.iterdir() if p.name not in ours and not p.name.startswith(".")]
            if foreign:
                raise AscpError(f"--out {self.dir} holds other files ({foreign[0]}, ...) and is not an experiment "
                                "run store; pass a new or empty folder.")

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # no flock on this platform: single-writer use is up to the user
            return
        fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        for attempt in range(20):  # a concurrent `status` holds a shared lock for an instant
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 19:
                    pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                    os.close(fd)
                    raise AscpError(f"{self.dir} is being written by another `ascp experiment run` (pid {pid}); "
                                    "wait for it to finish or pass another --out.") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def begin(self, manifest: dict[str, Any], spec_text: str, data_files: Mapping[str, Path] | None = None) -> None:
        """Record the plan on the first run, or check that a rerun resolves to the same plan, each task's
        data file to the same bytes (`data_files`: task name -> the file read, named in the refusal);
        then load the finished keys (a torn last line is not one; the next append cuts it)."""
        plan_path = self.dir / PLAN
        if plan_path.exists():
            new = json.loads(json.dumps(manifest))
            stored = _same_data(self.dir, json.loads(plan_path.read_text(encoding="utf-8")), new, data_files)
            if stored != new:
                field = _first_difference(stored, new)
                raise AscpError(f"{self.dir} holds a run of a different spec ({field} differs); rerun with the same "
                                "spec to resume it, or pass a new --out.")
        else:
            with atomic_writer(self.dir / SPEC) as handle:
                handle.write(spec_text)
            with atomic_writer(plan_path, fsync=True) as handle:  # the plan must outlive a power cut
                handle.write(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        path = self.dir / UNITS
        path.touch(exist_ok=True)  # a store holds its log from the first run on
        records, _ = parse_units(path.read_bytes(), path)
        self.done = {UnitKey.of(r) for r in records}
        self._open = True

    # -- writing -------------------------------------------------------------------------------

    def write(self, record: dict[str, Any]) -> bool:
        """Append one finished unit as one line (one write, then fsync); False if it was already done."""
        key = UnitKey.of(record)
        if key in self.done:
            return False
        if not self._open:
            raise RuntimeError("RunStore.begin() must be called before write()")
        try:
            append_line(self.dir / UNITS, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        except OSError as exc:  # the log ends at its last whole line: never part of a unit
            if is_disk_error(exc):
                raise disk_error(exc, self.dir / UNITS, f"free space and rerun the same command: the "
                                 f"{len(self.done)} finished units are kept and the run resumes after them") from None
            raise
        self.done.add(key)
        return True

    def close(self) -> None:
        self._open = False
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None


def writer_pid(directory: Path) -> int | None:
    """The pid of the process writing the store now, or None (a shared-lock probe)."""
    try:
        import fcntl
    except ImportError:
        return None
    path = directory / LOCK
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def iter_rounds(records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """One tidy row per (unit, round)."""
    for rec in records:
        for rnd in rec.get("rounds", []):
            yield {**{k: rec[k] for k in ("task", "model", "seed", "case_id", "condition")}, **rnd}
