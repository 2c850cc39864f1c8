"""`VLLMModel`: a model served by vLLM, over its OpenAI-compatible `/v1/completions` with token-id
prompts (the shared engine base: `ascp.lm.engine`).

Generation: one request per prompt, each with its own `seed` (per-row streams), many in flight.
Scoring: the prompt variants of one request go in one call (`prompt` = a list of id lists,
`prompt_logprobs: 0`, `max_tokens: 1`), and the log-probability of every response token is read
back; vLLM skips its prefix cache for such requests, so each variant costs a full prefill
(batched by the engine).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.lm.engine import EngineModel, context_from_config
from ascp.lm.sampling import Generation, SamplingConfig


class VLLMModel(EngineModel):
    """A vLLM server's model (`vllm:http://HOST:PORT[?tokenizer=DIR&model=NAME]`)."""

    backend = "vllm"

    def _discover(self) -> tuple[str, int | None, str]:
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
        window = entry.get("max_model_len") or context_from_config(self.spec.tokenizer or served)
        return served, window, str(entry.get("root") or served)

    def _generate_one(self, ids: list[int], config: SamplingConfig, seed: int) -> Generation:
        payload = {"model": self.served, "prompt": ids, "max_tokens": config.max_new_tokens,
                   "temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k,
                   "repetition_penalty": config.repetition_penalty, "seed": seed, "return_token_ids": True}
        choice = self.client.request("/v1/completions", payload)["choices"][0]
        if choice.get("token_ids") is None:
            raise AscpError(f"the vLLM server at {self.spec.url} returned no token ids; ascp needs vLLM with "
                            "`return_token_ids` (0.10 or newer).")
        return self._finish(choice["token_ids"], choice.get("finish_reason") == "stop")

    def _score_rows(self, prompts: Sequence[Sequence[int]], response: list[int]) -> list[np.ndarray]:
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
