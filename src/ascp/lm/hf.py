"""`HFLanguageModel`: a transformers causal LM in process, one implementation of the model seam.

It is the exactness reference: generation (its batched sampling loop, below), teacher-forced
scoring with an exact shared-prefix KV cache (`ascp.lm.scoring`), and the lockstep streams of
steered decoding.

The sampling loop: each prompt draws from its own `torch.Generator`, seeded by the caller, so a
prompt's sample does not depend on which other prompts share its batch (up to last-bit
differences of batched arithmetic). The sampling step itself (settings, penalties, mix, draws) is
backend-independent: `ascp.lm.sampling`. `generate_streams` is the general loop: an item may be
conditioned on several prompts ("streams", e.g. the three of steered decoding in
`ascp.lm.steering`) decoded in lockstep as rows of one batch; a `mix` turns each item's rows into
the logits it samples from. Ordinary sampling (`generate`) is the one-stream case.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascp.lm.encoded import common_prefix
from ascp.lm.kvcache import stacked_cache
from ascp.lm.prefixes import PrefixEntry, PrefixStore, prefix_store_from_env
from ascp.lm.protocol import AttentionPass, ScoredPrompts
from ascp.lm.sampling import BatchRows, Generation, LogitMix, SamplingConfig, StepSampler, derive_seed, run_in_batches
from ascp.lm.tokenized import TokenizedModel

if TYPE_CHECKING:
    from ascp.lm.encoded import EncodedPrompt

__all__ = ["Generation", "HFLanguageModel", "LogitMix", "SamplingConfig", "derive_seed", "generate",
           "generate_streams"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")  # files whose identity fingerprints a folder


@dataclass
class HFLanguageModel(TokenizedModel):
    """A loaded causal LM. `name` is what the user asked for (e.g. `default`, a path or a hub id)."""

    model: Any
    tokenizer: Any
    name: str
    backend = "hf"
    # prompts already prefilled in this process (generation and the probe), `ascp.lm.prefixes`
    prefixes: PrefixStore | None = field(default_factory=prefix_store_from_env, repr=False, compare=False)
    # a probe's prompts per forward pass (`ascp.lm.batched`); None: 16 on CUDA, else 0 (one at a time)
    variant_rows: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.model.eval()

    # ----- the model seam -----------------------------------------------------------------
    def generate(
        self, prompts: Sequence[Sequence[int]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        return generate(self, prompts, config, seeds, batch_size, on_batch)

    def generate_streams(
        self, streams: Sequence[Sequence[Sequence[int]]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None, mix: LogitMix | None = None,
    ) -> list[Generation]:
        return generate_streams(self, streams, config, seeds, batch_size, on_batch, mix)

    def score(self, prompts: Sequence[Sequence[int]], response: Sequence[int],
              reuse_prefix: bool = True) -> ScoredPrompts:
        from ascp.lm.scoring import score_prompts

        reuse_prefix = reuse_prefix and self.supports_prefix_cache
        rows = self.rows_per_pass
        if reuse_prefix and rows > 1 and len(prompts) > 1:
            from ascp.lm.batched import score_batched

            return score_batched(self, prompts, response, rows)
        return score_prompts(self, prompts, response, reuse_prefix=reuse_prefix)

    # ----- the attention capability (`ascp.lm.protocol.AttentionModel`) --------------------
    def read_attention(self, prompt: EncodedPrompt, response: Sequence[int], knockout_of: Sequence[int] | None = None,
                       what: str = "the attention pass") -> AttentionPass:
        """Pooled attention features per passage block, knockout scores and the full prompt's
        log-probabilities of `response` from one pass (`ascp.lm.attention.read_attention`)."""
        from ascp.lm.attention import read_attention

        return read_attention(self, prompt, response, knockout_of, what)

    @property
    def parameter_digest(self) -> str:
        """The portable identity of the weights: the model class and a digest of every parameter,
        computed once (the weights of a loaded model do not change under the probe)."""
        cached = self.__dict__.get("_parameter_digest")
        if cached is None:
            cached = f"{type(self.model).__name__}:{_parameter_digest(self.model)}"
            self.__dict__["_parameter_digest"] = cached
        return str(cached)

    # ----- model facts ----------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """dtype, device type, the whole config and the weight files' identity (a model held only
        in memory: a digest of every parameter), `ascp.lm.request_cache.fingerprint_of`."""
        from ascp.lm.request_cache import files_identity, fingerprint_of

        model = self.model
        first = next(iter(model.parameters()))
        source = Path(str(getattr(model.config, "_name_or_path", "") or ""))
        weights = [p for p in source.iterdir() if p.suffix in WEIGHT_SUFFIXES] if source.is_dir() else []
        return fingerprint_of({"backend": "hf", "dtype": str(first.dtype), "device": first.device.type,
                               "config": model.config.to_json_string(use_diff=False),
                               "weights": files_identity(weights) if weights else _parameter_digest(model)})

    def _config_sources(self) -> tuple[Any, ...]:
        return (getattr(self.model, "generation_config", None), self.model.config)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)

    @property
    def rows_per_pass(self) -> int:
        """Prompts of one probe scored as rows of one forward pass (`variant_rows`, or its default)."""
        if self.variant_rows is not None:
            return self.variant_rows
        return 16 if getattr(self.device, "type", "cpu") == "cuda" else 0

    @property
    def supports_prefix_cache(self) -> bool:
        """False for sliding-window or recurrent caches, which cannot be cropped back exactly."""
        config = self.model.config
        layer_types = getattr(config, "layer_types", None) or []
        if any(t != "full_attention" for t in layer_types):
            return False
        return getattr(config, "sliding_window", None) is None or not getattr(config, "use_sliding_window", True)

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def snapshot_cache(self, cache: Any, n: int) -> PrefixEntry:
        """The keys and values of the first `n` positions of `cache` (copies: the cache moves on)."""
        layers = [(layer.keys[:, :, :n].clone(), layer.values[:, :, :n].clone()) for layer in cache.layers]
        return PrefixEntry(layers, n, sum(k.nbytes + v.nbytes for k, v in layers))

    def cache_from(self, entry: PrefixEntry) -> Any:
        """A cache starting from a stored prefix (its tensors are never written: a `DynamicCache`
        appends by concatenation and crops by slicing)."""
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=list(entry.state))


def _parameter_digest(module: Any) -> str:
    """A digest of every parameter's name, shape, dtype and values (for a model held only in memory)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in module.state_dict().items():
        flat = tensor.detach().reshape(-1).to("cpu")
        digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
        digest.update(flat.float().numpy().tobytes())
    return digest.hexdigest()


