"""Parameters declared once: name, type, default and meaning, validated in one place.

Each scheduler and estimator lists its `params`; `validate` checks the options a user gives
against them (one-sentence `AscpError` naming the field), canonical names are built from them,
and `ascp policies` / `ascp estimators` print them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascp.errors import AscpError


@dataclass(frozen=True)
class Param:
    name: str
    type: type  # int, float, bool or str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    optional: bool = False  # None is a valid value

    @property
    def type_name(self) -> str:
        base = "|".join(self.choices) if self.choices else self.type.__name__
        return f"{base} or none" if self.optional else base

    def coerce(self, owner: str, value: Any) -> Any:
        """The value as this parameter's type, or a one-sentence error naming owner and field."""
        if value is None and self.optional:
            return None
        bad = AscpError(f"bad option value for {owner}: {self.name}={value!r} must be {self.type_name} ({self.help}).")
        if self.type is bool:
            if isinstance(value, bool):
                return value
            raise bad
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
                raise bad
            return int(value)
        if self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad
            return float(value)
        if not isinstance(value, str) or (self.choices and value not in self.choices):
            raise bad
        return value


def validate(owner: str, params: Sequence[Param], given: Mapping[str, Any]) -> dict[str, Any]:
    """The given options, checked and coerced; unknown names raise with the valid ones listed."""
    by_name = {p.name: p for p in params}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        valid = ", ".join(by_name) or "none"
        raise AscpError(f"unknown option(s) {', '.join(unknown)} for {owner}; valid options: {valid}.")
    return {name: by_name[name].coerce(owner, value) for name, value in given.items()}


def canonical_name(base: str, options: Mapping[str, Any]) -> str:
    """`base` or `base(key=value,...)` with the options sorted by key."""
    if not options:
        return base
    return base + "(" + ",".join(f"{key}={val}" for key, val in sorted(options.items())) + ")"


def describe(params: Sequence[Param]) -> list[tuple[str, str, str, str]]:
    """(name, type, default, meaning) per parameter, for listings."""
    return [(p.name, p.type_name, "none" if p.default is None else str(p.default), p.help) for p in params]


def refused_value(param: Param) -> object:
    """A value `validate` must refuse for `param` (what the contract tests feed every declared option)."""
    if param.type is str:
        return "no-such-choice" if param.choices else 12345
    return "not-a-value"
