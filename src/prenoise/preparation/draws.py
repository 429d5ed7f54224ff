"""Declarative, exact descriptions of CPU random-normal draws.

A `Draw` says what a caller's serial code draws (shape, dtype, an optional kept prefix and a layout
transform); a `Stream` is several draws in order on one generator; a `NoisePlan` is a set of
independent streams. Running them reproduces the equivalent plain torch code bit-for-bit — values
and the generator's final state — in the same process on the same machine. Nothing here touches
the global RNG.

Why buffers are preallocated and filled: a fresh multi-MB tensor pays page faults on first touch;
filling a buffer allocated off the critical path (or reused) keeps that cost where it is hidden.
Filling contiguous flat chunks of one buffer with `normal_` reproduces a one-shot draw exactly when
every chunk but the last is a multiple of 16 elements and the last has at least 16
(`docs/background/torch-cpu-normal.md`, "Chunking").

Noise streams: every run takes a `noise_stream` ("native" by default: local torch's arithmetic;
"x86" or "libm" for the named cross-machine streams of `prenoise.noise.streams`). A `NoisePlan`
records its stream; the serial code a non-native run reproduces is torch on a host that draws
that stream.

Bounds: a draw whose buffer (what the serial code allocates) cannot fit the memory available is
refused before anything is allocated (`BudgetExceededError`), and a `NoisePlan` can be given a
byte budget (`max_bytes`). Runs given a `cancel` event fill in chunks of `CANCEL_CHUNK_ELEMS`
and stop between chunks once it is set (`prenoise.guards.cancel.Cancelled`); the values of a run
that completes are the same bits either way.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from prenoise.guards.budget import BudgetExceededError, format_bytes, require_fits
from prenoise.guards.cancel import CancelEvent, raise_if_cancelled
from prenoise.guards.seeds import check_seed_range
from prenoise.guards.sizes import exact_int, exact_ints
from prenoise.noise import kernel, normal
from prenoise.noise import streams as noise_streams
from prenoise.noise.chunks import CANCEL_CHUNK_ELEMS, VECTOR_BLOCK, chunk_bounds
from prenoise.noise.layouts import Layout

__all__ = [
    "CANCEL_CHUNK_ELEMS",
    "VECTOR_BLOCK",
    "Draw",
    "HalfDrawRule",
    "NoisePlan",
    "ScalarPathError",
    "Stream",
    "chunk_bounds",
    "fill_normal_",
    "run_draw",
    "run_plan",
    "run_stream",
    "set_fill_backend",
]

_CHECK_MIN_BYTES = 64 << 20
"""Draws allocating less than this skip the available-memory check (it costs a syscall)."""

_HALF_DTYPES = (torch.float16, torch.bfloat16)
_FLOAT_DTYPES = (torch.float32, torch.float64, *_HALF_DTYPES)

FillFn = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def _torch_fill(out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return out.normal_(generator=generator)


def _kernel_fill(out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return kernel.fill_normal_(out, generator)


_fill_backend: FillFn = _kernel_fill


def set_fill_backend(fill: FillFn | None) -> None:
    """Route every contiguous float32 chunk fill through `fill` (None restores the default).

    `fill(out, generator)` must equal `out.normal_(generator=generator)` bit-for-bit, values and
    generator state. The default is `prenoise.noise.kernel.fill_normal_`, which uses the compiled
    kernel only after it passed its per-process self-check against torch (else torch itself).
    """
    global _fill_backend
    _fill_backend = fill or _kernel_fill


class ScalarPathError(ValueError):
    """A draw would take torch's slow, stateful scalar path (numel < 16 or a non-contiguous out)."""


