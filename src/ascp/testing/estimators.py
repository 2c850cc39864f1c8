"""The estimator contract as tests an estimator's author runs against their own class.

    from ascp.testing.estimators import EstimatorContract

    class TestMine(EstimatorContract):
        estimator_name = "mine"          # a registered name

pytest collects the subclass (its name starts with `Test`) and runs every `test_*` method; the
base class itself is not collected. The checks are the ones every built-in estimator passes:
one finite score per passage in context order, statelessness (the same input gives the same
output, whatever was scored in between), `tokens_processed >= 0`, the registered `name`, declared
and validated `params`, and a working `ascp.attribute(...)` / `ascp.Probe` path. The model is a
tiny randomly initialised Llama with a real BPE tokenizer (`ascp.lm.tiny`, built locally, never
downloaded); override `make_model` to use another. Plain `assert`s; nothing here imports pytest.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ascp.attribution import estimator_names, estimator_params, make_estimator
from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.errors import raised_error
from ascp.params import Param, refused_value
from ascp.types import Passage

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel

_WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "answer", "question", "who", "wrote",
    "novel", "when", "was", "it", "published", "author", "born", "in", "1850", "small", "town", "near",
    "river", "first", "edition", "of", "1899", "Canberra", "Parliament", "capital", "city",
)


@functools.lru_cache(maxsize=1)
def tiny_model() -> LanguageModel:
    """The tiny random model (seed 0), built once per process, without a prefix store: the contract
    checks an estimator to the last bits, which a store moves with what the model computed before
    (docs/prefix-store.md)."""
    from ascp.lm.tiny import tiny_language_model

    lm = tiny_language_model(seed=0)
    lm.prefixes = None
    return lm


def _text(rng: np.random.Generator, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS, size=int(rng.integers(low, high))))


def random_request(k: int, seed: int) -> tuple[str, tuple[Passage, ...], str]:
    """(question, k passages with distinct ids, response), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    passages = tuple(Passage(id=f"doc-{i}", title=_text(rng, 1, 3) if i % 2 else "", text=_text(rng, 6, 20))
                     for i in range(k))
    return _text(rng, 4, 9) + "?", passages, _text(rng, 5, 10) + "."


def probe_input(lm: LanguageModel, question: str, passages: tuple[Passage, ...], response: str) -> ProbeInput:
    """What the probe hands an estimator: the encoded prompt and the fixed response."""
    return ProbeInput(question, passages, lm.encode_prompt(question, passages), response, tuple(lm.encode(response)))


class EstimatorContract:
    """Subclass it as `Test...` and set `estimator_name`; see the module docstring."""

    estimator_name: str = ""

    # -- helpers ------------------------------------------------------------------------------
    def make_model(self) -> LanguageModel:
        """The model the estimator is scored with (default: the tiny random model)."""
        return tiny_model()

    def make(self, **options: Any) -> Estimator:
        assert self.estimator_name, f"{type(self).__name__}: set estimator_name to the estimator under test"
        return make_estimator(self.estimator_name, **options)

    def item(self, k: int, seed: int) -> ProbeInput:
        return probe_input(self.make_model(), *random_request(k, seed))

    def score(self, estimator: Estimator, item: ProbeInput) -> Scores:
        scores = estimator.score(self.make_model(), item)
        assert isinstance(scores, Scores), f"score returned a {type(scores).__name__}, not ascp.Scores"
        return scores

    # -- the contract -------------------------------------------------------------------------
    def test_is_registered_under_its_name(self) -> None:
        assert self.estimator_name in estimator_names()
        estimator = self.make()
        assert isinstance(estimator, Estimator)
        assert estimator.name == self.estimator_name

    def test_one_finite_score_per_passage(self) -> None:
        estimator = self.make()
        for k in (1, 3, 5):
            values = np.asarray(self.score(estimator, self.item(k, seed=10 + k)).values)
            assert values.shape == (k,), f"k={k}: scores of shape {values.shape}, expected ({k},)"
            assert np.all(np.isfinite(values)), f"k={k}: non-finite scores {values}"

    def test_stateless(self) -> None:
        """The same input gives the same output, whatever the instance scored in between."""
        estimator = self.make()
        a, b = self.item(4, seed=1), self.item(3, seed=2)
        first = np.asarray(self.score(estimator, a).values)
        self.score(estimator, b)
        again = np.asarray(self.score(estimator, a).values)
        fresh = np.asarray(self.score(self.make(), a).values)
        np.testing.assert_allclose(again, first, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(fresh, first, rtol=1e-7, atol=1e-10)

    def test_tokens_processed_is_a_count(self) -> None:
        scores = self.score(self.make(), self.item(3, seed=3))
        assert int(scores.tokens_processed) == scores.tokens_processed and scores.tokens_processed >= 0

    def test_params_are_declared_and_validated(self) -> None:
        params = estimator_params(self.estimator_name)
        assert isinstance(params, tuple) and all(isinstance(p, Param) for p in params)
        assert len({p.name for p in params}) == len(params), "parameter names must be unique"
        for p in params:
            assert p.type in (int, float, bool, str), f"{p.name}: type must be int, float, bool or str"
            assert p.help, f"{p.name}: give it a help text (ascp estimators prints it)"
            assert p.coerce(self.estimator_name, p.default) == p.default, f"{p.name}: its default is not valid"
            assert isinstance(self.make(**{p.name: p.default}), Estimator)
            error = raised_error(self.make, **{p.name: refused_value(p)})
            assert error is not None and p.name in str(error), f"{p.name}={refused_value(p)!r} was accepted"
        error = raised_error(self.make, no_such_option=1)
        assert error is not None and "unknown option" in str(error)

    def test_works_through_attribute_and_probe(self) -> None:
        import ascp

        model = self.make_model()
        question, passages, response = random_request(3, seed=4)
        result = ascp.attribute(question, passages, response, model=model, estimator=self.estimator_name)
        assert result.estimator == self.estimator_name
        assert list(result.scores) == [p.id for p in passages], "scores must follow the context order"
        assert all(np.isfinite(v) for v in result.scores.values())
        assert set(result.used) <= set(result.scores)
        again = ascp.Probe(model, self.estimator_name).attribute(question, passages, response)
        np.testing.assert_allclose(list(again.scores.values()), list(result.scores.values()), rtol=1e-7, atol=1e-10)


__all__ = ["EstimatorContract", "probe_input", "random_request", "tiny_model"]
