"""Attribution estimators: the causal probe (`loo`) and the estimators it is validated against.

`make_estimator(name, **options)` builds one by name; `register_estimator(name, factory)` adds
one of one's own (an `Estimator` subclass declaring its `params`). Plugins (`ascp.plugins`) are
loaded before a name is resolved, so `ESTIMATOR_NAMES` (recomputed on each access) and every
resolution see their registrations.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ascp.attribution.base import Estimator
from ascp.errors import AscpError
from ascp.params import Param, validate
from ascp.plugins.registry import Registry
from ascp.reading import free_threshold, normalize, used_mask

_BUILTIN_NAMES = ("loo", "replace", "hierarchical", "contextcite", "bm25", "qd-cosine", "yd-cosine", "attention",
                  "gated")
DEFAULT_ESTIMATOR = "loo"
"""The causal probe of the paper (Eq. 3): what every command and the API use unless told otherwise."""
VALIDATION_ESTIMATORS = ("loo", "replace", "contextcite", "bm25", "qd-cosine", "yd-cosine")
"""The estimators `ascp validate-probe` compares by default (Fig. 3's set)."""

F = TypeVar("F", bound=Callable[..., Estimator])

if TYPE_CHECKING:
    ESTIMATOR_NAMES: tuple[str, ...]
else:
    def __getattr__(name: str) -> Any:
        # ESTIMATOR_NAMES is computed on access, so it lists plugins and later registrations.
        if name == "ESTIMATOR_NAMES":
            return estimator_names()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _builtins() -> Mapping[str, Callable[..., Estimator]]:
    # The built-ins import lazily: some of their modules pull in scikit-learn or embedders.
    from ascp.attribution.attention import AttentionEstimator
    from ascp.attribution.contextcite import ContextCite
    from ascp.attribution.gated import GatedEstimator
    from ascp.attribution.hierarchical import HierarchicalLOO
    from ascp.attribution.loo import LeaveOneOut, Replacement
    from ascp.attribution.proxies import BM25Proxy, QuestionCosine, ResponseCosine

    return {
        "loo": LeaveOneOut,
        "replace": Replacement,
        "hierarchical": HierarchicalLOO,
        "contextcite": ContextCite,
        "bm25": BM25Proxy,
        "qd-cosine": QuestionCosine,
        "yd-cosine": ResponseCosine,
        "attention": AttentionEstimator,
        "gated": GatedEstimator,
    }


ESTIMATORS: Registry[Callable[..., Estimator]] = Registry(
    "estimator", "estimator", "contextcite(num_ablations=64)", _BUILTIN_NAMES, _builtins)
"""The estimators by name (`ascp.plugins.registry`, the one registry mechanism)."""


def estimator_names() -> tuple[str, ...]:
    """The registered estimator names, built-in first, plugins loaded."""
    return ESTIMATORS.names()


@overload
def register_estimator(name: str, factory: F, /) -> F: ...
@overload
def register_estimator(name: str, factory: None = None, /) -> Callable[[F], F]: ...
def register_estimator(name: str, factory: F | None = None, /) -> F | Callable[[F], F]:
    """Register an estimator of one's own under `name`.

    `factory` is a concrete `Estimator` subclass (or a function returning an `Estimator`) whose
    `params` declare its keyword options; `make_estimator`, `ascp.attribute(..., estimator=name)`,
    `ascp.Probe`, `ascp run --estimator` and `ascp estimators` then work for it as for the
    built-ins, and the instances it makes carry `name`. Without `factory` this returns a decorator.
    Refused with AscpError: a malformed or taken name, a class that is no concrete `Estimator`.
    Registering the same factory (or a redefinition of it: same module and qualified name) again
    is a no-op.
    """
    if factory is None:
        return lambda f: register_estimator(name, f)
    ESTIMATORS.check_name(name)
    if isinstance(factory, type):
        if not issubclass(factory, Estimator):
            raise AscpError(f"cannot register {factory!r} as estimator {name!r}: it is not a subclass of "
                            "ascp.Estimator; derive it from ascp.Estimator and implement score(lm, item).")
        if inspect.isabstract(factory):
            raise AscpError(f"cannot register {factory.__module__}.{factory.__qualname__} as estimator {name!r}: "
                            "it does not implement score(lm, item).")
    elif not callable(factory):
        raise AscpError(f"cannot register {factory!r} as estimator {name!r}: give an ascp.Estimator subclass.")
    label = _label(factory)
    params = getattr(factory, "params", ())
    if not isinstance(params, tuple) or not all(isinstance(p, Param) for p in params):
        raise AscpError(f"cannot register {label} as estimator {name!r}: its params must be a tuple of ascp.Param.")
    try:  # make_estimator calls factory(**options)
        inspect.signature(factory).bind(**{p.name: p.default for p in params})
    except TypeError as exc:
        raise AscpError(f"cannot register {label} as estimator {name!r}: it must take one keyword per declared "
                        f"param and nothing else required ({exc}).") from exc
    ESTIMATORS.add(name, factory, owner=_label,
                   same_as=lambda old: old is factory or (_label(old) == label and "<lambda>" not in label))
    return factory


def _label(factory: Callable[..., Any]) -> str:
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"


def _resolve(name: str) -> Callable[..., Estimator]:
    return ESTIMATORS.get(name)


def estimator_params(name: str) -> tuple[Param, ...]:
    """The declared parameters of an estimator."""
    return tuple(getattr(_resolve(name), "params", ()))


@dataclass(frozen=True)
class EstimatorFacts:
    """What an estimator declares about its scores (`Estimator`'s class attributes), by name."""

    name: str
    uses_model: bool
    causal: bool
    nats_per_token: bool
    reads_response: bool
    needs_seed: bool
    needs_embedder: bool
    token_readings: bool

    @property
    def unit(self) -> str:
        """The unit of its raw scores as views print it."""
        return "nats/token" if self.nats_per_token else "score"


_FACTS = ("uses_model", "causal", "nats_per_token", "reads_response", "needs_seed", "needs_embedder",
          "token_readings")


def estimator_facts(name: str) -> EstimatorFacts:
    """The declarations of the estimator registered as `name` (unknown names: one `AscpError`).

    Read from the class without building an estimator; a registered factory function is called once
    with its declared defaults (estimators hold only their settings, so that is cheap).
    """
    factory = _resolve(name)
    holder: Any = factory
    if not isinstance(factory, type):
        holder = factory(**{p.name: p.default for p in getattr(factory, "params", ())})
    return facts_of(holder, name)


def facts_of(estimator: Estimator | type[Estimator], name: str | None = None) -> EstimatorFacts:
    """The declarations of an estimator instance or class (registered or not)."""
    return EstimatorFacts(name or estimator.name,
                          *(bool(getattr(estimator, fact, getattr(Estimator, fact))) for fact in _FACTS))


def recorded_facts(name: Any) -> EstimatorFacts | None:
    """`estimator_facts` for a name read back from a results file; None when no estimator of that name
    is registered in this process (a plugin not loaded): such rows are reported as of unknown scale."""
    if not isinstance(name, str):
        return None
    try:
        return estimator_facts(name)
    except AscpError:
        return None


def make_estimator(name: str, **options: Any) -> Estimator:
    """Build an estimator by its canonical name; unknown names or options raise a one-sentence
    `AscpError` naming the field."""
    factory = _resolve(name)
    estimator = factory(**validate(f"estimator {name!r}", estimator_params(name), options))
    if ESTIMATORS.registered(name) is not None:
        if not isinstance(estimator, Estimator):
            raise AscpError(f"estimator {name!r}: its factory returned a {type(estimator).__name__}, not an "
                            "ascp.Estimator; return an instance of an Estimator subclass.")
        estimator.name = name  # the registered name, as results and listings show it
    return estimator


__all__ = ["DEFAULT_ESTIMATOR", "ESTIMATORS", "ESTIMATOR_NAMES", "VALIDATION_ESTIMATORS", "Estimator", "EstimatorFacts",
           "estimator_facts", "estimator_names", "estimator_params", "facts_of", "free_threshold", "make_estimator",
           "normalize", "recorded_facts", "register_estimator", "used_mask"]