class HalfDrawRule(str, enum.Enum):
    """Which serial code a float16/bfloat16 draw reproduces.

    - `FLOAT32_THEN_CAST`: `torch.randn(shape, dtype=torch.float32, generator=g).to(half)`.
      Always drawn as float32 and cast: identical values and generator state.
    - `NATIVE`: `torch.randn(shape, dtype=half, generator=g)`. Drawn as float32 and cast only when
      `numel % 16 == 0` (then identical, values and state, on torch >= 2.13: checked against local
      torch by `kernel.half_rule_status`); otherwise drawn natively by torch, because the ragged
      tail of a native half draw differs and consumes a different word count (and where local
      torch's half rule is not that one, in one torch call, unchunked).
    """

    FLOAT32_THEN_CAST = "float32_then_cast"
    NATIVE = "native"


@dataclass(frozen=True)
class Draw:
    """One `randn(shape, dtype)` call of the caller's serial code, optionally post-processed.

    `keep` holds prefix lengths for the leading dimensions: the full `shape` is drawn (so the
    generator advances exactly as the serial code's) and `full[:keep[0], :keep[1], ...]` is kept
    (the "dependent noise" policy). `layout` then rearranges the kept values (e.g. `Patchify`).
    The result is contiguous; values equal the serial code's bit-for-bit.

    `shape` and `keep` take integers only (Python or numpy ints; not bools, floats or strings):
    anything else raises `TypeError` naming the field, rather than drawing a coerced size.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    keep: tuple[int, ...] | None = None
    layout: Layout | None = None
    half_rule: HalfDrawRule = HalfDrawRule.FLOAT32_THEN_CAST

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", exact_ints(self.shape, f"draw {self.name!r}: shape"))
        if any(s < 0 for s in self.shape):
            raise ValueError(f"draw {self.name!r}: negative size in shape {self.shape}")
        if not isinstance(self.dtype, torch.dtype):  # 'float32' read as "not floating"
            raise TypeError(f"draw {self.name!r}: dtype must be a torch.dtype, got {self.dtype!r}")
        if self.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"draw {self.name!r}: dtype {self.dtype} is not a floating dtype")
        if self.keep is not None:
            keep = exact_ints(self.keep, f"draw {self.name!r}: keep")
            object.__setattr__(self, "keep", keep)
            if len(keep) > len(self.shape) or any(
                not 0 < k <= s for k, s in zip(keep, self.shape, strict=False)
            ):
                raise ValueError(
                    f"draw {self.name!r}: keep {keep} is not a non-empty prefix of {self.shape}"
                )
        if self.layout is not None:
            self.layout.output_shape(self.kept_shape)

    @property
    def numel(self) -> int:
        """Elements drawn from the generator (the full shape, before `keep`)."""
        return math.prod(self.shape)

    @property
    def kept_shape(self) -> tuple[int, ...]:
        """Shape after the `keep` prefix slice, before the layout."""
        if self.keep is None:
            return self.shape
        return self.keep + self.shape[len(self.keep) :]

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Shape of the tensor `run_draw` returns."""
        if self.layout is None:
            return self.kept_shape
        return self.layout.output_shape(self.kept_shape)

    @property
    def output_nbytes(self) -> int:
        """Bytes of the returned tensor."""
        return math.prod(self.output_shape) * _itemsize(self.dtype)

    @property
    def buffer_nbytes(self) -> int:
        """Bytes of the full draw, as the serial code allocates it (before keep and layout)."""
        return self.numel * _itemsize(self.draw_dtype)

    @property
    def peak_nbytes(self) -> int:
        """Bytes `run_draw` may hold at once: the full buffer plus the result, when separate.

        An upper bound: the keep-prefix path allocates only the kept values.
        """
        returns_buffer = self.keep is None and self.layout is None and not self._casts
        return self.buffer_nbytes + (0 if returns_buffer else self.output_nbytes)

    @property
    def _casts(self) -> bool:
        return self.draw_dtype != self.dtype

    @property
    def takes_scalar_path(self) -> bool:
        """True when torch would draw this with its stateful scalar path (numel < 16)."""
        return self.numel < VECTOR_BLOCK

    @property
    def native_half(self) -> bool:
        """True when the draw must be made by torch directly in a half dtype (see HalfDrawRule)."""
        return (
            self.dtype in _HALF_DTYPES
            and self.half_rule is HalfDrawRule.NATIVE
            and (self.numel % VECTOR_BLOCK != 0 or not kernel.half_rule_status().holds)
        )

    @property
    def draw_dtype(self) -> torch.dtype:
        """dtype the stream is drawn in (float32 for cast half draws)."""
        if self.dtype in _HALF_DTYPES and not self.native_half:
            return torch.float32
        return self.dtype

    @property
    def generator_words(self) -> int | None:
        """32-bit MT19937 words consumed (None on the scalar path: it depends on cached state)."""
        n = self.numel
        if n == 0:
            return 0
        if self.takes_scalar_path:
            return None
        if self.native_half:
            return VECTOR_BLOCK * math.ceil(n / VECTOR_BLOCK)
        words = n + (VECTOR_BLOCK if n % VECTOR_BLOCK else 0)
        return 2 * words if self.dtype == torch.float64 else words


