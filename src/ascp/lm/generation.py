"""Batched sampling generation with one random stream per prompt.

Each prompt draws from its own `torch.Generator`, seeded by the caller, so a prompt's sample
does not depend on which other prompts share its batch (up to last-bit differences of batched
arithmetic). Sampling follows the paper's setting by default: temperature 0.7, top-p 1,
top-k off, repetition penalty 1. Temperature 0 decodes greedily.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ascp.errors import AscpError
from ascp.lm.hf import HFLanguageModel


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k filtering
    repetition_penalty: float = 1.0
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise AscpError(f"temperature must be >= 0, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise AscpError(f"top-p must be in (0, 1], got {self.top_p}.")
        if self.top_k < 0 or self.max_new_tokens < 1 or self.repetition_penalty <= 0:
            raise AscpError("top-k must be >= 0, max new tokens >= 1 and repetition penalty > 0.")


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]  # without the end-of-turn token
    text: str
    finished: bool  # True when the model emitted an end token before the limit


def derive_seed(seed: int, *keys: object) -> int:
    """A stable 63-bit seed for one item from a run seed and the item's identity."""
    digest = hashlib.blake2b(repr((seed, *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _filter_logits(torch, logits, config: SamplingConfig):
    if config.top_k > 0:
        kth = torch.topk(logits, min(config.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= config.top_p  # keep the first token always
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def generate(
    lm: HFLanguageModel,
    prompts: Sequence[Sequence[int]],
    config: SamplingConfig,
    seeds: Sequence[int],
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
) -> list[Generation]:
    """Sample one continuation per prompt (token ids), batching independent prompts."""
    if len(prompts) != len(seeds):
        raise ValueError("one seed per prompt is required")
    results: list[Generation] = []
    for lo in range(0, len(prompts), batch_size):
        results.extend(_generate_batch(lm, prompts[lo : lo + batch_size], config, seeds[lo : lo + batch_size]))
        if on_batch:
            on_batch(len(prompts[lo : lo + batch_size]))
    return results


def _generate_batch(lm, prompts, config: SamplingConfig, seeds) -> list[Generation]:
    import torch

    device = lm.device
    width = max(len(p) for p in prompts)
    pad = lm.pad_token_id
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, ids in enumerate(prompts):  # left padding
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        mask[row, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
    eos = lm.eos_token_ids
    seen = input_ids.clone() if config.repetition_penalty != 1.0 else None
    out_ids: list[list[int]] = [[] for _ in prompts]
    finished = [False] * len(prompts)
    cache = lm.new_cache()
    step_ids, step_pos = input_ids, positions
    with torch.inference_mode():
        for _ in range(config.max_new_tokens):
            out = lm.model(
                input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                cache=cache, use_cache=True, logits_to_keep=1,
            )
            logits = out.logits[:, -1, :].to(torch.float32)
            if seen is not None:
                picked = logits.gather(-1, seen)
                picked = torch.where(picked > 0, picked / config.repetition_penalty, picked * config.repetition_penalty)
                logits = logits.scatter(-1, seen, picked)
            if config.temperature == 0:
                next_ids = logits.argmax(dim=-1).cpu()
            else:
                probs = torch.softmax(_filter_logits(torch, logits / config.temperature, config), dim=-1).cpu()
                next_ids = torch.stack(
                    [torch.multinomial(probs[r], 1, generator=generators[r])[0] for r in range(len(prompts))]
                )
            for r, token in enumerate(next_ids.tolist()):
                if finished[r]:
                    continue
                if token in eos:
                    finished[r] = True
                else:
                    out_ids[r].append(token)
            if all(finished):
                break
            next_ids = torch.tensor(
                [pad if finished[r] else t for r, t in enumerate(next_ids.tolist())], device=device
            )[:, None]
            if seen is not None:
                seen = torch.cat([seen, next_ids], dim=-1)
            mask = torch.cat([mask, torch.ones_like(next_ids)], dim=-1)
            step_pos = step_pos[:, -1:] + 1
            step_ids = next_ids
    return [Generation(tuple(ids), lm.decode(ids), done) for ids, done in zip(out_ids, finished, strict=True)]
