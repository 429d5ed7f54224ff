"""MiniMax-H3's rollout (RL) per-step noise drawn one step ahead, for one denoise loop.

SGLang 0.5.23 draws it in `minimax_h3_rollout.minimax_h3_rollout_update_video_target(video_target,
velocity, *, sigma_curr, sigma_next, batch, generator, loop_step_index, noise_buffer)`, once per
stochastic step of `minimax_h3_denoise_loop` (`_effective_sde_type(batch, step)` is `sde` or
`cps` and `rollout_noise_level` is not 0): `torch.randn(sample.shape, generator=generator,
device=sample.device, dtype=torch.float32)`, `sample` the video target rows (`[T*H/2*W/2, 96]`
float32), `generator` one `torch.Generator(device=...)` per loop seeded with the request seed —
drawn and used in one body. prenoise does not reproduce that body: `RolloutLoop.update` runs
upstream's own function inside a thread-local torch function mode that answers exactly that one
`torch.randn` call (the first `randn` on the loop's generator in the call) and lets every other
operation run as it is.

The answer comes from the core's `StepLookahead` (one per loop, on a request-owned
`PreparationExecutor` whose thread is `prenoise-sglang-rollout...`). The loop's first draw is
prepared when the loop opens (`_run_full_loop`'s entry, before the layout, the attention
metadata and the first model call), where it is known: the generator will be a CPU generator
(the platform's device is the CPU, or a named stream's CPU stand-in), seeded with the request
seed (`sampling_params.seed`, its first entry for a list) — so its state is a fresh generator's
after `manual_seed(seed)` — and the draw's shape is the video target rows', the shape of the
denoise state's `initial_video_rows`, in float32. It is drawn on the worker from that state and
served to the first draw only when the call's shape and dtype are those and the generator is a
CPU generator in exactly that state (else the plain draw). The next draws are prepared on a
clone of the generator, one after another, and served only when the call has the same key
(shape, dtype, generator) and the generator is, byte for byte, in the state the prepared draw
started from; the generator is then set to the state the plain draw leaves it in. Anything
else — another shape, a step callback drawing from the generator, a failed job, more draws than
`expected_draws` says — ends the look-ahead and the plain draw runs, on this thread, then and
for the rest of the loop. The loop's end (return or raise)
cancels pending draws and joins a running one.

What is bitwise-guaranteed (native stream): with the plugin on and off, every tensor upstream's
update returns, every trajectory latent and log-prob, the generator's final state and the global
RNG are identical, for a CPU generator. A non-CPU (CUDA) generator in the native stream: the mode
is not entered at all; upstream's draw is untouched (nothing can be drawn bit-identically on the
host).

Named streams (`streams`: `x86`, `libm`): every draw — prepared and plain — is drawn in the
stream; for a CPU generator the generator is consumed as torch consumes it. For a device
generator the noise comes from a private CPU generator seeded with the device generator's
`initial_seed()` (one continuing stream per loop, the same on every GPU model and host), drawn
ahead and copied to the device once per step; the device generator itself is not drawn from.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from prenoise.integrations.sglang import h3_record
from prenoise.noise.stream_mode import StreamDrawMode
from prenoise.noise.streams import NATIVE, NoiseStreamError
from prenoise.observe import noise_record
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.lookahead import LookaheadLimits, StepLookahead

__all__ = [
    "EXECUTOR_NAME",
    "LoopObserver",
    "RolloutLoop",
    "current_loop",
    "expected_draws",
    "first_draw",
    "loop_observers",
    "open_loop",
    "update",
]

logger = logging.getLogger("prenoise.sglang")

EXECUTOR_NAME = "prenoise-sglang-rollout"
"""The name of the loop's `PreparationExecutor` (its worker thread's name starts with it)."""
_SIGMAS_KEY = "minimax_h3_sigmas"  # upstream's MINIMAX_H3_SIGMAS_EXTRA_KEY
_UPDATES = ("sde", "cps", "ode")  # what upstream's update accepts (another type raises)

LoopObserver = Callable[["RolloutLoop"], None]
"""Told each `RolloutLoop` when its loop ended (tests, tools): `served`, `drawn`, `left`."""
loop_observers: list[LoopObserver] = []

_loop: contextvars.ContextVar[RolloutLoop | None] = contextvars.ContextVar(
    "prenoise_sglang_rollout_loop", default=None
)


def expected_draws(batch: Any) -> tuple[int | None, str]:
    """How many draws upstream's rollout updates make over the loop of `batch`, by upstream's
    own rule (`_effective_sde_type` of each step of the loop's video sigma schedule, and
    `rollout_noise_level`); `(None, why)` where it cannot be told."""
    try:
        from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.minimax_h3_rollout import (  # noqa: E501
            _effective_sde_type,
        )

        steps = len(batch.extra[_SIGMAS_KEY]["video"]) - 1
        if float(getattr(batch, "rollout_noise_level", 0.0)) == 0.0:
            return 0, ""
        kinds = [_effective_sde_type(batch, step) for step in range(steps)]
    except Exception as error:  # upstream raises its own error, later, in the loop
        return None, f"the rollout's steps cannot be told in advance: {error!r}"
    odd = sorted({k for k in kinds if k not in _UPDATES})
    if odd:
        return None, f"rollout_sde_type {odd[0]!r} is not one upstream updates with"
    return sum(kind != "ode" for kind in kinds), ""


def first_draw(batch: Any, stream: str) -> tuple[tuple[tuple[int, int], int] | None, str]:
    """The first rollout draw of `batch`'s loop as `_run_full_loop` will make it: `((shape,
    seed), "")` — the video target rows' shape (the denoise state's `initial_video_rows`, whose
    rows are exactly the layout's target rows) and the seed the loop's generator is seeded
    with — where it is a CPU generator's (the platform's device is the CPU, or any device in a
    named stream, whose CPU stand-in is seeded with the same seed); `(None, why)` else."""
    from prenoise.integrations.sglang.h3_initial import DENOISE_STATE_KEY

    try:
        rows = batch.extra[DENOISE_STATE_KEY]["initial_video_rows"]
        seed = getattr(batch.sampling_params, "seed", 0)  # upstream's own reading
        if isinstance(seed, list):
            seed = seed[0]
        seed = int(seed)
        if not isinstance(rows, torch.Tensor) or rows.dim() != 2:
            return None, "the denoise state's video rows are not a 2-D tensor"
        if stream == NATIVE:
            from sglang.multimodal_gen.runtime.platforms import current_platform

            device = torch.device(current_platform.get_local_torch_device())
            if device.type != "cpu":
                return None, f"the loop's generator is a {device.type} generator (native stream)"
    except Exception as error:  # upstream's loop raises its own error, or draws plainly
        return None, f"the first rollout draw cannot be told at the loop's start: {error!r}"
    return ((int(rows.shape[0]), int(rows.shape[1])), seed), ""


class _AnswerRandn(TorchFunctionMode):
    """Answers the first `torch.randn(shape, generator=<the loop's>, device=, dtype=)` of one
    update call through `answer`; every other call runs as it is (or, in a named stream, the
    other normal draws inside the stream's own mode)."""

    def __init__(self, generator: torch.Generator, answer: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.generator, self.answer = generator, answer
        self.noise: torch.Tensor | None = None

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if (
            func is torch.randn
            and self.noise is None
            and kwargs.get("generator") is self.generator
            and len(args) == 1
            and isinstance(args[0], torch.Size | tuple)
            and set(kwargs) <= {"generator", "device", "dtype"}
        ):
            shape, dtype, device = tuple(args[0]), kwargs.get("dtype"), kwargs.get("device")
            self.noise = self.answer(shape, dtype, device, lambda: func(*args, **kwargs))
            return self.noise
        return func(*args, **kwargs)


class RolloutLoop:
    """The rollout noise of one denoise loop of one request (see the module docstring).

    `stream`: the noise stream (`native` unless `PRENOISE_SGLANG_NOISE_STREAM` names one). The
    executor starts at the loop's first CPU draw; `finish` ends it."""

    def __init__(
        self, batch: Any, stream: str = NATIVE, limits: LookaheadLimits | None = None
    ) -> None:
        self.batch, self.stream = batch, stream
        self._limits = limits or LookaheadLimits()
        self._lock = threading.Lock()
        self._executor: PreparationExecutor | None = None
        self.lookahead: StepLookahead | None = None
        self._why = ""
        self._host: torch.Generator | None = None  # the CPU stand-in of a device generator
        self._device_generator: torch.Generator | None = None
        self.drawn = 0
        """Draws answered (served or plain)."""
        self.left: str | None = None
        """Why the look-ahead ended early (None: it served every draw it prepared)."""
        self.first_prepared: str | None = None
        """Why the first draw was not prepared at the loop's start (None: it was, or the loop
        draws nothing); `first_ahead` says whether it was served."""

    # -- the look-ahead -------------------------------------------------------------------------

    def _started(self) -> StepLookahead:
        if self.lookahead is None:
            self._executor = PreparationExecutor(name=EXECUTOR_NAME)
            self._executor.__enter__()
            self.lookahead = StepLookahead(
                self._executor, self.stream, self._limits, self._expected, lambda: self._why
            )
        return self.lookahead

    def _expected(self) -> int | None:
        count, self._why = expected_draws(self.batch)
        return count

    def finish(self, exc: tuple[Any, Any, Any] = (None, None, None)) -> None:
        """End the loop's look-ahead (pending draws cancelled, a running one joined) and its
        executor; tell `loop_observers`."""
        with self._lock:
            lookahead, executor = self.lookahead, self._executor
            self._executor = None
        try:
            if lookahead is not None:
                lookahead.finish()
                self.left = lookahead.left
        finally:
            if executor is not None:
                executor.__exit__(*exc)
        for observer in list(loop_observers):
            observer(self)

    @property
    def served(self) -> int:
        return 0 if self.lookahead is None else self.lookahead.served

    @property
    def first_ahead(self) -> bool:
        """Whether the loop's first draw was served from the draw prepared at its start."""
        return self.lookahead is not None and self.lookahead.first_ahead

    def prepare_first(self) -> None:
        """At the loop's start: submit its first draw, where the generator's seed, device and
        the draw's shape are known (see the module docstring); else say why in
        `first_prepared`. Nothing here can change a bit: the draw is served only on the key and
        the exact generator state."""
        count, why = expected_draws(self.batch)
        if not count:
            self.first_prepared = why or None
            return
        first, why = first_draw(self.batch, self.stream)
        if first is None:
            self.first_prepared = why
            return
        shape, seed = first

        def seeded() -> torch.Tensor:
            return torch.Generator(device="cpu").manual_seed(seed).get_state()

        try:
            self._started().prepare_first(shape, None, (torch.float32,), seeded)
        except Exception as error:  # never the request's failure: the plain draw runs
            self.first_prepared = f"the first draw could not be submitted: {error!r}"

    # -- one update call ------------------------------------------------------------------------

    def generator_for(self, generator: torch.Generator) -> torch.Generator | None:
        """The CPU generator this loop draws for `generator` from: itself on the CPU; in a
        named stream, for a device generator, a private CPU generator seeded with its
        `initial_seed()` (the same one for the whole loop); None: upstream's draw untouched."""
        if generator.device.type == "cpu":
            return generator
        if self.stream == NATIVE:
            return None
        if self._host is None:
            self._host = torch.Generator(device="cpu").manual_seed(generator.initial_seed())
            self._device_generator = generator
        elif self._device_generator is not generator:
            raise NoiseStreamError(
                f"noise stream {self.stream!r}: a second device generator in one rollout loop"
            )
        return self._host

    def answer(
        self,
        host: torch.Generator,
        shape: tuple[int, ...],
        dtype: Any,
        device: Any,
        call: Callable[[], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One rollout draw `(shape, dtype)` on `device` from `host` (a CPU generator): served
        by the look-ahead, else drawn plainly here — `call()` (upstream's own call, made under
        the stream's mode by `update`) when given, else `host`'s draw in the loop's stream,
        copied to `device` (the device-generator path)."""

        def plain() -> torch.Tensor:
            with StreamDrawMode(self.stream) if self.stream != NATIVE else _nothing():
                tensor = torch.randn(shape, generator=host, dtype=dtype)
            return tensor.to(device) if device is not None else tensor

        self.drawn += 1  # a device target: drawn on the CPU, copied to it once (`serve`)
        return self._started().serve(shape, (host,), dtype, None, device, call or plain)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def open_loop(batch: Any, stream: str) -> Iterator[RolloutLoop]:
    """The rollout loop of `batch` while the block runs (the Denoising stage's loop); finished
    when the block returns or raises (the original exception propagates)."""
    loop = RolloutLoop(batch, stream)
    token = _loop.set(loop)
    try:
        loop.prepare_first()
        yield loop
    except BaseException as error:
        _loop.reset(token)
        loop.finish((type(error), error, error.__traceback__))
        raise
    _loop.reset(token)
    loop.finish()


def current_loop() -> RolloutLoop | None:
    """The rollout loop open on this thread, if any."""
    return _loop.get()


def update(
    original: Callable[..., Any], stream: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> Any:
    """Upstream's `minimax_h3_rollout_update_video_target(*args, **kwargs)` with its one draw
    answered by the open loop (`open_loop`) of the call's batch, in `stream`.

    Without a loop of that batch: upstream's function itself — inside the stream's mode for a
    named stream (a device generator then raises `NoiseStreamError`)."""
    generator = kwargs.get("generator")
    loop = current_loop()
    if loop is None or kwargs.get("batch") is not loop.batch or len(args) != 2:
        if stream == NATIVE:
            out = original(*args, **kwargs)
        else:
            with StreamDrawMode(stream):
                out = original(*args, **kwargs)
        _record(kwargs, generator, out, None)
        return out
    host = loop.generator_for(generator) if isinstance(generator, torch.Generator) else None
    if host is None or not isinstance(generator, torch.Generator):
        # a device generator in the native stream (or no generator): upstream's, untouched
        out = original(*args, **kwargs)
        _record(kwargs, generator, out, None)
        return out
    own = host is generator  # a CPU generator: the plain draw is upstream's own call

    def answer(s: tuple[int, ...], d: Any, dev: Any, call: Callable[[], Any]) -> torch.Tensor:
        return loop.answer(host, s, d, dev, call if own else None)

    mode = _AnswerRandn(generator, answer)
    # In a named stream, any other normal draw of the body falls to the stream's own mode
    # (below the answering one): drawn in the stream, or `NoiseStreamError`, never native.
    with StreamDrawMode(stream) if stream != NATIVE else _nothing(), mode:
        out = original(*args, **kwargs)
    _record(kwargs, host, out, mode.noise is not None)
    return out


def _record(kwargs: dict[str, Any], generator: Any, out: Any, drew: bool | None) -> None:
    """`noise_record.record_noise` of the step's noise (the returned `noise_buffer`) when a noise
    was drawn at this step and recording is on; nothing otherwise."""
    if not noise_record.recording():
        return
    batch, step = kwargs.get("batch"), kwargs.get("loop_step_index")
    if drew is None:  # not answered by a mode: upstream's own rule says whether it drew
        try:
            from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.minimax_h3_rollout import (  # noqa: E501
                _effective_sde_type,
            )

            level = float(getattr(batch, "rollout_noise_level", 0.0))
            drew = level != 0.0 and _effective_sde_type(batch, step) != "ode"
        except Exception:
            drew = False
    noise = out[3] if isinstance(out, tuple) and len(out) == 4 else None
    if not drew or not isinstance(noise, torch.Tensor):
        return
    seed = generator.initial_seed() if isinstance(generator, torch.Generator) else None
    h3_record.record(batch, "h3.rollout", seed, step if isinstance(step, int) else None, noise)
