"""`SGLangModel`: a model served by SGLang, over its native `/generate` with `input_ids` (the shared
engine base: `ascp.lm.engine`).

Generation with `sampling_seed`, one request per prompt, many in flight; scoring with
`return_logprob` and `logprob_start_len` at the response start, so the radix cache covers the
prompt prefix the variants share (the engine-level form of the exact-LOO floor).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from ascp.errors import AscpError
from ascp.lm.engine import EngineModel, context_from_config
from ascp.lm.sampling import Generation, SamplingConfig


class SGLangModel(EngineModel):
    """An SGLang server's model (`sglang:http://HOST:PORT[?tokenizer=DIR&model=NAME]`)."""

    backend = "sglang"

    def _discover(self) -> tuple[str, int | None, str]:
        info = self.client.request("/get_model_info")
        served = str(info.get("model_path"))
        if self.spec.model is not None and self.spec.model != served:
            raise AscpError(f"the SGLang server at {self.spec.url} serves {served}, not {self.spec.model!r}; "
                            "fix model= in the spec or serve that model.")
        source = str(info.get("tokenizer_path") or served)
        window = context_from_config(self.spec.tokenizer or source)
        with contextlib.suppress(AscpError):  # older servers lack it; the config's length stands
            window = self.client.request("/get_server_info").get("context_length") or window
        return served, window, source

    def _generate_one(self, ids: list[int], config: SamplingConfig, seed: int) -> Generation:
        params = {"max_new_tokens": config.max_new_tokens, "temperature": config.temperature,
                  "top_p": config.top_p, "top_k": config.top_k or -1,
                  "repetition_penalty": config.repetition_penalty, "sampling_seed": seed}
        out = self.client.request("/generate", {"input_ids": ids, "sampling_params": params})
        finish = (out.get("meta_info") or {}).get("finish_reason") or {}
        return self._finish(out.get("output_ids") or [], isinstance(finish, dict) and finish.get("type") == "stop")

    def _score_rows(self, prompts: Sequence[Sequence[int]], response: list[int]) -> list[np.ndarray]:
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

        return self.in_parallel(one, prompts)
