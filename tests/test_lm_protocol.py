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
