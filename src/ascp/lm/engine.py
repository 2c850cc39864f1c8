"""Inference-engine backends, their shared base: a model served by vLLM or SGLang, driven over HTTP.

A model spec `vllm:http://HOST:PORT` or `sglang:http://HOST:PORT` (optionally followed by
`?tokenizer=DIR` and `&model=NAME`) names a running server. ascp keeps the prompt side (chat
framing and canonical tokenization, `TokenizedModel`) and sends token ids only, so every pass
scores exactly `tokenizer(text)` of the prompt it reports; the tokenizer is the served model's
own files (the server's model path when it is a folder on this machine, else `tokenizer=DIR`).

What every engine shares lives here: the spec, the HTTP client and its errors, and `EngineModel`
(discovery's checks, the prompt-log-prob check at load, requests in flight, the fingerprint, the
token count). Each engine's own requests live in its own module: `ascp.lm.vllm` (`VLLMModel`,
OpenAI-compatible `/v1/completions`) and `ascp.lm.sglang` (`SGLangModel`, native `/generate`).

Steering (Eq. 5) needs three synchronised token streams per step, which neither API offers: the
model has no `generate_streams`, so `--steer` gets the one-sentence error of models without it.
Hosted APIs and llama.cpp's server give no prompt log-probs and cannot be probed (docs/engines.md).
"""

from __future__ import annotations

import hashlib
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
from typing import Any, ClassVar

import numpy as np

from ascp.errors import AscpError
from ascp.lm.protocol import ScoredPrompts, tokens_fed
from ascp.lm.sampling import Generation, SamplingConfig
from ascp.lm.tokenized import TokenizedModel

ENGINES = ("vllm", "sglang")  # the spec prefixes; each engine's class: `ascp.lm.resolve.load_engine_model`
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
                        raise EngineUnavailable(f"the engine server at {self.url} went away during {path} ({reason}): "
                                        "its engine died or the server stopped; restart it (its log has the "
                                        "cause) and rerun.") from None
                    raise EngineUnavailable(f"the engine server at {self.url} is unreachable ({reason}); start it (see "
                                    "docs/engines.md) or fix the URL in the model spec.") from None
                time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")


# what vLLM answers (HTTP 500) once its engine core has died: every later request fails the same way
ENGINE_DEAD = ("EngineDeadError", "EngineCore encountered", "engine core is dead", "Engine loop has died")


class EngineUnavailable(AscpError):
    """The engine server does not answer: unreachable, or gone during a request (a service behind it
    answers 503 and recovers when the server is back)."""


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


def context_from_config(source: str) -> int | None:
    config = Path(source).expanduser() / "config.json"
    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None


class EngineModel(TokenizedModel):
    """The model seam over an engine server (see the module docstring); a subclass per engine
    gives its `backend` (the spec prefix) and its requests: `_discover`, `_generate_one`,
    `_score_rows`."""

    backend: ClassVar[str]
    in_flight = IN_FLIGHT  # the loop keeps this many cases' probes in flight (the server batches)

    def __init__(self, spec: str, client: EngineClient | None = None) -> None:
        self.spec = EngineSpec.parse(spec)
        if self.spec.kind != self.backend:
            raise AscpError(f"{spec!r} names a {self.spec.kind} server, not a {self.backend} one; write "
                            f"{self.backend}:http://HOST:PORT.")
        self.name = spec
        self.client = client or EngineClient(self.spec.url)
        self.served, window, source = self._discover()
        if not window:
            raise AscpError(f"the engine server at {self.spec.url} does not say its context window and the "
                            "tokenizer folder has no config.json; pass ?tokenizer=DIR of the served model.")
        self._window = int(window)
        self.tokenizer = _load_tokenizer(self.spec.tokenizer or source, f"model {spec!r}")
        self._check_prompt_logprobs()

    # ----- what each engine implements --------------------------------------------------------
    def _discover(self) -> tuple[str, int | None, str]:
        """(served model name, context window or None, local tokenizer source) from the server."""
        raise NotImplementedError

    def _generate_one(self, ids: list[int], config: SamplingConfig, seed: int) -> Generation:
        raise NotImplementedError

    def _score_rows(self, prompts: Sequence[Sequence[int]], response: list[int]) -> list[np.ndarray]:
        """log p(response[j] | prompt, response[:j]) for each prompt."""
        raise NotImplementedError

    # ----- checks and declared facts -------------------------------------------------------------
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

    @property
    def fingerprint(self) -> str:
        """The served model, its context window and a hash of the tokenizer's vocabulary (two
        replicas of one model share rows)."""
        from ascp.lm.request_cache import fingerprint_of

        vocab = json.dumps(sorted(self.tokenizer.get_vocab().items())).encode()
        return fingerprint_of({"backend": self.backend, "served": self.served, "window": self.context_window,
                               "tokenizer": hashlib.blake2b(vocab, digest_size=16).hexdigest()})

    # ----- the model seam ------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], config: SamplingConfig, seeds: Sequence[int],
                 batch_size: int = 8, on_batch: Callable[[int], None] | None = None) -> list[Generation]:
        """One sampled continuation per prompt, each request with its own seed, many in flight."""
        for ids in prompts:
            self.check_fits("generation", len(ids), config.max_new_tokens)

        def run(i: int) -> Generation:
            out = self._generate_one(list(prompts[i]), config, int(seeds[i]) % (2**63))
            if on_batch is not None:
                on_batch(1)
            return out

        return self.in_parallel(run, range(len(prompts)))

    def score(self, prompts: Sequence[Sequence[int]], response: Sequence[int],
              reuse_prefix: bool = True) -> ScoredPrompts:
        """log p(response[j] | prompt, response[:j]) under each prompt (the engine batches them);
        tokens fed: each prompt's whole pass (`tokens_fed`: the server's prefix cache is its own)."""
        response = list(response)
        for ids in prompts:
            self.check_fits("scoring", len(ids), len(response))
        if not response:
            return ScoredPrompts(tuple(np.zeros(0) for _ in prompts), 0)
        rows = self._score_rows(prompts, response)
        return ScoredPrompts(tuple(rows), sum(tokens_fed(len(p), len(response)) for p in prompts))

    def in_parallel(self, one: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """`one` of each item, up to `IN_FLIGHT` requests at once, in order."""
        with ThreadPoolExecutor(max_workers=max(1, min(IN_FLIGHT, len(items)))) as pool:
            return list(pool.map(one, items))

    def _finish(self, ids: Sequence[int], stopped: bool) -> Generation:
        eos = self.eos_token_ids
        ids = list(ids)
        while ids and ids[-1] in eos:
            ids.pop()
        return Generation(token_ids=tuple(ids), text=self.decode(ids), finished=stopped)

    def close(self) -> None:  # nothing held: the server owns the model
        return None
