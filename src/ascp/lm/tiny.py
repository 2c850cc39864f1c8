"""A tiny randomly initialised Llama-style model with a real BPE tokenizer and ChatML template.

Used by the tests (exactness against a naive implementation), benchmarks and the GPU smoke
check, where real weights cannot travel. Everything is built locally; nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

from ascp.lm.hf import HFLanguageModel

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. Answer the question using the passages below. "
    "Question: who wrote the novel and when was it published? Passage one says the author was born "
    "in 1850 in a small town near the river; passage two names the first edition of 1899. "
    "Abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 [](){}.,;:!?'\"-_/\n"
)


def build_tokenizer(vocab_size: int = 384):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token="<|im_start|>"
    )
    fast.chat_template = CHATML
    return fast


def tiny_language_model(
    seed: int = 0, hidden_size: int = 64, layers: int = 2, heads: int = 4, context_window: int = 4096
) -> HFLanguageModel:
    """A random-weight model; the same seed gives the same weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=context_window,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger random weights make logits (and attributions) non-trivial
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return HFLanguageModel(model=model, tokenizer=tokenizer, name=f"tiny-random-{seed}")


def save_tiny_model(directory: str | Path, **kwargs) -> Path:
    """Write a tiny model + tokenizer folder that `--model DIR` loads."""
    lm = tiny_language_model(**kwargs)
    directory = Path(directory)
    lm.model.save_pretrained(directory)
    lm.tokenizer.save_pretrained(directory)
    return directory
