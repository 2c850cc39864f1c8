"""Inference-engine backends: a model served by vLLM or SGLang, driven over HTTP.

A model spec `vllm:http://HOST:PORT` or `sglang:http://HOST:PORT` (optionally followed by
`?tokenizer=DIR` and `&model=NAME`) names a running server. ascp keeps the prompt side (chat
framing and canonical tokenization, `TokenizedModel`) and sends token ids only, so every pass
scores exactly `tokenizer(text)` of the prompt it reports; the tokenizer is the served model's
own files (the server's model path when it is a folder on this machine, else `tokenizer=DIR`).

- vLLM, OpenAI-compatible `/v1/completions` with token-id prompts. Generation: one request per
  prompt, each with its own `seed` (per-row streams), many in flight. Scoring: the prompt
  variants of one request go in one call (`prompt` = a list of id lists, `prompt_logprobs: 0`,
  `max_tokens: 1`), and the log-probability of every response token is read back; vLLM skips its
  prefix cache for such requests, so each variant costs a full prefill (batched by the engine).
- SGLang, native `/generate` with `input_ids`: generation with `sampling_seed`; scoring with
  `return_logprob` and `logprob_start_len` at the response start, so the radix cache covers the
  prompt prefix the variants share (the engine-level form of the exact-LOO floor).

Steering (Eq. 5) needs three synchronised token streams per step, which neither API offers: the
model has no `generate_streams`, so `--steer` gets the one-sentence error of models without it.
Hosted APIs and llama.cpp's server give no prompt log-probs and cannot be probed (docs/engines.md).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.lm.protocol import ScoredPrompts
from ascp.lm.sampling import Generation, SamplingConfig
from ascp.lm.tokenized import TokenizedModel

ENGINES = ("vllm", "sglang")
TIMEOUT_S = 600.0  # one HTTP call; a long prefill of many variants on a CPU server takes minutes
RETRIES = 3  # connection errors only, with backoff; an HTTP error answer is never retried
IN_FLIGHT = 16  # concurrent requests per call


def engine_of(spec: str) -> str | None:
    """`vllm` or `sglang` when `spec` names an engine server, else None."""
    kind, sep, rest = spec.partition(":")
    return kind if sep and kind in ENGINES and rest.startswith(("http://", "https://")) else None


@dataclass(frozen=True)
class EngineSpec:
    kind: str
    url: str  # base URL without a trailing slash
    tokenizer: str | None = None
    model: str | None = None

    @classmethod
    def parse(cls, spec: str) -> EngineSpec:
        kind = engine_of(spec)
        if kind is None:
            raise AscpError(f"{spec!r} is not an engine spec; write vllm:http://HOST:PORT or sglang:http://HOST:PORT.")
        parts = urllib.parse.urlsplit(spec[len(kind) + 1:])
        query = dict(urllib.parse.parse_qsl(parts.query))
        unknown = sorted(set(query) - {"tokenizer", "model"})
        if unknown or not parts.netloc:
            raise AscpError(f"engine spec {spec!r}: expected {kind}:http://HOST:PORT[?tokenizer=DIR&model=NAME]"
                            + (f", not the option {unknown[0]!r}." if unknown else "."))
        url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        return cls(kind, url, query.get("tokenizer"), query.get("model"))


class EngineClient:
    """JSON over HTTP to one server, with a timeout and bounded retries on connection errors."""

    def __init__(self, url: str, timeout: float = TIMEOUT_S, retries: int = RETRIES) -> None:
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.reached = False  # once it has answered, a lost connection means it went away, not a wrong URL

    def request(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"},
                                     method="GET" if payload is None else "POST")
        for attempt in range(self.retries):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    answer = json.loads(resp.read().decode())
                self.reached = True
                return answer
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:300].replace("\n", " ")
                raise EngineError(self.url, path, exc.code, detail) from None
            # a refused, reset or half-read connection (IncompleteRead is an HTTPException): retried, and
            # never read as a short answer
            except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as exc:
                if attempt + 1 == self.retries:
                    reason = getattr(exc, "reason", None) or repr(exc)
                    if self.reached or not isinstance(exc, (urllib.error.URLError, ConnectionRefusedError)):
                        raise AscpError(f"the engine server at {self.url} went away during {path} ({reason}): "
                                        "its engine died or the server stopped; restart it (its log has the "
                                        "cause) and rerun.") from None
                    raise AscpError(f"the engine server at {self.url} is unreachable ({reason}); start it (see "
                                    "docs/engines.md) or fix the URL in the model spec.") from None
                time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")


# what vLLM answers (HTTP 500) once its engine core has died: every later request fails the same way
ENGINE_DEAD = ("EngineDeadError", "EngineCore encountered", "engine core is dead", "Engine loop has died")


class EngineError(AscpError):
    """An HTTP error answer from the server (status and the start of its message)."""

    def __init__(self, url: str, path: str, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        self.engine_dead = status >= 500 and any(mark.lower() in detail.lower() for mark in ENGINE_DEAD)
        if self.engine_dead:
            message = (f"the engine server at {url} answered {path} with HTTP {status} because its engine died "
                       f"({detail}); restart the server (its log has the cause, docs/engines.md \"Errors\") "
                       "and rerun.")
        elif status >= 500:
            message = (f"the engine server at {url} failed on {path} (HTTP {status}: {detail}); its log has the "
                       "cause (docs/engines.md \"Errors\").")
        else:  # 4xx: the request itself was refused, e.g. a model name or token ids it does not accept
            message = (f"the engine server at {url} refused {path} (HTTP {status}: {detail}); check that it "
                       "serves this model and accepts token-id prompts.")
        super().__init__(message)


def _load_tokenizer(source: str, where: str) -> Any:
    from transformers import AutoTokenizer

    path = Path(source).expanduser()
    if not path.is_dir():
        raise AscpError(f"{where}: the tokenizer folder {source} is not on this machine; pass the served model's "
                        "tokenizer folder as ?tokenizer=DIR in the model spec.")
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise AscpError(f"{where}: {source} holds no tokenizer ({exc}); pass the served model's folder as "
                        "?tokenizer=DIR.") from None


def _context_from_config(source: str) -> int | None:
    config = Path(source).expanduser() / "config.json"
    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None


class EngineModel(TokenizedModel):
    """The model seam over an engine server (see the module docstring)."""

    def __init__(self, spec: str, client: EngineClient | None = None) -> None:
        self.spec = EngineSpec.parse(spec)
        self.name = spec
        self.backend = self.spec.kind
        self.in_flight = IN_FLIGHT  # the loop keeps this many cases' probes in flight (the server batches)
        self.client = client or EngineClient(self.spec.url)
        self.served, self._window, source = self._discover()
        self.tokenizer = _load_tokenizer(self.spec.tokenizer or source, f"model {spec!r}")
        self._check_prompt_logprobs()

    # ----- discovery and checks ---------------------------------------------------------------
    def _discover(self) -> tuple[str, int, str]:
        """(served model name, context window, local tokenizer source) from the server."""
        if self.spec.kind == "vllm":
            models = self.client.request("/v1/models").get("data") or []
            if not models:
                raise AscpError(f"the vLLM server at {self.spec.url} serves no model.")
            names = [str(m.get("id")) for m in models]
            entry = models[0] if self.spec.model is None else next(
                (m for m in models if m.get("id") == self.spec.model), None)
            if entry is None:
                raise AscpError(f"the vLLM server at {self.spec.url} serves {', '.join(names)}, not "
                                f"{self.spec.model!r}; fix model= in the spec or serve that model.")
            served = str(entry["id"])
            window = entry.get("max_model_len") or _context_from_config(self.spec.tokenizer or served)
            source = str(entry.get("root") or served)
        else:
            info = self.client.request("/get_model_info")
            served = str(info.get("model_path"))
            if self.spec.model is not None and self.spec.model != served:
                raise AscpError(f"the SGLang server at {self.spec.url} serves {served}, not {self.spec.model!r}; "
                                "fix model= in the spec or serve that model.")
            source = str(info.get("tokenizer_path") or served)
            window = _context_from_config(self.spec.tokenizer or source)
            with contextlib.suppress(AscpError):  # older servers lack it; the config's length stands
                window = self.client.request("/get_server_info").get("context_length") or window
        if not window:
            raise AscpError(f"the engine server at {self.spec.url} does not say its context window and the "
                            "tokenizer folder has no config.json; pass ?tokenizer=DIR of the served model.")
        return served, int(window), source

    def _check_prompt_logprobs(self) -> None:
        """One tiny scoring call: a server without prompt log-probs is refused before any work."""
        ids = self.encode("ok.")
        try:
            self.score([ids[:1]], ids[1:] or ids)
        except EngineError as exc:
            if exc.status >= 500:  # a server fault, not a missing feature
                raise
            raise AscpError(f"the engine server at {self.spec.url} does not return prompt log-probs (HTTP "
                            f"{exc.status}: {exc.detail}); ascp needs them to probe (docs/engines.md).") from None

    @property
    def context_window(self) -> int:
        return self._window

    # ----- generation -----------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], config: SamplingConfig, seeds: Sequence[int],
                 batch_size: int = 8, on_batch: Callable[[int], None] | None = None) -> list[Generation]:
        """One sampled continuation per prompt, each request with its own seed, many in flight."""
        for ids in prompts:
            self.check_fits("generation", len(ids), config.max_new_tokens)
        one = self._generate_vllm if self.spec.kind == "vllm" else self._generate_sglang

        def run(i: int) -> Generation:
            out = one(list(prompts[i]), config, int(seeds[i]) % (2**63))
            if on_batch is not None:
                on_batch(1)
            return out

        with ThreadPoolExecutor(max_workers=max(1, min(IN_FLIGHT, len(prompts)))) as pool:
            return list(pool.map(run, range(len(prompts))))

    def _finish(self, ids: Sequence[int], stopped: bool) -> Generation:
        eos = self.eos_token_ids
        ids = list(ids)
        while ids and ids[-1] in eos:
            ids.pop()
        return Generation(token_ids=tuple(ids), text=self.decode(ids), finished=stopped)

    def _generate_vllm(self, ids: list[int], config: SamplingConfig, seed: int) -> Generation:
        payload = {"model": self.served, "prompt": ids, "max_tokens": config.max_new_tokens,
                   "temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k,
                   "repetition_penalty": config.repetition_penalty, "seed": seed, "return_token_ids": True}
        choice = self.client.request("/v1/completions", payload)["choices"][0]
        if choice.get("token_ids") is None:
            raise AscpError(f"the vLLM server at {self.spec.url} returned no token ids; ascp needs vLLM with "
                            "`return_token_ids` (0.10 or newer).")
        return self._finish(choice["token_ids"], choice.get("finish_reason") == "stop")

    def _generate_sglang(self, ids: list[int], config: SamplingConfig, seed: int) -> Generation:
        params = {"max_new_tokens": config.max_new_tokens, "temperature": config.temperature,
                  "top_p": config.top_p, "top_k": config.top_k or -1,
                  "repetition_penalty": config.repetition_penalty, "sampling_seed": seed}
        out = self.client.request("/generate", {"input_ids": ids, "sampling_params": params})
        finish = (out.get("meta_info") or {}).get("finish_reason") or {}
        return self._finish(out.get("output_ids") or [], isinstance(finish, dict) and finish.get("type") == "stop")

    # ----- scoring ----------------------------------------------------------------------------
    def score(self, prompts: Sequence[Sequence[int]], response: Sequence[int],
              reuse_prefix: bool = True) -> ScoredPrompts:
        """log p(response[j] | prompt, response[:j]) under each prompt (the engine batches them)."""
        response = list(response)
        for ids in prompts:
            self.check_fits("scoring", len(ids), len(response))
        if not response:
            return ScoredPrompts(tuple(np.zeros(0) for _ in prompts), 0)
        rows = self._score_vllm(prompts, response) if self.spec.kind == "vllm" else self._score_sglang(prompts,
                                                                                                     response)
        return ScoredPrompts(tuple(rows), sum(len(p) + len(response) for p in prompts))

    def _score_vllm(self, prompts: Sequence[Sequence[int]], response: list[int]) -> list[np.ndarray]:
        payload = {"model": self.served, "prompt": [[*p, *response] for p in prompts], "max_tokens": 1,
                   "temperature": 0.0, "prompt_logprobs": 0}
        choices = sorted(self.client.request("/v1/completions", payload)["choices"], key=lambda c: c["index"])
        rows = []
        for prompt, choice in zip(prompts, choices, strict=True):
            entries = choice.get("prompt_logprobs")
            if not entries:
                raise AscpError(f"the vLLM server at {self.spec.url} returned no prompt log-probs; ascp needs "
                                "`prompt_logprobs` (docs/engines.md).")
            rows.append(_pick(entries[len(prompt):], response, self.spec.url))
        return rows

    def _score_sglang(self, prompts: Sequence[Sequence[int]], response: list[int]) -> list[np.ndarray]:
        def one(prompt: Sequence[int]) -> np.ndarray:
            payload = {"input_ids": [*prompt, *response], "sampling_params": {"max_new_tokens": 0},
                       "return_logprob": True, "logprob_start_len": len(prompt)}
            meta = self.client.request("/generate", payload).get("meta_info") or {}
            values = meta.get("input_token_logprobs")
            if not values:
                raise AscpError(f"the SGLang server at {self.spec.url} returned no input log-probs; ascp needs "
                                "`return_logprob` (docs/engines.md).")
            tail = values[-len(response):]
            if len(tail) != len(response) or any(v[0] is None or int(v[1]) != t for v, t in zip(tail, response,
                                                                                               strict=True)):
                raise AscpError(f"the SGLang server at {self.spec.url} returned log-probs of other tokens than "
                                "the response's; is it serving another tokenizer?")
            return np.array([float(v[0]) for v in tail])

        with ThreadPoolExecutor(max_workers=max(1, min(IN_FLIGHT, len(prompts)))) as pool:
            return list(pool.map(one, prompts))

    def close(self) -> None:  # nothing held: the server owns the model
        return None


def _pick(entries: Sequence[Any], response: Sequence[int], url: str) -> np.ndarray:
    """The log-probability of each response token from vLLM's per-position {token_id: Logprob} maps."""
    out = np.empty(len(response))
    for j, (entry, token) in enumerate(zip(entries, response, strict=True)):
        item = (entry or {}).get(str(token))
        if item is None:
            raise AscpError(f"the vLLM server at {url} returned no log-prob of response token {token}; is it "
                            "serving another tokenizer than ascp's?")
        out[j] = float(item["logprob"] if isinstance(item, dict) else item)
    return out


def load_engine_model(spec: str) -> EngineModel:
    """An `EngineModel` for `vllm:URL` / `sglang:URL` (checks the server before returning)."""
    return EngineModel(spec)
