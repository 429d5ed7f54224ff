"""Draw every standard-normal CPU draw of a block of code in a named noise stream.

`draws_in_stream(stream)` is a context manager for code prenoise does not own (a vLLM-Omni
pipeline's latent preparation, a diffusers pipeline that calls `torch.randn` itself): inside it,
on the calling thread only, each of these calls is drawn in `stream` (`prenoise.noise.streams`)
instead of local torch's arithmetic:

* `torch.randn(*size, generator=, out=, dtype=, layout=, device=, requires_grad=, pin_memory=)`
  (diffusers' `randn_tensor` calls it);
* `torch.randn_like(input, generator=, dtype=, layout=, device=, requires_grad=, memory_format=)`;
* `Tensor.normal_()` and `torch.nn.init.normal_()` with `mean=0`, `std=1`.

What is bitwise-guaranteed: a call served here returns what torch returns for the same arguments
when torch's CPU arithmetic is `stream`'s, with the generator left exactly where torch leaves
it (same MT19937 consumption; torch's scalar path for fewer than 16 values or a non-contiguous
output, which is the same on every CPU). With `"native"` nothing is intercepted at all.

Never silently native: a normal draw the stream cannot serve raises `NoiseStreamError` naming
the call — a generator or output on another device, a layout other than strided, named tensors,
`normal_` with another mean or std, `torch.normal`, the other non-uniform distributions
whose CPU arithmetic differs between hosts (`log_normal_`, `exponential_`, `cauchy_`) and
`torch.nn.init`'s other normal initializers. Uniform
and integer draws (`rand`, `randint`, `uniform_`, `randperm`, ...) are MT19937 integer
arithmetic, the same on every CPU: they run as torch runs them. A stream that fails its
self-check raises `NoiseStreamError` at the first draw.

The mode is thread-local (torch's function-mode stack is): a prenoise worker drawing in parallel
is unaffected, and so is every other thread of the process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from prenoise.noise import streams as noise_streams
from prenoise.noise.streams import NoiseStreamError

__all__ = ["StreamDrawMode", "draws_in_stream"]

_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
_REFUSED = {
    torch.normal: "torch.normal",
    torch.Tensor.log_normal_: "Tensor.log_normal_",
    torch.Tensor.exponential_: "Tensor.exponential_",
    torch.Tensor.cauchy_: "Tensor.cauchy_",
    # torch.nn.init's normal initializers dispatch on their own (the mode sees them, not the
    # normal_ they call, which then runs unseen) with a std other than 1
    torch.nn.init.xavier_normal_: "torch.nn.init.xavier_normal_",
    torch.nn.init.kaiming_normal_: "torch.nn.init.kaiming_normal_",
    torch.nn.init.trunc_normal_: "torch.nn.init.trunc_normal_",
    torch.nn.init.orthogonal_: "torch.nn.init.orthogonal_",
    torch.nn.init.sparse_: "torch.nn.init.sparse_",
}


@contextlib.contextmanager
def draws_in_stream(stream: str) -> Iterator[None]:
    """Within the block, this thread's standard-normal CPU draws are drawn in `stream`.

    `"native"` installs nothing (local torch draws, untouched). A non-native stream's self-check
    runs first, so a refused stream raises `NoiseStreamError` before the block runs.
    """
    if noise_streams.check_stream_name(stream) == noise_streams.NATIVE:
        yield
        return
    noise_streams.require_usable(stream)
    with StreamDrawMode(stream):
        yield


class StreamDrawMode(TorchFunctionMode):
    """The torch function mode behind `draws_in_stream` (see the module docstring)."""

    def __init__(self, stream: str) -> None:
        super().__init__()
        self.stream = noise_streams.check_stream_name(stream)
        self.served = 0  # draws drawn in the stream (tests and log lines read it)

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.randn:
            return self._randn(args, kwargs)
        if func is torch.randn_like:
            return self._randn_like(args, kwargs)
        if func is torch.Tensor.normal_:
            return self._normal_(args, kwargs, in_place_under_grad=torch.is_grad_enabled())
        if func is torch.nn.init.normal_:  # fills under no_grad, as nn.init does
            return self._normal_(args, kwargs, in_place_under_grad=False)
        if func in _REFUSED:
            raise NoiseStreamError(
                f"{_REFUSED[func]} is not drawn in noise stream {self.stream!r} (only randn, "
                "randn_like and normal_(0, 1) are); its result would differ between hosts"
            )
        return func(*args, **kwargs)

    # -- the three served calls -------------------------------------------------------------

    def _randn(self, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.Tensor:
        size = _size(args, kwargs.pop("size", None))
        out = kwargs.pop("out", None)
        generator = kwargs.pop("generator", None)
        requires_grad = bool(kwargs.pop("requires_grad", False))
        pin_memory = bool(kwargs.pop("pin_memory", False))
        dtype = kwargs.pop("dtype", None)
        layout = kwargs.pop("layout", None)
        device = kwargs.pop("device", None)
        if kwargs.pop("names", None) is not None:
            raise NoiseStreamError("torch.randn: named tensors are not drawn in a noise stream")
        _refuse_unknown("torch.randn", kwargs)
        _check_layout("torch.randn", layout)
        if out is not None:
            if dtype is not None and dtype != out.dtype:
                raise NoiseStreamError(f"torch.randn: dtype {dtype} differs from out's {out.dtype}")
            if tuple(out.shape) != size:
                out.resize_(size)  # as torch does for an out= of another shape
            target = out
        else:
            dtype = torch.get_default_dtype() if dtype is None else dtype
            where = torch.device(device) if device is not None else torch.get_default_device()
            self._check_target("torch.randn", where, dtype, generator)
            target = torch.empty(size, dtype=dtype, device=where)
        self._fill(target, generator, "torch.randn")
        if pin_memory:
            target = target.pin_memory()
        return target.requires_grad_(requires_grad) if requires_grad else target

    def _randn_like(self, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.Tensor:
        source = args[0] if args else kwargs.pop("input")
        generator = kwargs.pop("generator", None)
        requires_grad = bool(kwargs.pop("requires_grad", False))
        dtype = kwargs.pop("dtype", None) or source.dtype
        layout = kwargs.pop("layout", None)
        device = kwargs.pop("device", None)
        memory_format = kwargs.pop("memory_format", torch.preserve_format)
        _refuse_unknown("torch.randn_like", kwargs)
        _check_layout("torch.randn_like", layout if layout is not None else source.layout)
        where = torch.device(device) if device is not None else source.device
        self._check_target("torch.randn_like", where, dtype, generator)
        target = torch.empty_like(source, dtype=dtype, device=where, memory_format=memory_format)
        self._fill(target, generator, "torch.randn_like")
        return target.requires_grad_(requires_grad) if requires_grad else target

    def _normal_(
        self, args: Sequence[Any], kwargs: dict[str, Any], *, in_place_under_grad: bool
    ) -> torch.Tensor:
        target = args[0] if args else kwargs.pop("tensor" if "tensor" in kwargs else "self")
        mean = args[1] if len(args) > 1 else kwargs.pop("mean", 0.0)
        std = args[2] if len(args) > 2 else kwargs.pop("std", 1.0)
        generator = kwargs.pop("generator", None)
        _refuse_unknown("Tensor.normal_", kwargs)
        if float(mean) != 0.0 or float(std) != 1.0:
            raise NoiseStreamError(
                f"Tensor.normal_(mean={mean}, std={std}) is not drawn in noise stream "
                f"{self.stream!r} (only mean 0, std 1 is); its result would differ between hosts"
            )
        _check_layout("Tensor.normal_", target.layout)
        if target.requires_grad and in_place_under_grad:
            raise NoiseStreamError(
                "Tensor.normal_ on a tensor that requires grad (outside no_grad) is not drawn "
                "in a noise stream"
            )
        self._check_target("Tensor.normal_", target.device, target.dtype, generator)
        self._fill(target.detach(), generator, "Tensor.normal_")  # same storage, no autograd
        return target

    # -- shared checks and the fill ---------------------------------------------------------

    def _check_target(
        self, call: str, device: torch.device, dtype: torch.dtype, generator: Any
    ) -> None:
        gen_device = generator.device.type if isinstance(generator, torch.Generator) else "cpu"
        if device.type != "cpu" or gen_device != "cpu":
            raise NoiseStreamError(
                f"{call}: noise stream {self.stream!r} draws on the CPU with a CPU generator, "
                f"not on {device} with a {gen_device} generator; pass a CPU generator "
                "(e.g. vLLM-Omni's generator_device='cpu') or use the native stream"
            )
        if dtype not in _FLOATS:
            raise NoiseStreamError(
                f"{call}: noise stream {self.stream!r} draws {', '.join(map(str, _FLOATS))}, "
                f"not {dtype}"
            )

    def _fill(self, target: torch.Tensor, generator: Any, call: str) -> None:
        gen = torch.default_generator if generator is None else generator
        if not isinstance(gen, torch.Generator):
            raise NoiseStreamError(f"{call}: generator {generator!r} is not a torch.Generator")
        self._check_target(call, target.device, target.dtype, gen)
        with torch.no_grad():
            noise_streams.fill_(target, gen, self.stream)
        self.served += 1


def _size(args: Sequence[Any], size: Any) -> tuple[int, ...]:
    """torch.randn's size: varargs ints, one sequence (or torch.Size), or `size=`."""
    given = size if size is not None else args
    if len(given) == 1 and isinstance(given[0], Sequence):
        given = given[0]
    return tuple(int(s) for s in given)


def _check_layout(call: str, layout: Any) -> None:
    if layout not in (None, torch.strided):
        raise NoiseStreamError(f"{call}: noise streams draw strided tensors, not {layout}")


def _refuse_unknown(call: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise NoiseStreamError(
            f"{call}: arguments {sorted(kwargs)} are not drawn in a noise stream"
        )
