"""The one exception type a user can cause: its message is a single sentence for stderr."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class AscpError(Exception):
    """Bad input or configuration: what is wrong, where, and how to fix it, in one sentence.

    The command line prints the message alone (no traceback) and exits with code 2.
    """


class DiskError(AscpError):
    """A write that the disk refused (full, read-only, no permission): one sentence naming the file.

    Writers that can go on without the file (a cache) catch this one; everything else stops.
    """


def raised_error(call: Callable[..., object], *args: Any, **kwargs: Any) -> AscpError | None:
    """The `AscpError` that `call(*args, **kwargs)` raises, or None when it returns (contract tests'
    way to assert a refusal and read its sentence); any other exception propagates."""
    try:
        call(*args, **kwargs)
    except AscpError as exc:
        return exc
    return None
