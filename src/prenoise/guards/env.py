"""Environment variables prenoise reads, parsed in one place: an unknown value is an error
naming the variable and its accepted values, never a silent default.

`VARIABLES` lists every `PRENOISE_*` variable the package reads; `check_environment()` checks
them all at once, so a command (`prenoise serve` included) refuses a bad value at start-up
instead of when (or if) some request first reads it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VARIABLES", "EnvVar", "EnvVarError", "check_environment", "env_choice"]


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


@dataclass(frozen=True)
class EnvVar:
    """One variable prenoise reads: its accepted values (None: an existing directory)."""

    name: str
    choices: tuple[str, ...] | None
    default: str

    def check(self) -> None:
        """Raise :class:`EnvVarError` (one line: name, value, accepted values) if it is bad."""
        if self.choices is not None:
            env_choice(self.name, self.choices, self.default)
            return
        raw = os.environ.get(self.name)
        if raw is not None and not Path(raw).is_dir():
            raise EnvVarError(
                f"{self.name}={raw!r} is not a directory "
                f"(accepted: an existing directory; unset means {self.default})"
            )


_BOOL = ("0", "1")
# The readers keep their own names for these (kernel.py, noise_streams.py, executor.py,
# distributed/shm.py, integrations/vllm_omni/settings.py); tests/serve/test_env_startup.py
# checks that this table names every PRENOISE_* variable in the package, with the same values.
VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("PRENOISE_DEBUG", _BOOL, "0"),
    EnvVar("PRENOISE_DEBUG_RNG", _BOOL, "0"),
    EnvVar(
        "PRENOISE_NOISE_BACKEND",
        ("auto", "torch", "avx512-fma", "avx2-fma", "scalar-libm"),
        "auto",
    ),
    EnvVar("PRENOISE_HUGE_PAGES", _BOOL, "1"),
    EnvVar("PRENOISE_X86_STREAM_IMPL", ("auto", "portable"), "auto"),
    EnvVar("PRENOISE_SHM_DIR", None, "/dev/shm"),
    EnvVar("PRENOISE_VLLM_OMNI", _BOOL, "1"),
    EnvVar("PRENOISE_VLLM_OMNI_ON_MISMATCH", ("serial", "raise"), "serial"),
    EnvVar("PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT", _BOOL, "0"),
    EnvVar("PRENOISE_VLLM_OMNI_NOISE_STREAM", ("native", "x86", "libm"), "native"),
    EnvVar("PRENOISE_NOISE_RECORD", None, "no noise record"),
)
"""Every `PRENOISE_*` variable the package reads."""


def check_environment() -> None:
    """Raise :class:`EnvVarError` for the first variable of `VARIABLES` with a bad value."""
    for variable in VARIABLES:
        variable.check()
