"""Environment variables prenoise reads, parsed in one place: an unknown value is an error
naming the variable and its accepted values, never a silent default."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["EnvVarError", "env_choice"]


class EnvVarError(ValueError):
    """An environment variable prenoise reads has a value it does not accept."""


def env_choice(name: str, choices: Sequence[str], default: str) -> str:
    """The value of `name`, lower-cased and stripped; `default` when unset or empty.

    Raises :class:`EnvVarError` when the value is not one of `choices`.
    """
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value not in choices:
        accepted = ", ".join(choices)
        raise EnvVarError(
            f"{name}={raw!r} is not a known value (accepted: {accepted}; unset means {default})"
        )
    return value
