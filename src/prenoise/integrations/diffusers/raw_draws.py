"""Raw `torch.randn` draws of planned pipelines, drawn in the call's named noise stream.

With `enable(pipe, stream="x86" | "libm")` every `randn_tensor` draw is made in the stream
(`streams.py`). A planned pipeline that calls `torch.randn` itself is covered by a *window*: a
`prenoise.noise.stream_mode` mode entered on the request thread right after the pipeline method that
precedes the draw returns, serving the next `budget` standard-normal draws in the stream and
passing everything after them through untouched; it is left when the call returns (or raises).
The mode costs ~2 µs per torch op while entered, so a window opens only where the draw follows,
never around the denoising loop.

Covered, diffusers 0.40.0–0.42.1 and any diffusers with the same code around the draw (the
same in all four releases):

- `LTXImageToVideoPipeline`: the decode noise, `torch.randn(latents.shape, generator=generator,
  device=device, dtype=latents.dtype)` inline in `__call__` right after `_denormalize_latents`,
  made when the VAE has `timestep_conditioning` and the output is decoded.

Not covered (local torch draws them, as without prenoise): the LTX / LTX-2 video VAE decoders'
`decoder_inject_noise` draws (global RNG, inside the VAE); schedulers' draws outside
`randn_tensor` (torchsde's Brownian trees in `DPMSolverSDEScheduler` and
`CosineDPMSolverMultistepScheduler`, `ScoreSdeVeScheduler.add_noise`); and pipelines' own
draws outside a window (Helios pyramid `sample_block_noise`, EasyAnimate inpaint
`add_noise_to_reference_video`, SkyReels-V2 diffusion forcing's `addnoise_condition`, Kandinsky
2.2 prior emb2emb). `docs/diffusers.md` lists them. Covering those would need a window around the
denoising loop or the VAE decode (every op there through the mode), so they stay listed.

With `stream="native"` no window is armed and nothing is entered: the enabled subclass still
has the opening wrapper, which then only calls the original method. The opening wrappers are
class attributes of the enabled subclass (`enabling.py`): inert outside a call that armed them (a
context variable), pickled with the class, and independent between concurrent calls of one
pipeline (the torch function mode is thread-local). Each call of the `after` method (a step
callback may call it too) restarts the budget, so the draw after its last call is served.

A window is armed wherever its class's `__call__` (which makes the draw) and `after` method
are the reviewed code (`digests.window_code_problem`), whatever `diffusers.__version__` says,
also where the call itself runs plain (another function its plan relies on changed): drawing a
standard-normal draw in the stream keeps the stream's promise, leaving it to local torch would
not. Where either is not the reviewed code, the window could miss its draw or serve another
one, and where the enabled class has no opening wrapper (the `after` method is missing or of
another kind) it could not open: in both cases the call raises `NoiseStreamError` before it
runs (naming the changed function), never silently native.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.integrations.diffusers.digests import NEXT_STEP, window_code_problem
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import StreamDrawMode
from prenoise.noise.streams import NoiseStreamError

__all__ = ["RawWindow", "active_window", "call_window", "class_overrides", "windows"]


@dataclass(frozen=True)
class RawWindow:
    """`after`: the method whose return opens the window; `budget`: draws it serves;
    `armed(pipe)`: whether the call makes the draw at all; `what`: the draw, for messages."""

    after: str
    budget: int
    armed: Callable[[Any], bool]
    what: str


def _ltx_i2v_decode_noise(pipe: Any) -> bool:
    vae = getattr(pipe, "vae", None)
    return bool(getattr(getattr(vae, "config", None), "timestep_conditioning", False))


_WINDOWS: dict[str, RawWindow] = {
    "diffusers.pipelines.ltx.pipeline_ltx_image2video.LTXImageToVideoPipeline": RawWindow(
        "_denormalize_latents", 1, _ltx_i2v_decode_noise, "decode noise"
    ),
}


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def windows() -> dict[str, RawWindow]:
    """The covered raw draws by class path (a copy)."""
    return dict(_WINDOWS)


class _WindowMode(StreamDrawMode):
    """`StreamDrawMode` serving its first `budget` draws, then passing every call through."""

    def __init__(self, stream: str, budget: int) -> None:
        super().__init__(stream)
        self.budget = budget

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        generator = kwargs.get("generator")
        if self.served >= self.budget or not (
            generator is None or isinstance(generator, torch.Generator)
        ):  # spent, or a generator torch itself refuses (e.g. a list): torch's own error
            return func(*args, **kwargs)
        device = kwargs.get("device")
        if (
            func is torch.randn
            and generator is None
            and kwargs.get("out") is None
            and not kwargs.get("requires_grad")
            and not kwargs.get("pin_memory")
            and device is not None
            and torch.device(device).type != "cpu"
        ):  # no generator: the default CPU one, moved to `device`, as `stream_randn_tensor` does
            kwargs["device"] = "cpu"
            drawn = super().__torch_function__(func, types, args, kwargs)
            return drawn.to(device)
        return super().__torch_function__(func, types, args, kwargs)


class CallWindow:
    """One call's armed window: opened by the `after` method, left by `active_window`."""

    def __init__(self, stream: str, window: RawWindow) -> None:
        self.stream = stream
        self.window = window
        self._stack = ExitStack()
        self._mode: _WindowMode | None = None

    @property
    def served(self) -> int:
        """Raw draws drawn in the stream so far."""
        return 0 if self._mode is None else self._mode.served

    def open(self) -> None:
        """Enter the mode (first time) or restart its budget (each later call of `after`)."""
        if self._mode is None:
            self._mode = self._stack.enter_context(_WindowMode(self.stream, self.window.budget))
        else:
            self._mode.budget = self._mode.served + self.window.budget

    def close(self) -> None:
        self._stack.close()