# ----- the transformers sampling loop ---------------------------------------------------
def generate(
    lm: HFLanguageModel,
    prompts: Sequence[Sequence[int]],
    config: SamplingConfig,
    seeds: Sequence[int],
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
) -> list[Generation]:
    """Sample one continuation per prompt (token ids), batching independent prompts."""
    return generate_streams(lm, [(p,) for p in prompts], config, seeds, batch_size, on_batch)


def generate_streams(
    lm: HFLanguageModel,
    streams: Sequence[Sequence[Sequence[int]]],
    config: SamplingConfig,
    seeds: Sequence[int],
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
    mix: LogitMix | None = None,
) -> list[Generation]:
    """Sample one continuation per item, where an item is one or more prompts decoded in lockstep.

    Every stream of an item is a row of the batch with its own left padding, positions and KV
    cache; each step all rows run in one forward pass, `mix` turns an item's rows into the
    logits it samples from (default: its first stream), the item's own generator draws one
    token (the same draws as ordinary sampling), and every stream of the item continues with
    that token. Identical streams of one item share a row. With one stream per item and no
    `mix` this is ordinary sampling. `batch_size` counts items, not rows.

    Prefill: one-stream batches run one left-padded pass, as ordinary sampling always did.
    Multi-stream batches prefill row by row without padding, each row reusing the KV cache of
    the longest token prefix it shares with an earlier stream of its item (exact), then decode
    as one left-padded batch; models whose cache cannot be cropped (`supports_prefix_cache`)
    take the padded pass.
    """
    return run_in_batches(streams, seeds, batch_size, on_batch,
                          lambda batch, batch_seeds, items: _generate_batch(lm, batch, config, batch_seeds, items, mix))


def _generate_batch(lm, streams, config: SamplingConfig, seeds, items, mix) -> list[Generation]:
    import torch

    device = lm.device
    rows = BatchRows.of(streams)
    prompts = rows.prompts
    if len(prompts) > rows.n_items and lm.supports_prefix_cache:
        logits, cache, mask, last_pos = _packed_prefill(torch, lm, prompts, rows.item_rows, config.max_new_tokens)
    elif lm.prefixes is not None and lm.supports_prefix_cache:
        logits, cache, mask, last_pos = _stored_prefill(torch, lm, prompts, lm.prefixes, config.max_new_tokens)
    else:
        logits, cache, mask, last_pos = _padded_prefill(torch, lm, prompts)
    sampler = StepSampler(torch, rows, config, seeds, items, lm.eos_token_ids, lm.pad_token_id, mix, device)
    with torch.inference_mode():
        for step in range(config.max_new_tokens):
            sampler.step(logits)
            if sampler.done or step == config.max_new_tokens - 1:
                break
            next_ids = torch.tensor(sampler.row_tokens(), device=device)[:, None]
            mask = torch.cat([mask, torch.ones_like(next_ids)], dim=-1)
            last_pos = last_pos + 1
            out = lm.model(
                input_ids=next_ids, attention_mask=mask, position_ids=last_pos,
                cache=cache, use_cache=True, logits_to_keep=1,
            )
            logits = out.logits[:, -1, :].to(torch.float32)
    return sampler.results(lm.decode)


