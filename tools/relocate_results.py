"""Rewrite the committed results that name a folder of the machine they ran on, keeping every number.

    python tools/relocate_results.py --data-root ../shared/data --old-data-root OLD_DATA_ROOT \
        --old-repo OLD_REPO [--check]

(OLD_DATA_ROOT: the absolute data folder the results name; OLD_REPO: the repository folder they ran in.)

1. Every experiment store under docs/results (a folder with plan.json that is not inside another store):
   `ascp experiment relocate` (plan.json, spec.yaml, splits.json).
2. Every other JSON file under docs/results and the shipped attention maps: a string naming a data
   file under the old data root, in a field `data` or `pools`, becomes `describe_file`'s description
   (path under --data-root, SHA-256, size); a path under the old repository (a model file, the
   venv's `ascp`) is named relative to the repository root; in command lines (`command`, `commands`,
   `reproduce`) the old data root becomes the data root as given (../shared/data) and the old
   repository's folder is dropped, since the commands ran from the repository root. An attention map
   is rewritten through `AttentionMap.with_band`/`payload`, so its checksum covers the new `fit.data`.

Idempotent; `--check` writes nothing and exits 1 when a file would change. No number changes: compare
with `tools/relocate_results.py --same-numbers OLD NEW` (every leaf but the path fields equal).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MAPS = ROOT / "src" / "ascp" / "resources" / "attention_maps"
DATA_KEYS = ("data", "pools")  # fields that name a data file
COMMAND_KEYS = ("command", "commands", "reproduce")  # fields that hold command lines
PATH_KEYS = (*DATA_KEYS, "target", "source", "path", "model")  # fields --same-numbers leaves out


class Relocation:
    def __init__(self, data_root: Path, old_data_root: str, old_repo: str) -> None:
        self.data_root, self.old_data, self.old_repo = data_root, old_data_root.rstrip("/"), old_repo.rstrip("/")

    def command(self, text: str) -> str:
        text = text.replace(self.old_data + "/", self.data_root.as_posix() + "/")
        return text.replace(self.old_repo + "/", "")

    def value(self, key: str, value: Any) -> Any:
        from ascp.caching.files import describe_file

        if isinstance(value, dict):
            return {k: self.value(k, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(key, v) for v in value]
        if not isinstance(value, str):
            return value
        if key in COMMAND_KEYS:
            return self.command(value)
        if key in DATA_KEYS and value.startswith(self.old_data + "/"):
            relative = value[len(self.old_data) + 1:]
            file = self.data_root / relative
            if not file.is_file():
                raise SystemExit(f"{value}: no file {relative} under --data-root {self.data_root}")
            return describe_file(file, self.data_root)
        if value.startswith(self.old_repo + "/"):
            return value[len(self.old_repo) + 1:]
        return value


def stores() -> list[Path]:
    found = sorted(p.parent for p in RESULTS.glob("**/plan.json"))
    return [s for s in found if not any(o != s and o in s.parents for o in found)]


def json_files() -> list[Path]:
    inside = stores()
    files = [p for p in RESULTS.glob("**/*.json") if p.name not in ("plan.json", "splits.json")
             and not any(s in p.parents and p.parent == s for s in inside)]
    return sorted(files)


def rewrite_json(path: Path, relocation: Relocation) -> str | None:
    """The new text of `path`, or None when it names nothing to relocate."""
    text = path.read_text(encoding="utf-8")
    if relocation.old_data not in text and relocation.old_repo not in text:
        return None
    data = json.loads(text)
    if path.parent == MAPS:
        from ascp.attribution.attention_map import load_map

        fitted = load_map(path)
        new = fitted.with_band(fitted.band, relocation.value("fit", dict(fitted.fit))).payload()
    else:
        new = relocation.value("", data)
    indent = 1 if text.startswith("{\n \"") else 2
    return json.dumps(new, indent=indent, ensure_ascii=False) + ("\n" if text.endswith("\n") else "")


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in (*PATH_KEYS, *COMMAND_KEYS, "sha256"):
                continue  # path fields, command lines and checksums (a map's covers its path field)
            yield from _leaves(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _leaves(inner, f"{path}[{i}]")
    else:
        yield path, value


def same_numbers(old: Any, new: Any) -> list[str]:
    """The leaves (path fields, commands and checksums left out) that differ between two JSON values."""
    a, b = dict(_leaves(old)), dict(_leaves(new))
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--old-data-root", help="the absolute data folder the results name")
    parser.add_argument("--old-repo", help="the absolute repository folder the results ran in")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    parser.add_argument("--same-numbers", nargs=2, type=Path, metavar=("OLD", "NEW"),
                        help="compare two JSON files with the path fields left out, and exit")
    args = parser.parse_args(argv)
    if args.same_numbers:
        old, new = (json.loads(p.read_text(encoding="utf-8")) for p in args.same_numbers)
        differences = same_numbers(old, new)
        print("\n".join(differences) or f"same numbers ({len(dict(_leaves(old)))} leaves compared)")
        return 1 if differences else 0
    if not args.old_data_root or not args.old_repo:
        parser.error("give --old-data-root and --old-repo (the absolute folders the results name)")
    from ascp.experiments.relocate import relocate
    from ascp.jsonio import atomic_writer

    relocation = Relocation(args.data_root, args.old_data_root, args.old_repo)
    changed: list[Path] = []
    for store in stores():
        if args.check:
            continue  # relocate writes; the stores are checked by the repository test
        changed += relocate(store, args.data_root, base=Path(args.old_repo))
    for path in [*json_files(), *sorted(MAPS.glob("*.json"))]:
        text = rewrite_json(path, relocation)
        if text is None or text == path.read_text(encoding="utf-8"):
            continue
        changed.append(path)
        if not args.check:
            with atomic_writer(path) as handle:
                handle.write(text)
    for path in changed:
        print(("would rewrite " if args.check else "rewrote ") + str(path.relative_to(ROOT)))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
