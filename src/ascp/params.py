"""Parameters declared once: name, type, default and meaning, validated in one place.

Each scheduler and estimator lists its `params`; `validate` checks the options a user gives
against them (one-sentence `AscpError` naming the field), canonical names are built from them,
and `ascp policies` / `ascp estimators` print them. `is_whole` and `is_number` are the type rules
`validate` applies, for every other place that checks a value a user gave (each with its own sentence).

`name(key=value,...)` is written by `canonical_name` and read back by `parse_name` (the one parser
of such names: scheduler specs, condition names); `parse_value` / `format_value` are the option-value
convention both sides share.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from ascp.errors import AscpError


def is_whole(value: object) -> TypeGuard[int]:
    """An integer (Python's or numpy's, which behave as int), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: object, finite: bool = True) -> TypeGuard[float]:
    """A real number (integers included), never a bool; finite unless `finite=False`."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and (not finite or math.isfinite(value)))


def check_text(where: str, value: str) -> str:
    """`value` itself when it is text a model and a file can hold: valid Unicode (an unpaired surrogate,
    what a lone `\\ud800` in JSON or a split emoji leaves, no tokenizer can encode) and no NUL character
    (C libraries and tokenizers cut text there). Otherwise one sentence naming `where` and the position."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AscpError(
            f"{where} holds an unpaired surrogate (invalid Unicode) at character {exc.start} "
            f"({value[exc.start]!r}); remove it or decode the source text as UTF-8 with errors='replace'."
        ) from None
    nul = value.find("\x00")
    if nul >= 0:
        raise AscpError(f"{where} holds a NUL character at character {nul}; remove it from the text.")
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_id(where: str, value: str) -> str:
    """`value` itself when it is usable as an id: `check_text`, and no line break, tab or other control
    character (an id is one field of a TREC run line, a JSONL key and a file name in reports)."""
    check_text(where, value)
    bad = _CONTROL.search(value)
    if bad is not None:
        raise AscpError(f"{where} {value!r} holds a control character ({bad.group()!r}) at character "
                        f"{bad.start()}; give an id without line breaks, tabs or control characters.")
    return value


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
            if not (is_whole(value) or (is_number(value) and float(value).is_integer())):  # 2.0 is whole
                raise bad
            return int(value)
        if self.type is float:
            if not is_number(value, finite=False):
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
    """`base` or `base(key=value,...)` with the options sorted by key and written by `format_value`, so
    `parse_name` and `parse_value` read back the same options."""
    if not options:
        return base
    return base + "(" + ",".join(f"{key}={format_value(val)}" for key, val in sorted(options.items())) + ")"


_SPEC = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*(?:\((.*)\))?\s*$")


def parse_name(spec: object, what: str, example: str) -> tuple[str, list[tuple[str, str]]]:
    """`name` or `name(key=value,...)` -> (name, [(key, value text), ...] in the order written; keys
    stripped, values as written). Malformed text raises one sentence naming `what` ("scheduler") and
    showing `example` ("ascp(kappa=1)")."""
    match = _SPEC.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise AscpError(f"malformed {what} {spec!r}; write e.g. {example}.")
    pairs = []
    for part in filter(str.strip, (match.group(2) or "").split(",")):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise AscpError(f"malformed option {part.strip()!r} in {what} {spec!r}; write key=value.")
        pairs.append((key.strip(), value))
    return match.group(1), pairs


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


def format_value(value: Any) -> str:
    """The canonical text of an option value, which `parse_value` reads back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, float):
        return repr(float(value))  # numpy floats too: their repr names the type
    return str(value)


def describe(params: Sequence[Param]) -> list[tuple[str, str, str, str]]:
    """(name, type, default, meaning) per parameter, for listings."""
    return [(p.name, p.type_name, "none" if p.default is None else str(p.default), p.help) for p in params]


def refused_value(param: Param) -> object:
    """A value `validate` must refuse for `param` (what the contract tests feed every declared option)."""
    if param.type is str:
        return "no-such-choice" if param.choices else 12345
    return "not-a-value"
