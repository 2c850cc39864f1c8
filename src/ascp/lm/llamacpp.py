"""`LlamaCppModel`: quantized GGUF inference on the CPU through llama.cpp (the `llamacpp` extra).

One implementation of the model seam (`ascp.lm.protocol`). By default it runs an f16 copy of
the GGUF's weights (`weights="f16"`, made once with llama.cpp's own converter and cached under
`$ASCP_HOME/models/`): ascp's work is mostly prefill (prompts of hundreds of tokens, short
answers, teacher-forced scoring), where llama.cpp's f16 kernels are faster than its 4-bit ones
on CPUs without int8 dot-product units, and the f16 copy rounds the de-quantised weights only to
f16. `weights="model"` runs the file as given (less memory, the faster decoding steps). Either
way one set of weights both generates and is probed. Measured in `docs/results/backends.md`.

- Generation: each row of a batch is its own llama.cpp sequence, all rows decode in one call per
  step, and the sampling step is the one every backend shares (`ascp.lm.sampling`), so per-row
  seeds, steering (three streams per item in lockstep, Eq. 5) and greedy decoding behave as on
  transformers.
- Scoring: prefix reuse is exact: one sequence, cut back to the longest common token prefix
  (`llama_memory_seq_rm`) before each variant (`ascp.lm.scoring.score_with_runner`), every pass
  at least `MIN_SCORING_FEED` tokens long; the prefix store (`ascp.lm.prefixes`) keeps each
  variant's prompt side as llama.cpp saves a sequence (`llama_state_seq_get_data`) for later
  responses. Generation does not use the store: llama.cpp's numbers move (up to 2e-3 nats per
  token, measured on the embedded model) with where a sequence's cells lie among other sequences'
  in the shared cache, so a prompt prefilled beside others cannot stand in for one prefilled
  alone, while the scoring sequence always starts alone at cell 0.

Prompts are tokenized by the Hugging Face tokenizer built from the GGUF's own vocabulary
(canonical tokenization, `ascp.lm.tokenized`), and the ids are fed to llama.cpp as they are.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ascp.errors import AscpError
from ascp.jsonio import atomic_writer, staged_folder
from ascp.lm.encoded import common_prefix
from ascp.lm.prefixes import PrefixEntry, PrefixStore, prefix_store_from_env
from ascp.lm.protocol import ScoredPrompts
from ascp.lm.sampling import BatchRows, StepSampler, run_in_batches
from ascp.lm.scoring import score_with_runner
from ascp.lm.tokenized import TokenizedModel

if TYPE_CHECKING:
    from ascp.lm.sampling import Generation, LogitMix, SamplingConfig

INSTALL_HINT = (
    "install the llamacpp extra with `make llamacpp` (it builds llama-cpp-python from source with portable "
    "AVX2 flags, about 4 minutes), or use --backend hf"
)
WEIGHTS = ("f16", "model")
_BATCH_TOKENS = 2048  # most tokens per llama_decode call (and per micro-batch)
# llama.cpp's CPU matrix products take another kernel below 64 rows (activations converted to the
# weights' dot-product type), so a pass of 30 tokens and one of 300 give a shared token different
# logits (up to 0.03 nats on f16 weights, 0.6 on 4-bit). Scoring passes feed at least this many
# tokens, so the shared-prefix and naive passes run one kernel and agree exactly (ubatches are
# balanced, so no ubatch of a longer pass is shorter either).
MIN_SCORING_FEED = 64


_LOG_CALLBACK: list[Any] = []  # keeps the ctypes callback alive while llama.cpp holds it


def llama_cpp_module() -> Any:
    """The `llama_cpp` module with llama.cpp's own log silenced (its errors reach the user as ascp's
    one-sentence errors; `ASCP_LLAMA_LOG=1` shows the log), or an error naming the fix."""
    try:
        import llama_cpp
    except ImportError:
        raise AscpError(f"the llamacpp backend needs llama-cpp-python, which is not installed; {INSTALL_HINT}.") \
            from None
    if not _LOG_CALLBACK and os.environ.get("ASCP_LLAMA_LOG") != "1":
        _LOG_CALLBACK.append(llama_cpp.llama_log_callback(lambda level, text, user_data: None))
        llama_cpp.llama_log_set(_LOG_CALLBACK[0], ctypes.c_void_p(0))
    return llama_cpp


def available() -> bool:
    """True where llama-cpp-python imports and the CPU has the AVX2 units the portable build uses."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return cpu_has_avx2()


