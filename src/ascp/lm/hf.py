"""`HFLanguageModel`: a transformers causal LM in process, one implementation of the model seam.

It is the exactness reference: generation (`ascp.lm.generation`), teacher-forced scoring with an
exact shared-prefix KV cache (`ascp.lm.scoring`), and the lockstep streams of steered decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ascp.lm.protocol import ScoredPrompts
from ascp.lm.tokenized import TokenizedModel

if TYPE_CHECKING:
    from ascp.lm.sampling import Generation, LogitMix, SamplingConfig


@dataclass
class HFLanguageModel(TokenizedModel):
    """A loaded causal LM. `name` is what the user asked for (e.g. `default`, a path or a hub id)."""

    model: Any
    tokenizer: Any
    name: str
    backend = "hf"

    def __post_init__(self) -> None:
        self.model.eval()

    # ----- the model seam -----------------------------------------------------------------
    def generate(
        self, prompts: Sequence[Sequence[int]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        from ascp.lm.generation import generate

        return generate(self, prompts, config, seeds, batch_size, on_batch)

    def generate_streams(
        self, streams: Sequence[Sequence[Sequence[int]]], config: SamplingConfig, seeds: Sequence[int],
        batch_size: int = 8, on_batch: Callable[[int], None] | None = None, mix: LogitMix | None = None,
    ) -> list[Generation]:
        from ascp.lm.generation import generate_streams

        return generate_streams(self, streams, config, seeds, batch_size, on_batch, mix)

    def score(self, prompts: Sequence[Sequence[int]], response: Sequence[int],
              reuse_prefix: bool = True) -> ScoredPrompts:
        from ascp.lm.scoring import score_prompts

        return score_prompts(self, prompts, response, reuse_prefix=reuse_prefix and self.supports_prefix_cache)

    # ----- model facts ----------------------------------------------------------------------
    def _config_sources(self) -> tuple[Any, ...]:
        return (getattr(self.model, "generation_config", None), self.model.config)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)

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