@dataclass(frozen=True)
class Stream:
    """Draws made in order on one generator.

    `source` is either a seed — a fresh `torch.Generator('cpu').manual_seed(seed)` per run — or a
    caller's CPU generator, which is advanced in place exactly as the serial code would advance it.
    `noise_stream` names the arithmetic ("native", "x86", "libm"); None means "native" when run
    alone and the plan's stream inside a `NoisePlan`.
    """

    name: str
    source: int | torch.Generator
    draws: tuple[Draw, ...]
    noise_stream: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "draws", tuple(self.draws))
        if self.noise_stream is not None:
            noise_streams.check_stream_name(self.noise_stream)
        if isinstance(self.source, torch.Generator) and self.source.device.type != "cpu":
            raise ValueError(f"stream {self.name!r}: generator must be on the CPU")
        if not isinstance(self.source, torch.Generator):
            check_seed_range(self.source)  # refused here, not later in a worker's manual_seed
        names = [d.name for d in self.draws]
        if len(set(names)) != len(names):
            raise ValueError(f"stream {self.name!r}: duplicate draw names {names}")

    def generator(self) -> torch.Generator:
        """The generator a run uses: a fresh seeded one, or the caller's object itself."""
        if isinstance(self.source, torch.Generator):
            return self.source
        return torch.Generator("cpu").manual_seed(self.source)

    @property
    def numel(self) -> int:
        """Elements drawn by the stream (before any keep slice)."""
        return sum(d.numel for d in self.draws)

    @property
    def output_nbytes(self) -> int:
        """Bytes of the tensors the stream returns."""
        return sum(d.output_nbytes for d in self.draws)

    @property
    def peak_nbytes(self) -> int:
        """Bytes a run may hold at once: every returned tensor plus the largest draw buffer."""
        return self.output_nbytes + max(
            (d.peak_nbytes - d.output_nbytes for d in self.draws), default=0
        )

    @property
    def generator_words(self) -> int | None:
        """32-bit generator words the stream consumes (None if it has a scalar-path draw)."""
        words = [d.generator_words for d in self.draws]
        return None if None in words else sum(w for w in words if w is not None)


