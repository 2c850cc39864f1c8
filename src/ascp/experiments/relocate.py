"""`ascp experiment relocate DIR --data-root ROOT`: a store written before data files were described,
rewritten so that it names no folder of the machine it ran on.

Each task's data file, recorded as an absolute path, becomes `describe_file`'s description (its path
relative to ROOT, its SHA-256 and size, read from the file found under ROOT); the spec copied into
the store names the same relative path; `splits.json` (`ascp reproduce`) describes its files the same
way; a model file named by an absolute path under BASE (default: the current folder) is named
relative to BASE, as a new plan names it. Every store below DIR (a preset's development/, table10/,
...) is rewritten with it. All new contents are computed and checked before the first file is
written, each file atomically, so a refusal (one sentence) leaves every file as it was; a store
already relocated is left unchanged (the command is idempotent). No number of the store changes:
units.jsonl is never touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ascp.caching.files import describe_file, is_description, relative_path
from ascp.errors import AscpError
from ascp.experiments.store import PLAN, SPEC, writer_pid

SPLITS = "splits.json"  # ascp.reproduce.SPLITS: the development and test positions of a preset's tasks
DATA_ROOT_MARK = "{data_root}"  # what a preset names its data root by


def find_under(recorded: str, root: Path) -> tuple[Path, str]:
    """(the file, its path relative to `root`) for a recorded data path: the path itself when it lies under
    `root`, else the longest tail of it that names a file under `root` (the same file on another machine)."""
    path = Path(recorded)
    if path.is_absolute() and path.is_file():
        relative = relative_path(path, root)
        if not relative.startswith("../"):
            return path, relative
    parts = path.parts[1:] if path.is_absolute() else path.parts
    for i in range(len(parts)):
        candidate = root.joinpath(*parts[i:])
        if candidate.is_file():
            return candidate, Path(*parts[i:]).as_posix()
    raise AscpError(f"data file {recorded} is not under --data-root {root} (no file {Path(*parts[-2:]).as_posix()} "
                    "there); pass the data root that holds it.")


def _model_source(source: Any, base: Path) -> Any:
    if isinstance(source, str) and Path(source).is_absolute():
        relative = relative_path(source, base)
        return source if relative.startswith("../") else relative
    return source


class _Store:
    """One store's new plan.json, spec.yaml and splits.json, computed before anything is written."""

    def __init__(self, directory: Path, root: Path, base: Path) -> None:
        self.dir = directory
        self.root, self.base = root, base
        self.replace: dict[str, str] = {}  # recorded data or model path -> the path the spec names now
        self.roots: set[str] = set()  # the absolute data roots the recorded paths lay under
        self.files: dict[Path, str] = {}

    def data(self, entry: Any) -> Any:
        if is_description(entry) or not isinstance(entry, str):
            return entry
        file, relative = find_under(entry, self.root)
        self.replace[entry] = relative
        if Path(entry).is_absolute() and entry.endswith("/" + relative):
            self.roots.add(entry[: -len(relative) - 1])
        return describe_file(file, self.root)

    def plan(self) -> None:
        path = self.dir / PLAN
        plan = json.loads(path.read_text(encoding="utf-8"))
        for task in plan.get("tasks", []):
            if isinstance(task, dict) and "data" in task:
                task["data"] = self.data(task["data"])
        for model in plan.get("models", []):
            if isinstance(model, dict) and "source" in model:
                source = _model_source(model["source"], self.base)
                if source != model["source"]:
                    self.replace[model["source"]] = source
                model["source"] = source
        self.files[path] = json.dumps(plan, indent=2, ensure_ascii=False) + "\n"

    def splits(self) -> None:
        path = self.dir / SPLITS
        if not path.is_file():
            return
        splits = json.loads(path.read_text(encoding="utf-8"))
        for task in (splits.get("tasks") or {}).values():
            if isinstance(task, dict) and "data" in task:
                task["data"] = self.data(task["data"])
        self.files[path] = json.dumps(splits, indent=2) + "\n"

    def spec(self) -> None:
        path = self.dir / SPEC
        if not path.is_file():
            return
        text = path.read_text(encoding="utf-8")
        for old in sorted(self.replace, key=len, reverse=True):  # a path before any shorter path inside it
            text = text.replace(old, self.replace[old])
        for old_root in sorted(self.roots, key=len, reverse=True):  # prose about the root (a preset's comment)
            text = text.replace(old_root, DATA_ROOT_MARK)
        self.files[path] = text


def relocate(directory: str | Path, data_root: str | Path, base: str | Path | None = None) -> list[Path]:
    """Rewrite the store `directory` and every store below it (see the module); returns the files whose
    content changed. Refuses, writing nothing, a folder that holds no store, a store being written, or
    a data file not found under `data_root`."""
    from ascp.jsonio import atomic_writer

    directory, root = Path(directory), Path(data_root)
    base = Path(base) if base is not None else Path.cwd()
    if not (directory / PLAN).is_file():
        raise AscpError(f"{directory} holds no {PLAN}; pass the --out folder of `ascp experiment run` or "
                        "`ascp reproduce`.")
    if not root.is_dir():
        raise AscpError(f"--data-root {root} is not a folder; pass the folder the store's data files lie under.")
    stores = [directory, *sorted(p.parent for p in directory.rglob(f"*/{PLAN}"))]
    changed: dict[Path, str] = {}
    for folder in stores:
        pid = writer_pid(folder)
        if pid is not None:
            raise AscpError(f"{folder} is being written by another `ascp experiment run` (pid {pid}); wait for it "
                            "to finish, then relocate it.")
        store = _Store(folder, root, base)
        try:
            store.plan()
            store.splits()
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AscpError(f"{folder} holds a {PLAN} or {SPLITS} this version of ascp cannot read "
                            f"({type(exc).__name__}: {exc}); relocate a store of `ascp experiment run`.") from None
        store.spec()
        changed.update({p: text for p, text in store.files.items() if p.read_text(encoding="utf-8") != text})
    for path, text in changed.items():
        with atomic_writer(path, fsync=True) as handle:
            handle.write(text)
    return list(changed)


__all__ = ["find_under", "relocate"]