def cpu_has_avx2() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # not Linux: trust the build
    return " avx2" in flags


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class _Engine:
    """One llama.cpp model file with a context sized on demand: token batches in, logits out."""

    def __init__(self, path: Path) -> None:
        self.lib = llama_cpp_module()
        self.path = path
        self.lib.llama_backend_init()
        params = self.lib.llama_model_default_params()
        self.model = self.lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise AscpError(
                f"llama.cpp could not load {path}: the file is truncated or of an architecture this llama.cpp "
                "build does not support; pass a complete GGUF file of a supported model or use --backend hf."
            )
        self.vocab_size = int(self.lib.llama_vocab_n_tokens(self.lib.llama_model_get_vocab(self.model)))
        self.context_window = int(self.lib.llama_model_n_ctx_train(self.model))
        self.ctx = None
        self.n_ctx = 0
        self.n_seq = 0
        self.batch = self.lib.llama_batch_init(_BATCH_TOKENS, 0, 1)

    def ensure(self, n_ctx: int, n_seq: int) -> None:
        """A context holding at least `n_ctx` KV cells shared by `n_seq` sequences (cleared)."""
        if self.ctx is not None and n_ctx <= self.n_ctx and n_seq <= self.n_seq:
            self.clear()
            return
        n_ctx = max(n_ctx, self.n_ctx, _BATCH_TOKENS)  # never shrink: alternating shapes would rebuild it
        n_ctx = -(-n_ctx // 256) * 256
        n_seq = max(n_seq, self.n_seq, 1)
        self._free_ctx()
        params = self.lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = _BATCH_TOKENS
        params.n_seq_max = n_seq
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = _threads()
        params.no_perf = True
        self.ctx = self.lib.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise AscpError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.path} (out of memory?).")
        self.n_ctx, self.n_seq = n_ctx, n_seq

    def clear(self) -> None:
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)

    def seq_rm(self, seq: int, start: int) -> None:
        """Drop the cached positions >= `start` of sequence `seq`."""
        if not self.lib.llama_memory_seq_rm(self.lib.llama_get_memory(self.ctx), seq, start, -1):
            raise RuntimeError("llama.cpp refused to cut the KV cache back")

    def seq_cp(self, source: int, target: int, end: int) -> None:
        """Share the cached positions [0, end) of sequence `source` with sequence `target`."""
        self.lib.llama_memory_seq_cp(self.lib.llama_get_memory(self.ctx), source, target, 0, end)

    def seq_state(self, seq: int) -> bytes:
        """The cached keys and values (with their positions) of sequence `seq`, as llama.cpp saves them."""
        size = int(self.lib.llama_state_seq_get_size(self.ctx, seq))
        buffer = (ctypes.c_uint8 * size)()
        written = int(self.lib.llama_state_seq_get_data(self.ctx, buffer, size, seq))
        return bytes(buffer)[:written]

    def set_seq_state(self, seq: int, state: bytes) -> None:
        """Sequence `seq` := a saved state (its old cells dropped first)."""
        self.seq_rm(seq, 0)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if not self.lib.llama_state_seq_set_data(self.ctx, buffer, len(state), seq):
            raise RuntimeError("llama.cpp refused a saved sequence state")

    def decode(self, tokens: Sequence[int], positions: Sequence[int], seqs: Sequence[int],
               want: Sequence[bool]) -> np.ndarray:
        """Feed tokens (each at its position in its sequence); fp32 logits of the wanted ones, in order."""
        out: list[np.ndarray] = []
        views = self._views()
        chunks = -(-len(tokens) // _BATCH_TOKENS)
        size = -(-len(tokens) // chunks) if chunks else 0  # balanced: no short last chunk
        for lo in range(0, len(tokens), max(size, 1)):
            hi = min(lo + size, len(tokens))
            n = hi - lo
            token, pos, n_seq_id, logits = views
            token[:n] = tokens[lo:hi]
            pos[:n] = positions[lo:hi]
            n_seq_id[:n] = 1
            logits[:n] = want[lo:hi]
            for i in range(n):
                self.batch.seq_id[i][0] = seqs[lo + i]
            self.batch.n_tokens = n
            rc = self.lib.llama_decode(self.ctx, self.batch)
            if rc != 0:
                raise AscpError(f"llama.cpp could not run a batch (code {rc}) in its context of {self.n_ctx} tokens "
                                f"for {self.path.name}; use a smaller batch size or --backend hf.")
            wanted = int(np.count_nonzero(logits[:n]))
            if wanted:
                pointer = self.lib.llama_get_logits(self.ctx)
                out.append(np.ctypeslib.as_array(pointer, shape=(wanted, self.vocab_size)).copy())
        if not out:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        return np.concatenate(out)

    def _views(self):
        b = self.batch
        return (
            np.ctypeslib.as_array(b.token, shape=(_BATCH_TOKENS,)),
            np.ctypeslib.as_array(b.pos, shape=(_BATCH_TOKENS,)),
            np.ctypeslib.as_array(b.n_seq_id, shape=(_BATCH_TOKENS,)),
            np.ctypeslib.as_array(ctypes.cast(b.logits, ctypes.POINTER(ctypes.c_int8)), shape=(_BATCH_TOKENS,)),
        )

    def _free_ctx(self) -> None:
        if self.ctx is not None:
            self.lib.llama_free(self.ctx)
            self.ctx = None
            self.n_ctx = self.n_seq = 0

    def close(self) -> None:
        self._free_ctx()
        if self.batch is not None:
            self.lib.llama_batch_free(self.batch)
            self.batch = None
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _log_softmax_at(logits: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """log p(targets[j]) under each row of fp32 logits, computed in float64."""
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    norm = np.log(np.exp(z).sum(axis=-1))
    return z[np.arange(len(targets)), list(targets)] - norm


class _LlamaRunner:
    """`ascp.lm.scoring.PrefixRunner` over sequence 0 of a scoring engine."""

    min_feed = MIN_SCORING_FEED

    def __init__(self, engine: _Engine, n_ctx: int) -> None:
        self.engine = engine
        self.n_ctx = n_ctx
        engine.ensure(n_ctx, 1)

    def reset(self) -> None:
        self.engine.clear()

    def truncate(self, keep: int) -> None:
        self.engine.seq_rm(0, keep)

    def capture(self, n: int) -> PrefixEntry:
        """The state of sequence 0, which holds the `n` positions of a prompt."""
        state = self.engine.seq_state(0)
        return PrefixEntry(state, n, len(state))

    def load(self, entry: PrefixEntry) -> None:
        self.engine.set_seq_state(0, entry.state)

    def run(self, ids: Sequence[int], start: int, targets: Sequence[int], cached: bool) -> np.ndarray:
        if not cached:
            self.engine.clear()
        n, m = len(ids), len(targets)
        want = [i >= n - m for i in range(n)]
        logits = self.engine.decode(list(ids), range(start, start + n), [0] * n, want)
        if not cached:
            self.engine.clear()
        return _log_softmax_at(logits, targets)


@dataclass(eq=False)
class LlamaCppModel(TokenizedModel):
    """A GGUF model run by llama.cpp. `name` is what the user asked for (`default`, a .gguf path)."""

    gguf: Path
    tokenizer: Any
    name: str
    weights: str = "f16"
    backend = "llamacpp"
    _engines: dict[str, _Engine] = field(default_factory=dict, repr=False)
    # prompts already prefilled in this process (generation and the probe), `ascp.lm.prefixes`
    prefixes: PrefixStore | None = field(default_factory=prefix_store_from_env, repr=False)

    def __post_init__(self) -> None:
        if self.weights not in WEIGHTS:
            raise AscpError(f"unknown llama.cpp weights {self.weights!r}; choose {' or '.join(WEIGHTS)}.")
        if not getattr(self.tokenizer, "chat_template", None):
            raise AscpError(
                f"GGUF file {self.gguf} has no chat template, which the llamacpp backend needs to frame prompts; "
                "use a chat model's GGUF or --backend hf (plain-text framing)."
            )
        engine = self._engine()
        if len(self.tokenizer) > engine.vocab_size:
            raise AscpError(f"GGUF file {self.gguf}: its tokenizer has {len(self.tokenizer)} tokens but the model "
                            f"only {engine.vocab_size}; the file is inconsistent.")

    # ----- the model seam -----------------------------------------------------------------
    @property
    def context_window(self) -> int:
        return self._engine().context_window

    @property
    def fingerprint(self) -> str:
        """The GGUF file's identity and the weights it runs (`f16` or `model`)."""
        from ascp.lm.request_cache import files_identity, fingerprint_of

        return fingerprint_of({"backend": "llamacpp", "weights": self.weights,
                               "file": files_identity([Path(self.gguf)])})

    def generate(
        self, prompts: Sequence[Sequence[int]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        return self.generate_streams([(p,) for p in prompts], config, seeds, batch_size, on_batch)

    def generate_streams(
        self, streams: Sequence[Sequence[Sequence[int]]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None, mix: LogitMix | None = None,
    ) -> list[Generation]:
        """Each row (stream) of a batch is a llama.cpp sequence; all rows decode in one call per step."""
        widest = max((len(item) for item in streams), default=1)
        batch_size = max(1, min(batch_size, self._max_sequences() // widest))
        return run_in_batches(streams, seeds, batch_size, on_batch,
                              lambda batch, batch_seeds, items: self._generate_batch(batch, config, batch_seeds,
                                                                                     items, mix))

    def score(self, prompts: Sequence[Sequence[int]], response: Sequence[int],
              reuse_prefix: bool = True) -> ScoredPrompts:
        engine = self._engine()
        longest = max((len(p) for p in prompts), default=0) + len(response)
        return score_with_runner(_LlamaRunner(engine, longest), prompts, response, reuse_prefix, self.prefixes)

    # ----- generation -----------------------------------------------------------------------
    def _generate_batch(self, streams, config: SamplingConfig, seeds, items, mix) -> list[Generation]:
        import torch

        engine = self._engine()
        rows = BatchRows.of(streams)
        prompts = rows.prompts
        engine.ensure(sum(len(p) + config.max_new_tokens for p in prompts), len(prompts))
        last = self._prefill(engine, rows)
        sampler = StepSampler(torch, rows, config, seeds, items, self.eos_token_ids, self.pad_token_id, mix)
        lengths = [len(p) for p in prompts]
        logits = torch.from_numpy(last)
        for step in range(config.max_new_tokens):
            sampler.step(logits)
            if sampler.done or step == config.max_new_tokens - 1:
                break
            tokens = sampler.row_tokens()
            live = [r for r, item in enumerate(rows.row_item) if not sampler.finished[item]]
            fresh = engine.decode([tokens[r] for r in live], [lengths[r] for r in live], live, [True] * len(live))
            for r in live:
                lengths[r] += 1
            step_logits = np.zeros_like(last)  # rows of finished items: never read by the sampler
            step_logits[live] = fresh
            logits = torch.from_numpy(step_logits)
        return sampler.results(self.decode)

    def _prefill(self, engine: _Engine, rows: BatchRows) -> np.ndarray:
        """Prefill every row as its own sequence; an item's later streams first share the KV cache of
        the longest prefix they have in common with its first stream (exact: same tokens, same
        positions). Returns the last-position logits of every row."""
        prompts = rows.prompts
        first = {item_rows[0] for item_rows in rows.item_rows}
        source = {}
        for item_rows in rows.item_rows:
            head = item_rows[0]
            for row in dict.fromkeys(item_rows[1:]):
                if row != head:
                    source[row] = (head, min(common_prefix(prompts[row], prompts[head]), len(prompts[row]) - 1))
        last = np.empty((len(prompts), engine.vocab_size), dtype=np.float32)
        for wave in (sorted(first), sorted(source)):
            tokens: list[int] = []
            positions: list[int] = []
            seqs: list[int] = []
            want: list[bool] = []
            for row in wave:
                start = 0
                if row in source:
                    head, start = source[row]
                    if start:
                        engine.seq_cp(head, row, start)
                ids = prompts[row]
                tokens += ids[start:]
                positions += range(start, len(ids))
                seqs += [row] * (len(ids) - start)
                want += [False] * (len(ids) - start - 1) + [True]
            if tokens:
                last[list(wave)] = engine.decode(tokens, positions, seqs, want)
        return last

    # ----- engines --------------------------------------------------------------------------
    def _engine(self) -> _Engine:
        if self.weights not in self._engines:
            path = self.gguf if self.weights == "model" else f16_copy(self.gguf)
            self._engines[self.weights] = _Engine(path)
        return self._engines[self.weights]

    def _max_sequences(self) -> int:
        return int(llama_cpp_module().llama_max_parallel_sequences())

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()


# ----- files derived from a GGUF (cached under $ASCP_HOME) ----------------------------------

def f16_copy(gguf: Path) -> Path:
    """The GGUF's weights in f16 (llama.cpp's own converter), made once and cached."""
    from ascp.caching.files import derived_path

    target = derived_path(gguf, ".f16.gguf")
    if target.is_file():
        return target
    lib = llama_cpp_module()
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(target, "wb") as handle:  # llama.cpp writes the file by its (temporary) name
        params = lib.llama_model_quantize_default_params()
        params.ftype = lib.LLAMA_FTYPE_MOSTLY_F16
        params.allow_requantize = True
        params.nthread = _threads()
        if lib.llama_model_quantize(str(gguf).encode(), str(handle.name).encode(), params) != 0:
            raise AscpError(f"llama.cpp could not convert {gguf} to f16; pass a complete GGUF file or run the "
                            "file as given (weights='model').")
    return target


def gguf_tokenizer(gguf: Path) -> Any:
    """The Hugging Face tokenizer of a GGUF file's own vocabulary and chat template (cached)."""
    from transformers import AutoTokenizer

    from ascp.caching.files import derived_path

    target = derived_path(gguf, "-tokenizer")
    if (target / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(str(target), local_files_only=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    except Exception as exc:  # the GGUF reader raises many kinds on a bad file
        raise AscpError(
            f"GGUF file {gguf} could not be read ({type(exc).__name__}: {_first_line(exc)}); "
            "it is truncated or of an architecture transformers cannot read; pass a complete GGUF file."
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    with staged_folder(target) as tmp:
        tokenizer.save_pretrained(tmp)
    return tokenizer


def load_llamacpp_model(gguf: Path, name: str, weights: str = "f16") -> LlamaCppModel:
    """A `LlamaCppModel` for a GGUF file (errors as one sentence)."""
    llama_cpp_module()
    if not gguf.is_file():
        raise AscpError(f"GGUF file {gguf} does not exist; pass an existing .gguf path.")
    return LlamaCppModel(gguf=gguf, tokenizer=gguf_tokenizer(gguf), name=name, weights=weights)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"