@dataclass(frozen=True)
class NoisePlan:
    """A set of independent streams (never two streams on one generator object).

    Construction refuses draws that would take torch's scalar path unless `allow_scalar_path`,
    and, with `max_bytes`, a plan whose `peak_nbytes` exceeds it (`BudgetExceededError`).
    `noise_stream` is the plan's noise stream ("native", "x86" or "libm"); every stream of the
    plan runs in it, and a stream that names another one is refused.
    """

    streams: tuple[Stream, ...]
    allow_scalar_path: bool = False
    max_bytes: int | None = None
    noise_stream: str = noise_streams.NATIVE
    _draw_names: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", tuple(self.streams))
        if self.max_bytes is not None:
            object.__setattr__(self, "max_bytes", exact_int(self.max_bytes, "max_bytes"))
        noise_streams.check_stream_name(self.noise_stream)
        for stream in self.streams:
            if stream.noise_stream not in (None, self.noise_stream):
                raise ValueError(
                    f"stream {stream.name!r} names noise stream {stream.noise_stream!r} but the "
                    f"plan's is {self.noise_stream!r}; one plan draws one noise stream"
                )
        names = [d.name for s in self.streams for d in s.draws]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate draw names in plan: {names}")
        stream_names = [s.name for s in self.streams]
        if len(set(stream_names)) != len(stream_names):
            raise ValueError(f"duplicate stream names in plan: {stream_names}")
        generators = [id(s.source) for s in self.streams if isinstance(s.source, torch.Generator)]
        if len(set(generators)) != len(generators):
            raise ValueError("two streams of a plan share one generator object; use one stream")
        if not self.allow_scalar_path:
            for stream in self.streams:
                for d in stream.draws:
                    if d.takes_scalar_path and d.numel > 0:
                        raise ScalarPathError(
                            f"draw {d.name!r} in stream {stream.name!r} has {d.numel} elements "
                            f"(< {VECTOR_BLOCK}): torch draws it on its stateful scalar path; "
                            "pass allow_scalar_path=True to accept that"
                        )
        if self.max_bytes is not None and self.peak_nbytes > self.max_bytes:
            largest = max((d for s in self.streams for d in s.draws), key=lambda d: d.peak_nbytes)
            raise BudgetExceededError(
                f"noise plan needs {format_bytes(self.peak_nbytes)}, more than its max_bytes "
                f"{format_bytes(self.max_bytes)} (largest draw {largest.name!r}, shape "
                f"{largest.shape}); draw smaller shapes or raise max_bytes"
            )
        object.__setattr__(self, "_draw_names", tuple(names))

    @property
    def draw_names(self) -> tuple[str, ...]:
        """Names of every draw, in stream order."""
        return self._draw_names

    @property
    def numel(self) -> int:
        """Elements drawn by all streams (before any keep slice)."""
        return sum(s.numel for s in self.streams)

    @property
    def output_nbytes(self) -> int:
        """Bytes of all returned tensors."""
        return sum(s.output_nbytes for s in self.streams)

    @property
    def peak_nbytes(self) -> int:
        """Bytes `run_plan` may hold at once: every result plus the largest draw buffer."""
        return self.output_nbytes + max(
            (s.peak_nbytes - s.output_nbytes for s in self.streams), default=0
        )

    @property
    def generator_words(self) -> dict[str, int | None]:
        """32-bit generator words per stream (None where a scalar-path draw is allowed)."""
        return {s.name: s.generator_words for s in self.streams}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def fill_normal_(
    out: torch.Tensor,
    generator: torch.Generator,
    *,
    chunk_elems: int | None = None,
    allow_scalar_path: bool = False,
    cancel: CancelEvent | None = None,
    noise_stream: str = noise_streams.NATIVE,
) -> torch.Tensor:
    """Fill `out` in place; bitwise equal to `out.normal_(generator=generator)`, state included.

    `out` must be a contiguous CPU tensor. With `chunk_elems`, flat chunks are filled one after
    another (see `chunk_bounds`); values and the final generator state are identical to one fill.
    With `cancel`, chunks default to `CANCEL_CHUNK_ELEMS` and `Cancelled` is raised before the
    first chunk that starts after it is set (`out` and the generator are then partly advanced).
    Refuses (ScalarPathError) outputs that torch would fill on its scalar path, unless allowed.
    A non-native `noise_stream` gives torch's values in that stream (every dtype; see
    `prenoise.noise.streams`); `set_fill_backend` applies to the native stream only.
    """
    noise_streams.check_stream_name(noise_stream)
    if out.device.type != "cpu":
        raise ValueError(f"fill_normal_ needs a CPU tensor, got {out.device}")
    n = out.numel()
    if n == 0:
        return out
    if not out.is_contiguous() or n < VECTOR_BLOCK:
        if not allow_scalar_path:
            raise ScalarPathError(
                f"a {'non-contiguous ' if not out.is_contiguous() else ''}tensor of {n} elements "
                "is filled on torch's stateful scalar path; pass allow_scalar_path=True to accept"
            )
        return out.normal_(generator=generator)
    flat = out.view(-1)
    fill = _fill_backend if out.dtype == torch.float32 else _torch_fill
    if noise_stream != noise_streams.NATIVE:

        def fill(chunk: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
            return noise_streams.fill_(chunk, generator, noise_stream)

    if not chunk_elems:
        chunk_elems = CANCEL_CHUNK_ELEMS if cancel is not None else n + (-n % VECTOR_BLOCK)
    for start, stop in chunk_bounds(n, chunk_elems):
        raise_if_cancelled(cancel, "noise fill")
        fill(flat[start:stop], generator)
    return out


def run_draw(
    draw: Draw,
    generator: torch.Generator,
    *,
    out: torch.Tensor | None = None,
    chunk_elems: int | None = None,
    allow_scalar_path: bool = False,
    cancel: CancelEvent | None = None,
    noise_stream: str = noise_streams.NATIVE,
) -> torch.Tensor:
    """Run one draw on `generator` (advanced in place) and return its result.

    Bitwise equal to the serial code the draw describes — `torch.randn(draw.shape, dtype=...,
    generator=generator)`, then the keep slice, then the layout — and leaves `generator` in the
    same state. `out` is an optional preallocated buffer of `draw.shape` and `draw.draw_dtype`.
    The result is contiguous; it is `out` itself when there is no keep, cast or layout.

    Refuses, before allocating, a draw whose `peak_nbytes` exceed the memory available now
    (`BudgetExceededError`): its serial code could not run either. With `cancel`, the fill stops
    between chunks once the event is set (`Cancelled`; see `fill_normal_`). `noise_stream`
    names the arithmetic (see `fill_normal_`).
    """
    if not isinstance(draw, Draw) or not isinstance(generator, torch.Generator):  # not an
        got = f"{type(draw).__name__}, {type(generator).__name__}"  # AttributeError deep inside
        raise TypeError(f"run_draw takes a Draw and a torch.Generator, got {got}")
    noise_streams.check_stream_name(noise_stream)
    native = noise_stream == noise_streams.NATIVE
    raise_if_cancelled(cancel, f"draw {draw.name!r}")
    if draw.peak_nbytes >= _CHECK_MIN_BYTES:
        require_fits(
            draw.peak_nbytes - (0 if out is None else draw.buffer_nbytes),
            f"draw {draw.name!r} of shape {draw.shape}",
            fix="draw a smaller shape",
        )
    if draw.native_half:
        if out is not None:
            raise ValueError(f"draw {draw.name!r}: a native half draw cannot fill a buffer")
        full = _native_half(draw, generator, chunk_elems, cancel, noise_stream)
    elif (
        draw.keep is not None
        and out is None
        and chunk_elems is None
        and draw.draw_dtype == torch.float32
        and (_fill_backend is _kernel_fill or not native)
        and not draw.takes_scalar_path
    ):
        # Dependent noise: transform only the kept values, skip the rest of the stream.
        kept = normal.randn_keep_prefix(
            draw.shape, draw.keep, generator=generator, stream=noise_stream
        )
        raise_if_cancelled(cancel, f"draw {draw.name!r}")
        return _finish(draw, kept)
    else:
        if out is None:
            out = kernel.empty(draw.shape, dtype=draw.draw_dtype)
        elif tuple(out.shape) != draw.shape or out.dtype != draw.draw_dtype:
            raise ValueError(
                f"draw {draw.name!r}: buffer is {tuple(out.shape)} {out.dtype}, "
                f"expected {draw.shape} {draw.draw_dtype}"
            )
        full = fill_normal_(
            out,
            generator,
            chunk_elems=chunk_elems,
            allow_scalar_path=allow_scalar_path,
            cancel=cancel,
            noise_stream=noise_stream,
        )
    kept = full
    if draw.keep is not None:
        kept = full[tuple(slice(0, k) for k in draw.keep)]
    return _finish(draw, kept)


def _native_half(
    draw: Draw,
    generator: torch.Generator,
    chunk_elems: int | None,
    cancel: CancelEvent | None,
    noise_stream: str,
) -> torch.Tensor:
    """`torch.randn(draw.shape, dtype=half)` in `noise_stream`, polling `cancel` between chunks.

    `torch.randn` is `empty` + `normal_`, and a half `normal_` fills whole 16-blocks (a ragged
    last block is a fresh block over the last 16 slots), so the chunked fill of `fill_normal_`
    is the same draw. The scalar path (numel < 16) is left to torch in one call, as before, and
    so is the whole draw where local torch's half rule is not that one (`half_rule_status`).
    """
    native = noise_stream == noise_streams.NATIVE
    if (
        draw.takes_scalar_path
        or (cancel is None and chunk_elems is None)
        or (native and not kernel.half_rule_status().holds)
    ):
        if noise_stream == noise_streams.NATIVE:
            return torch.randn(draw.shape, dtype=draw.dtype, generator=generator)
        return noise_streams.randn(
            draw.shape, generator=generator, stream=noise_stream, dtype=draw.dtype
        )
    full = kernel.empty(draw.shape, dtype=draw.dtype)
    return fill_normal_(
        full, generator, chunk_elems=chunk_elems, cancel=cancel, noise_stream=noise_stream
    )


def _finish(draw: Draw, kept: torch.Tensor) -> torch.Tensor:
    """Apply the layout and the half cast; return a contiguous tensor."""
    if draw.layout is not None:
        kept = draw.layout.apply(kept)
    if kept.dtype != draw.dtype:
        kept = kept.to(draw.dtype)
    return kept.contiguous()


def run_stream(
    stream: Stream,
    *,
    chunk_elems: int | None = None,
    allow_scalar_path: bool = False,
    cancel: CancelEvent | None = None,
    noise_stream: str | None = None,
) -> dict[str, torch.Tensor]:
    """Run a stream's draws in order on its generator; returns `{draw name: tensor}`.

    The noise stream is `noise_stream`, else `stream.noise_stream`, else "native"; naming one
    that differs from `stream.noise_stream` is refused (`ValueError`).
    """
    if noise_stream is not None and stream.noise_stream not in (None, noise_stream):
        raise ValueError(
            f"stream {stream.name!r} is declared {stream.noise_stream!r}, run as {noise_stream!r}"
        )
    chosen = noise_stream or stream.noise_stream or noise_streams.NATIVE
    generator = stream.generator()
    return {
        d.name: run_draw(
            d,
            generator,
            chunk_elems=chunk_elems,
            allow_scalar_path=allow_scalar_path,
            cancel=cancel,
            noise_stream=chosen,
        )
        for d in stream.draws
    }


def run_plan(
    plan: NoisePlan, *, chunk_elems: int | None = None, cancel: CancelEvent | None = None
) -> dict[str, torch.Tensor]:
    """Run every stream of `plan` serially on this thread, in `plan.noise_stream`; returns
    `{draw name: tensor}`."""
    results: dict[str, torch.Tensor] = {}
    for stream in plan.streams:
        results.update(
            run_stream(
                stream,
                chunk_elems=chunk_elems,
                allow_scalar_path=plan.allow_scalar_path,
                cancel=cancel,
                noise_stream=plan.noise_stream,
            )
        )
    return results