_armed: contextvars.ContextVar[CallWindow | None] = contextvars.ContextVar(
    "prenoise_diffusers_raw_window", default=None
)


def call_window(cls: type, pipe: Any, stream: str) -> CallWindow | None:
    """The window a call of `pipe` (class `cls`) in `stream` arms, or None.

    None for the native stream, a class without a covered raw draw, or a call that will not
    make it. `NoiseStreamError` (before the call runs) when the stream is refused, the code
    around the draw is not the reviewed code, or the window could not open because
    `type(pipe)` lacks the opening wrapper.
    """
    window = _WINDOWS.get(_path(cls))
    if window is None or stream == noise_streams.NATIVE or not window.armed(pipe):
        return None
    noise_streams.require_usable(stream)  # a refused stream raises before the call runs
    changed = window_code_problem(cls, window.after)
    if changed is not None:
        raise NoiseStreamError(
            f"{cls.__name__}: its {window.what} (a raw torch.randn) cannot be drawn in noise "
            f"stream {stream!r}: {changed}; refusing rather than drawing it natively; "
            f"{NEXT_STEP}"
        )
    opener = inspect.getattr_static(type(pipe), window.after, None)
    if not getattr(getattr(opener, "__func__", opener), _OPENS, False):
        raise NoiseStreamError(
            f"{cls.__name__}: its {window.what} (a raw torch.randn) cannot be drawn in noise "
            f"stream {stream!r}: {type(pipe).__name__}.{window.after} is not prenoise's opening "
            "wrapper (a missing or changed method); refusing rather than drawing it natively"
        )
    return CallWindow(stream, window)


@contextmanager
def active_window(window: CallWindow | None) -> Iterator[None]:
    """Arm `window` for this context's call; leave its mode (if opened) when the block ends."""
    if window is None:
        yield
        return
    token = _armed.set(window)
    try:
        yield
    finally:
        _armed.reset(token)
        window.close()


_OPENS = "_prenoise_opens_window"


def _opening(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def opened_after(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        window = _armed.get()
        if window is not None:
            window.open()
        return result

    setattr(opened_after, _OPENS, True)
    return opened_after


def class_overrides(cls: type) -> dict[str, Any]:
    """Attributes the enabled subclass of `cls` adds: the wrapped `after` method, if any."""
    window = _WINDOWS.get(_path(cls))
    if window is None:
        return {}
    static = inspect.getattr_static(cls, window.after, None)
    if isinstance(static, staticmethod):
        return {window.after: staticmethod(_opening(static.__func__))}
    if inspect.isfunction(static):
        return {window.after: _opening(static)}
    return {}  # the method is missing or of another kind: no window (the draw stays local)
