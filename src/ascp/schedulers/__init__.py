"""Context schedulers: `make_scheduler(name, view, k, T, rng, **options)` by canonical name.

Names: the entries of `SCHEDULER_NAMES` (variants are registered names with preset options), an
alias in `ALIASES`, or a name with options in parentheses, `ascp(feedback=uniform,kappa=1)`:
values parse as int, float, true/false, none, or else a bare string. Keyword options override
those in the name. `embed_fn` is accepted by every policy and ignored by those that embed nothing.

`register_scheduler(name, cls, **preset_options)` adds a policy of one's own (a `Scheduler`
subclass declaring its `params`); plugins (`ascp.plugins`) are loaded before a name is resolved,
so `SCHEDULER_NAMES` (recomputed on each access) and every resolution see their registrations.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np

from ascp.errors import AscpError
from ascp.params import Param, canonical_name, validate
from ascp.plugins.registry import Registry
from ascp.schedulers.ascp import Ascp, ascp_greedy, ascp_objective
from ascp.schedulers.ascp_exposure import AscpExposure
from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection
from ascp.schedulers.carriage import Carriage
from ascp.schedulers.dpp import DPP
from ascp.schedulers.facets import Facets, build_pool_view, induce_facets, pool_view_from_embeddings
from ascp.schedulers.mmr import MMR
from ascp.schedulers.pm2 import PM2
from ascp.schedulers.rotate import Rotate
from ascp.schedulers.vanilla import Vanilla
from ascp.schedulers.xquad import XQuAD

_BUILTINS: dict[str, tuple[type[Scheduler], dict[str, Any]]] = {
    "vanilla": (Vanilla, {}),
    "rotate": (Rotate, {}),
    "mmr": (MMR, {}),
    "xquad": (XQuAD, {}),
    "pm2": (PM2, {}),
    "dpp": (DPP, {}),
    "carriage": (Carriage, {}),
    "carriage-narrow": (Carriage, {"stride": 0}),
    "ascp": (Ascp, {}),
    "ascp-uniform": (Ascp, {"feedback": "uniform"}),
    "ascp-similarity": (Ascp, {"feedback": "similarity"}),
    "ascp-nofeedback": (Ascp, {"feedback": "none"}),
    "ascp-modular": (Ascp, {"submodular": False}),
    "ascp-pin1": (Ascp, {"kappa": 1}),
    "ascp-pin2": (Ascp, {"kappa": 2}),
    "ascp-exposure": (AscpExposure, {}),
}
ALIASES = {"fixed": "vanilla"}
SCHEDULERS: Registry[tuple[type[Scheduler], dict[str, Any]]] = Registry(
    "scheduler", "policy", "ascp or ascp(feedback=uniform,kappa=1)", tuple(_BUILTINS), lambda: _BUILTINS, ALIASES)
"""The policies by name, each a (class, preset options) pair (`ascp.plugins.registry`, the one registry
mechanism)."""

S = TypeVar("S", bound=type[Scheduler])

if TYPE_CHECKING:
    SCHEDULER_NAMES: tuple[str, ...]
else:
    def __getattr__(name: str) -> Any:
        # SCHEDULER_NAMES is computed on access, so it lists plugins and later registrations.
        if name == "SCHEDULER_NAMES":
            return scheduler_names()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def scheduler_names() -> tuple[str, ...]:
    """The registered policy names, built-in first, plugins loaded."""
    return SCHEDULERS.names()


@overload
def register_scheduler(name: str, cls: S, /, **preset_options: Any) -> S: ...
@overload
def register_scheduler(name: str, cls: None = None, /, **preset_options: Any) -> Callable[[S], S]: ...
def register_scheduler(name: str, cls: S | None = None, /, **preset_options: Any) -> S | Callable[[S], S]:
    """Register a policy of one's own under `name`, with `preset_options` as its variant's presets.

    `cls` subclasses `Scheduler`, declares its options in `params` and takes
    `(view, k, T, rng, name=None, **options)`; `make_scheduler`, `check_scheduler`, `ascp policies`
    and `parse_scheduler`'s `name(key=value)` syntax then work for it as for the built-ins. Without
    `cls` this returns a class decorator. Refused with AscpError: a malformed or taken name, a class
    that is no concrete `Scheduler`, undeclared or badly typed presets. Registering the same class
    (or a redefinition of it: same module and qualified name) with the same presets again is a no-op.
    """
    if cls is None:
        return lambda c: register_scheduler(name, c, **preset_options)
    SCHEDULERS.check_name(name)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise AscpError(f"cannot register {cls!r} as scheduler {name!r}: it is not a subclass of "
                        "ascp.Scheduler; derive the policy from ascp.Scheduler and implement select(round, history).")
    label = f"{cls.__module__}.{cls.__qualname__}"
    if inspect.isabstract(cls):
        raise AscpError(f"cannot register {label} as scheduler {name!r}: it does not implement "
                        "select(round, history).")
    if not isinstance(cls.params, tuple) or not all(isinstance(p, Param) for p in cls.params):
        raise AscpError(f"cannot register {label} as scheduler {name!r}: its params must be a tuple of "
                        "ascp.Param.")
    try:  # make_scheduler calls cls(view, k, T, rng, name=..., **options)
        inspect.signature(cls).bind(None, 1, 1, None, name=name, **{p.name: p.default for p in cls.params})
    except TypeError as exc:
        raise AscpError(f"cannot register {label} as scheduler {name!r}: its constructor must take (view, k, T, "
                        f"rng, name=None, **options) with one keyword per declared param ({exc}).") from exc
    preset = validate(f"scheduler {name!r}", cls.params, preset_options)
    SCHEDULERS.add(name, (cls, preset), owner=lambda old: f"{old[0].__module__}.{old[0].__qualname__}",
                   same_as=lambda old: (old[0].__module__, old[0].__qualname__, old[1])
                   == (cls.__module__, cls.__qualname__, preset))
    return cls


def parse_scheduler(spec: str) -> tuple[str, dict[str, Any]]:
    """`name` or `name(key=value,...)` -> (registered name, options); raises AscpError when malformed."""
    return SCHEDULERS.parse(spec)


def check_scheduler(spec: str) -> str:
    """Validate a policy spec (name and options) without a pool; returns its canonical name."""
    base, parsed = parse_scheduler(spec)
    cls, _ = SCHEDULERS.get(base)
    validate(f"scheduler {base!r}", cls.params, parsed)
    return canonical_name(base, parsed)


def scheduler_params(name: str) -> tuple[Param, ...]:
    """The declared parameters of a registered policy (its preset values as defaults)."""
    cls, preset = SCHEDULERS.get(name)
    return tuple(replace(p, default=preset.get(p.name, p.default)) for p in cls.params)


def make_scheduler(name: str, view: PoolView, k: int, T: int, rng: np.random.Generator, **options: Any) -> Scheduler:
    """Build a policy by name (see the module docstring); unknown names or options raise AscpError.

    The instance's `name` is canonical: the registered name, or `base(key=value,...)` with the
    options given in `name` sorted (keyword options do not rename it)."""
    base, parsed = parse_scheduler(name)
    if k < 1 or T < 1:
        raise AscpError(f"scheduler {name!r} needs k >= 1 and T >= 1, got k={k}, T={T}.")
    cls, preset = SCHEDULERS.get(base)
    given = {**parsed, **options}
    embed_fn = given.pop("embed_fn", None)
    checked = validate(f"scheduler {base!r}", cls.params, given)
    if "embed_fn" in inspect.signature(cls.__init__).parameters:
        checked["embed_fn"] = embed_fn
    try:
        return cls(view, k, T, rng, **{**preset, **checked}, name=canonical_name(base, parsed))
    except (TypeError, ValueError) as exc:
        raise AscpError(f"bad option value for scheduler {name!r}: {exc}.") from exc


__all__ = [
    "ALIASES",
    "SCHEDULERS",
    "SCHEDULER_NAMES",
    "Facets",
    "PoolView",
    "RoundFeedback",
    "Scheduler",
    "Selection",
    "ascp_greedy",
    "ascp_objective",
    "build_pool_view",
    "induce_facets",
    "make_scheduler",
    "check_scheduler",
    "parse_scheduler",
    "register_scheduler",
    "scheduler_names",
    "scheduler_params",
    "pool_view_from_embeddings",
]
