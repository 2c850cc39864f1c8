"""Context schedulers: `make_scheduler(name, view, k, T, rng, **options)` by canonical name.

Names: the entries of `SCHEDULER_NAMES` (variants are registered names with preset options), an
alias in `ALIASES`, or a name with options in parentheses, `ascp(feedback=uniform,kappa=1)`:
values parse as int, float, true/false, none, or else a bare string. Keyword options override
those in the name. `embed_fn` is accepted by every policy and ignored by those that embed nothing.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import replace
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.params import Param, canonical_name, validate
from ascp.schedulers.ascp import Ascp, ascp_greedy, ascp_objective
from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection
from ascp.schedulers.carriage import Carriage
from ascp.schedulers.dpp import DPP
from ascp.schedulers.facets import Facets, build_pool_view, induce_facets, pool_view_from_embeddings
from ascp.schedulers.mmr import MMR
from ascp.schedulers.pm2 import PM2
from ascp.schedulers.rotate import Rotate
from ascp.schedulers.vanilla import Vanilla
from ascp.schedulers.xquad import XQuAD

_REGISTRY: dict[str, tuple[type[Scheduler], dict[str, Any]]] = {
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
}
SCHEDULER_NAMES: tuple[str, ...] = tuple(_REGISTRY)
ALIASES = {"fixed": "vanilla"}

_SPEC = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*(?:\((.*)\))?\s*$")


def parse_value(text: str) -> Any:
    """int, float, true/false, none, or else the bare string (the option-value convention)."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def parse_scheduler(spec: str) -> tuple[str, dict[str, Any]]:
    """`name` or `name(key=value,...)` -> (registered name, options); raises AscpError when malformed."""
    match = _SPEC.match(spec)
    if match is None:
        raise AscpError(f"malformed scheduler {spec!r}; write a name such as ascp or ascp(feedback=uniform,kappa=1).")
    name, args = match.group(1), match.group(2)
    name = ALIASES.get(name, name)
    if name not in _REGISTRY:
        raise AscpError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULER_NAMES)}.")
    options: dict[str, Any] = {}
    for part in filter(str.strip, (args or "").split(",")):
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise AscpError(f"malformed option {part.strip()!r} in scheduler {spec!r}; write key=value.")
        options[key.strip()] = parse_value(val)
    return name, options


def check_scheduler(spec: str) -> str:
    """Validate a policy spec (name and options) without a pool; returns its canonical name."""
    base, parsed = parse_scheduler(spec)
    cls, _ = _REGISTRY[base]
    validate(f"scheduler {base!r}", cls.params, parsed)
    return canonical_name(base, parsed)


def scheduler_params(name: str) -> tuple[Param, ...]:
    """The declared parameters of a registered policy (its preset values as defaults)."""
    cls, preset = _REGISTRY[ALIASES.get(name, name)]
    return tuple(replace(p, default=preset.get(p.name, p.default)) for p in cls.params)


def make_scheduler(name: str, view: PoolView, k: int, T: int, rng: np.random.Generator, **options: Any) -> Scheduler:
    """Build a policy by name (see the module docstring); unknown names or options raise AscpError.

    The instance's `name` is canonical: the registered name, or `base(key=value,...)` with the
    options given in `name` sorted (keyword options do not rename it)."""
    base, parsed = parse_scheduler(name)
    if k < 1 or T < 1:
        raise AscpError(f"scheduler {name!r} needs k >= 1 and T >= 1, got k={k}, T={T}.")
    cls, preset = _REGISTRY[base]
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
    "scheduler_params",
    "pool_view_from_embeddings",
]
