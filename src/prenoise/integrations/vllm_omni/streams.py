"""MiniMax-H3's serial noise draws in the named noise stream of `PRENOISE_VLLM_OMNI_NOISE_STREAM`.

Under `x86` or `libm` every CPU-generator noise draw MiniMax-H3 makes is drawn in that stream
(`prenoise.noise.streams`): the draws prepared ahead on prenoise's worker
(`RequestPreparation` passes the stream to the Ref2VA streams it submits) and, through
`run_serial`, every draw upstream's own code makes on the request thread — the initial
video/audio noise (`_initial_noise`), the visual-condition noise and the audio-condition noise
(`seed + 1`) of every output, for any request: ineligible ones, continuation windows, encoder-stage
conditioning, step execution, outputs after the first. `run_serial` runs upstream's function
inside a `StreamDrawMode` (the thread-local torch function mode behind
`prenoise.noise.stream_mode.draws_in_stream`), so only those functions pay its per-op cost, never
the denoising loop.

`native` (the default) enters no mode at all: upstream's function runs exactly as without prenoise.
A stream this process's self-check refuses raises `NoiseStreamError` (`require_stream`, at the
start of each request, and the mode itself at the first draw): never silently native.

Not covered (not a CPU-generator noise draw): the video VAE's keyframe/video encode samples its
latent distribution on the global RNG of the VAE's device under a fixed seed inside
`torch.random.fork_rng` (`vae.py`); that draw is the device's arithmetic, not a CPU stream.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prenoise.integrations.vllm_omni.request import RequestPreparation, current_request
from prenoise.integrations.vllm_omni.settings import PluginSettings, SettingsError
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import StreamDrawMode

__all__ = ["current_stream", "require_stream", "run_serial", "serial_draws_served"]

T = TypeVar("T")
_lock = threading.Lock()
_served = 0  # serial draws drawn in a named stream by this process (tests, diagnostics)


def current_stream() -> str:
    """The noise stream of draws on this thread: the running request's setting, else the
    environment's (a draw outside `forward`, e.g. step execution). Bad settings: `native`, as
    the request's other wrappers then run upstream's code only (the error is logged there)."""
    state = current_request()
    if isinstance(state, RequestPreparation):
        return state.settings.noise_stream
    try:
        return PluginSettings.from_env().noise_stream
    except SettingsError:
        return noise_streams.NATIVE


def require_stream(stream: str) -> None:
    """Raise `NoiseStreamError` (saying why) unless this process may draw `stream` (the
    self-check runs once per process); `native` always may."""
    noise_streams.require_usable(stream)


def run_serial(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` with its standard-normal CPU draws in `current_stream()`.

    `native`: a plain call, no mode entered. Otherwise the draws `fn` makes are drawn in the
    stream and counted (the request's `serial_streamed`, and `serial_draws_served`).
    """
    stream = current_stream()
    if stream == noise_streams.NATIVE:
        return fn(*args, **kwargs)
    with _stream_mode(stream):
        return fn(*args, **kwargs)


def serial_draws_served() -> int:
    """How many serial draws this process has drawn in a named stream through `run_serial`."""
    return _served


@contextlib.contextmanager
def _stream_mode(stream: str) -> Iterator[None]:
    global _served
    require_stream(stream)
    mode = StreamDrawMode(stream)
    try:
        with mode:
            yield
    finally:
        if mode.served:
            with _lock:
                _served += mode.served
            state = current_request()
            if isinstance(state, RequestPreparation):
                state.note_serial_streamed(mode.served)