def _padded_prefill(torch, lm, prompts):
    """All rows in one forward pass, left-padded to the longest: (last logits, cache, mask, last positions)."""
    device = lm.device
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), lm.pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, ids in enumerate(prompts):  # left padding
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        mask[row, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = lm.new_cache()
    with torch.inference_mode():
        out = lm.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions,
            cache=cache, use_cache=True, logits_to_keep=1,
        )
    return out.logits[:, -1, :].to(torch.float32), cache, mask, positions[:, -1:]


PADDING_SLACK = 1.25  # a prefill batch feeds at most this many times its prompts' own tokens


def length_groups(lengths: Sequence[int], slack: float = PADDING_SLACK) -> list[list[int]]:
    """Indices of `lengths` in batches for one padded pass each: ascending length, a batch closed when the
    next prompt would make its padded area (rows x longest) exceed `slack` x its tokens. One long prompt
    among short ones (a 7,000-token context beside 1,000-token ones) then runs alone instead of padding
    every row to its length: attention's memory and time grow with rows x longest^2."""
    groups: list[list[int]] = []
    group: list[int] = []
    tokens = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if group and lengths[i] * (len(group) + 1) > slack * (tokens + lengths[i]):
            groups.append(group)
            group, tokens = [], 0
        group.append(i)
        tokens += lengths[i]
    return [*groups, group] if group else groups


def _stored_prefill(torch, lm, prompts, store: PrefixStore, room: int):
    """`_padded_prefill` for the prompts the store does not hold (each distinct prompt once, in batches of
    similar length: `length_groups`), then every row from its prompt's keys, values and last logits
    (stored or just computed), stacked as `_packed_prefill` stacks them; each computed prompt is kept in
    the store. Returns what `_padded_prefill` returns."""
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    entries: dict[tuple[int, ...], PrefixEntry] = {}
    for ids in distinct:
        entry = store.get(ids, need_logits=True)
        if entry is not None:
            entries[ids] = entry
    todo = [ids for ids in distinct if ids not in entries]
    for group in length_groups([len(ids) for ids in todo]):
        batch = [todo[i] for i in group]
        logits, cache, _, _ = _padded_prefill(torch, lm, batch)
        width = max(len(ids) for ids in batch)
        for row, ids in enumerate(batch):
            layers = [(layer.keys[row:row + 1, :, width - len(ids):].clone(),
                       layer.values[row:row + 1, :, width - len(ids):].clone()) for layer in cache.layers]
            entries[ids] = PrefixEntry(layers, len(ids), sum(k.nbytes + v.nbytes for k, v in layers) +
                                       logits[row].nbytes, logits[row].clone())
            store.put(ids, entries[ids])
    for ids in distinct:  # each further row of a prompt in this batch reuses its one prefill
        store.reused(ids, sum(tuple(p) == ids for p in prompts) - 1)
    rows = [entries[tuple(p)] for p in prompts]
    cache, mask, last_pos = stacked_cache(torch, lm, prompts, [e.state for e in rows], room)
    return torch.stack([e.logits for e in rows]), cache, mask, last_pos


def _packed_prefill(torch, lm, prompts, item_rows, room: int):
    """Prefill rows one at a time with no padding, each reusing the longest prefix it shares with an
    earlier row of its item (exact: identical tokens at identical positions have identical keys and
    values), then stack them into one left-padded cache. Several streams of one prompt differ only
    in their passage blocks, so this runs far fewer tokens than one padded pass over every row.
    The stacked cache has `room` free positions per row, so decoding steps write in place
    instead of copying the whole cache every step. Returns what `_padded_prefill` returns."""
    from transformers import DynamicCache

    device = lm.device
    kv: dict[int, list[tuple]] = {}  # row -> per layer (keys, values), each [1, heads, len, dim]
    logits = [None] * len(prompts)
    with torch.inference_mode():
        for rows in item_rows:
            done: list[int] = []
            for row in dict.fromkeys(rows):
                ids = prompts[row]
                shared, source = 0, None
                for other in done:
                    common = min(common_prefix(ids, prompts[other]), len(ids) - 1)
                    if common > shared:
                        shared, source = common, other
                cache = DynamicCache(ddp_cache_data=[(k[:, :, :shared], v[:, :, :shared]) for k, v in kv[source]]) \
                    if source is not None else lm.new_cache()
                out = lm.model(
                    input_ids=torch.tensor([ids[shared:]], dtype=torch.long, device=device),
                    position_ids=torch.arange(shared, len(ids), device=device)[None],
                    cache=cache, use_cache=True, logits_to_keep=1,
                )
                logits[row] = out.logits[0, -1, :].to(torch.float32)
                kv[row] = [(layer[0], layer[1]) for layer in cache]
                done.append(row)
    cache, mask, last_pos = stacked_cache(torch, lm, prompts, [kv[row] for row in range(len(prompts))], room)
    return torch.stack(logits), cache, mask, last_pos
