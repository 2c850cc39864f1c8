"""One registry mechanism for everything a user picks by name with options: estimators, schedulers
and the simulator's consumers.

A `Registry` holds the built-ins (loaded on first use: some import heavy modules) and the
registrations of users and plugins, loads the plugins before any name is resolved, reads
`name(key=value,...)` specs (`ascp.params.parse_name`, the one parser of such text), and words its
refusals the same way for every kind: an unknown name (with the valid ones), a malformed name, a
name taken by a built-in, an alias or another registration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from ascp.errors import AscpError
from ascp.params import parse_name, parse_value

E = TypeVar("E")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
"""What a registered name may be: letters, digits, '-' and '_', starting with a letter or digit."""


class Registry(Generic[E]):
    """Names -> entries of one kind, built-ins first, in registration order after them.

    kind: what the names name in sentences ("estimator", "scheduler", "consumer"); noun: what one
    entry is called ("estimator", "policy"); example: a spec written the way it reads; builtin_names
    and builtins: the built-in names, and a function giving their entries (called once, when an
    entry is first needed); aliases: other names of built-ins."""

    def __init__(self, kind: str, noun: str, example: str, builtin_names: tuple[str, ...],
                 builtins: Callable[[], Mapping[str, E]], aliases: Mapping[str, str] | None = None,
                 plugins: bool = True) -> None:
        self.kind, self.noun, self.example = kind, noun, example
        self.builtin_names = builtin_names
        self._load_builtins = builtins
        self._builtins: dict[str, E] | None = None
        self._registered: dict[str, E] = {}
        self.aliases = dict(aliases or {})
        self._plugins = plugins

    def _load_plugins(self) -> None:
        if self._plugins:
            from ascp.plugins import load_plugins

            load_plugins()

    def names(self) -> tuple[str, ...]:
        """Every name, built-ins first, plugins loaded."""
        self._load_plugins()
        return (*self.builtin_names, *self._registered)

    def entries(self) -> dict[str, E]:
        """Every entry by name, built-ins first, plugins loaded."""
        self._load_plugins()
        if self._builtins is None:
            self._builtins = dict(self._load_builtins())
        return {**self._builtins, **self._registered}

    def canonical(self, name: str) -> str:
        """`name` with an alias resolved."""
        return self.aliases.get(name, name)

    def get(self, name: str) -> E:
        """The entry of `name` (an alias resolved), or one sentence listing the valid names."""
        entries = self.entries()
        name = self.canonical(name)
        if name not in entries:
            raise AscpError(f"unknown {self.kind} {name!r}; choose one of {', '.join(entries)}.")
        return entries[name]

    def parse(self, spec: object) -> tuple[str, dict[str, Any]]:
        """`name` or `name(key=value,...)` -> (the registered name, the options as written, values read by
        `parse_value`); a malformed spec or an unknown name is one sentence."""
        name, pairs = parse_name(spec, self.kind, self.example)
        name = self.canonical(name)
        self.get(name)
        return name, {key: parse_value(value) for key, value in pairs}

    def is_builtin(self, name: str) -> bool:
        return name in self.builtin_names

    def registered(self, name: str) -> E | None:
        """The user's registration under `name`, if any."""
        return self._registered.get(name)

    def registrations(self) -> dict[str, E]:
        """A copy of the users' registrations, in order (what `restore` takes back: tests, sandboxes)."""
        return dict(self._registered)

    def restore(self, registrations: Mapping[str, E]) -> None:
        """Make `registrations` the users' registrations again."""
        self._registered = dict(registrations)

    def check_name(self, name: object) -> None:
        """One sentence for a name that is no registrable name."""
        if not isinstance(name, str) or not NAME.match(name):
            raise AscpError(f"malformed {self.kind} name {name!r}: use letters, digits, '-' and '_', starting with a "
                            f"letter or digit (such as my-{self.noun}).")

    def add(self, name: str, entry: E, same_as: Callable[[E], bool] = lambda old: False,
            owner: Callable[[E], str] = repr) -> None:
        """Register `entry` under `name`. Refused in one sentence: a malformed name, an alias, a built-in's
        name, or a name registered before for an entry that `same_as` does not accept as this one (a
        re-registration of the same entry is a no-op)."""
        self.check_name(name)
        taken = (f"an alias of {self.aliases[name]!r}" if name in self.aliases
                 else f"a built-in {self.noun}" if self.is_builtin(name) else None)
        old = self._registered.get(name)
        if taken is None and old is not None and not same_as(old):
            taken = owner(old)
        if taken is not None:
            raise AscpError(f"{self.kind} name {name!r} is taken ({'' if taken.startswith('an alias') else 'by '}"
                            f"{taken}); register yours under another name.")
        self._registered[name] = entry


__all__ = ["NAME", "Registry"]
