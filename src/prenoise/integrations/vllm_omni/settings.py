"""The vLLM-Omni plugin's settings, read from the environment of the process that loads it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from prenoise.noise.streams import STREAMS
from prenoise.preparation.prediction import MismatchPolicy

__all__ = [
    "ENABLE_ENV",
    "MISMATCH_ENV",
    "NEXT_OUTPUT_ENV",
    "NOISE_STREAM_ENV",
    "PluginSettings",
    "SettingsError",
]

ENABLE_ENV = "PRENOISE_VLLM_OMNI"
"""`0` turns the plugin off (it installs nothing); `1` or unset: on."""
MISMATCH_ENV = "PRENOISE_VLLM_OMNI_ON_MISMATCH"
"""`serial` (default): a shape the prediction missed runs upstream's serial draw, logged;
`raise`: it raises `PredictionMismatchError`."""
NEXT_OUTPUT_ENV = "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT"
"""`1`: draw output i+1's noise while output i denoises, and a continuation request's window
k+1's while window k denoises (same bits); `0` or unset: serial."""

NOISE_STREAM_ENV = "PRENOISE_VLLM_OMNI_NOISE_STREAM"
"""`native` (default): every draw is local torch's, bit-identical to upstream; `x86` or `libm`:
every CPU-generator noise draw of the covered pipelines is drawn in that named stream
(`prenoise.noise.streams`), the same on x86 and ARM hosts."""

T = TypeVar("T")
_BOOLS = {"0": False, "1": True}
_POLICIES = {"serial": MismatchPolicy.FALLBACK, "raise": MismatchPolicy.RAISE}


class SettingsError(ValueError):
    """An environment variable of the plugin has a value it does not know."""


@dataclass(frozen=True)
class PluginSettings:
    """What the plugin does; `from_env` reads the four `PRENOISE_VLLM_OMNI*` variables."""

    enabled: bool = True
    on_mismatch: MismatchPolicy = MismatchPolicy.FALLBACK
    prepare_next_output: bool = False
    noise_stream: str = "native"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        env = os.environ if environ is None else environ
        return cls(
            enabled=_lookup(env, ENABLE_ENV, _BOOLS, "1"),
            on_mismatch=_lookup(env, MISMATCH_ENV, _POLICIES, "serial"),
            prepare_next_output=_lookup(env, NEXT_OUTPUT_ENV, _BOOLS, "0"),
            noise_stream=_lookup(env, NOISE_STREAM_ENV, {s: s for s in STREAMS}, "native"),
        )

    def describe(self) -> str:
        """The settings as the environment variables that give them, e.g. for a log line."""
        policy = next(name for name, value in _POLICIES.items() if value == self.on_mismatch)
        return (
            f"{ENABLE_ENV}={int(self.enabled)} {MISMATCH_ENV}={policy} "
            f"{NEXT_OUTPUT_ENV}={int(self.prepare_next_output)} "
            f"{NOISE_STREAM_ENV}={self.noise_stream}"
        )


def _lookup(env: Mapping[str, str], name: str, values: Mapping[str, T], default: str) -> T:
    raw = env.get(name, default).strip().lower() or default
    if raw not in values:
        raise SettingsError(f"{name}={env[name]!r}: expected one of {', '.join(values)}")
    return values[raw]
