"""`PRENOISE_SGLANG_NOISE_STREAM`: SGLang's noise drawn in a named noise stream (opt-in).

This module holds the setting and MiniMax-H3's draw sites; Wan, HunyuanVideo and LTX-2's are in
`latents_streams` (every other pipeline's request fails under a named stream).

`native` (the default): nothing changes — every draw is local torch's, bit for bit upstream's.
`x86` or `libm`: every MiniMax-H3 draw site the plugin covers is drawn in that stream of
`prenoise.noise.streams` (`x86`: the bits torch's CPU generator gives on an x86 AVX2 host;
`libm`: the bits of a libm host such as aarch64; each reproduced on any host):

- the initial video and audio noise and the visual-condition noise — the draws prepared on
  prenoise's worker are drawn in the stream, and where one is not served, upstream's own serial
  draw runs inside a `StreamDrawMode` (`run_in_stream`);
- the audio-condition noise (drawn by upstream only below an `audio_cond_noise_aug` of 1.0):
  upstream's function in the stream;
- the VAE posterior samples of keyframes, reference images and reference videos: upstream's
  encode functions in the stream (the default CPU generator upstream seeds to 42 inside its
  `fork_rng`, consumed as torch consumes it; the global RNG restored by upstream as ever);
- the rollout per-step noise (`h3_rollout`), including a rollout whose generator is on a device
  (CUDA): its noise then comes from a CPU generator seeded with the device generator's
  `initial_seed()`, one continuing stream copied to the device once per step.

Never silently native: a value other than these three is refused at `register` (one ERROR line,
nothing registered) and, set later in a process, fails each request with `NoiseStreamError`; a
stream this process's self-check refuses fails the request at its entry; a draw the stream
cannot serve raises `NoiseStreamError` naming it.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import StreamDrawMode
from prenoise.noise.streams import NATIVE, STREAMS, NoiseStreamError

__all__ = [
    "NOISE_STREAM_ENV",
    "NoiseStreamError",
    "current_stream",
    "request_stream",
    "run_in_stream",
    "setting",
]

T = TypeVar("T")

NOISE_STREAM_ENV = "PRENOISE_SGLANG_NOISE_STREAM"
"""`native` (default): local torch's draws, bit-identical to upstream; `x86` or `libm`: every
noise draw of the pipelines the plugin covers (MiniMax-H3, Wan, HunyuanVideo, LTX-2) is drawn
in that named stream, the same on any host."""

_request: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "prenoise_sglang_noise_stream", default=None
)


def setting(environ: Mapping[str, str] | None = None) -> str:
    """The stream `PRENOISE_SGLANG_NOISE_STREAM` names (unset or empty: `native`); a value
    other than `native`, `x86`, `libm` raises `NoiseStreamError` naming the variable."""
    env = os.environ if environ is None else environ
    raw = env.get(NOISE_STREAM_ENV, "").strip().lower() or NATIVE
    if raw not in STREAMS:
        raise NoiseStreamError(
            f"{NOISE_STREAM_ENV}={env.get(NOISE_STREAM_ENV)!r}: expected one of "
            f"{', '.join(STREAMS)}"
        )
    return raw


def current_stream() -> str:
    """The stream of draws on this thread: the running request's (`request_stream`), else the
    environment's (a stage called outside a pipeline's `forward`). Raises `NoiseStreamError` for
    a bad value: never silently native."""
    stream = _request.get()
    return setting() if stream is None else stream


@contextmanager
def request_stream(stream: str) -> Iterator[str]:
    """Fix `stream` for the request run inside the block, after checking this process may draw
    it (`NoiseStreamError` otherwise: the request fails before anything is drawn)."""
    noise_streams.require_usable(stream)
    token = _request.set(stream)
    try:
        yield stream
    finally:
        _request.reset(token)


def run_in_stream(stream: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` with its standard-normal CPU draws drawn in `stream`: a plain call
    for `native` (no mode entered); otherwise inside a thread-local `StreamDrawMode`, so a draw
    the stream cannot serve raises `NoiseStreamError`."""
    if stream == NATIVE:
        return fn(*args, **kwargs)
    noise_streams.require_usable(stream)
    with StreamDrawMode(stream):
        return fn(*args, **kwargs)
