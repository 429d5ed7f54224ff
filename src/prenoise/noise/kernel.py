"""Fast CPU standard-normal draws that are bit-identical to ``torch.randn``.

Guarantees, for a CPU ``torch.Generator`` ``g`` and an active kernel backend:

* :func:`fill_normal_` writes exactly the float32 values ``out.normal_(generator=g)`` writes and
  leaves ``g.get_state()`` byte-identical to what torch would leave, so every later torch draw
  on ``g`` is unchanged. :func:`randn` does the same for ``torch.randn(shape, generator=g)``.
* :func:`randn_keep_prefix` equals ``torch.randn(shape, generator=g)[:k0, :k1, ...]`` made
  contiguous, and leaves ``g`` where the full draw would, while computing only the kept values.
* Results do not depend on ``threads``: one MT19937 stream is split at 16-aligned offsets and each
  thread fast-forwards its own copy of the state.

Equality holds against torch *in the same process*: like torch itself, the bits depend on the
CPU capability torch dispatches to (AVX2/AVX-512 vs ``ATEN_CPU_CAPABILITY=default``). The first
use runs a self-check of each candidate backend against torch (several sizes with ragged tails,
two seeds, multi-threaded splits, an already advanced generator, the keep-prefix path). A
candidate with any differing bit is never used; when none passes, the process falls back to
torch, logs one warning on logger ``prenoise.noise.kernel``, and :func:`backend_status` says so.
``PRENOISE_NOISE_BACKEND=torch`` forces torch; a backend name there allows only that backend;
``auto`` (or unset) chooses; any other value raises :class:`~prenoise.guards.env.EnvVarError`.
Anything the kernel does not cover (numel < 16, non-contiguous or non-float32 outputs, non-CPU
generators, float64, ragged bf16/f16) is delegated to torch, so every function always returns
exactly torch's result.

bfloat16/float16 draws of a multiple of 16 values are served as the float32 draw rounded: what
torch does from 2.13 on (PR #179834 sent them through the float32 path; earlier releases draw them
otherwise). :func:`half_rule_status` checks that rule against local torch once per process; where
it does not hold (an older or a changed torch release) those draws are left to torch too, and
:class:`prenoise.preparation.draws.Draw` draws them natively, so the values are still torch's.

This module draws local torch's values only (the ``"native"`` stream) and imports nothing else
of :mod:`prenoise.noise`; :mod:`prenoise.noise.streams` builds the named streams on its
:func:`extension`, :func:`threads_for`, :func:`keep_prefix_with` and :func:`empty`, and
:mod:`prenoise.noise.normal` is the entry that takes a ``stream`` name.

Not covered: like torch's draws, a draw is not atomic against *other threads* using the same
generator at the same time (use one generator per thread), and raw writes by the kernel do not
bump the autograd version counter of ``out``.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

import torch

from prenoise.guards.env import env_choice

__all__ = [
    "BACKEND_CHOICES",
    "ENV_VAR",
    "TESTED_TORCH_RELEASES",
    "BackendStatus",
    "HalfRuleStatus",
    "backend_status",
    "check_environment",
    "empty",
    "fill_normal_",
    "half_rule_status",
    "huge_page_status",
    "randn",
    "randn_keep_prefix",
]

ENV_VAR = "PRENOISE_NOISE_BACKEND"
#: The torch releases `make test` runs on (the first is pyproject's floor); any other release is
#: self-checked per process (:func:`backend_status`, :func:`half_rule_status`, stream goldens).
TESTED_TORCH_RELEASES = ("2.13.0", "2.14.1")
#: ``PRENOISE_HUGE_PAGES=0`` turns the 2 MiB-page advice of :func:`empty` off (read per call).
HUGE_PAGES_ENV_VAR = "PRENOISE_HUGE_PAGES"
#: Draws of at least this many elements use ``min(2, cpu_count)`` threads by default.
PARALLEL_MIN_NUMEL = 1 << 20
#: Smaller draws go to torch: its result is identical and, below this size, cheaper than the
#: kernel's fixed cost (reading and writing the 5 KB generator state, about 3 us).
KERNEL_MIN_NUMEL = 1024
#: Fresh buffers of at least this size are advised to use 2 MiB pages (see :func:`empty`). glibc
#: serves such sizes from a fresh ``mmap`` (its largest dynamic mmap threshold is 32 MiB), so the
#: advice never reaches heap memory that is reused for small objects.
HUGE_PAGE_MIN_BYTES = 32 << 20
_STATE_BYTES = 5056
_LOG = logging.getLogger("prenoise.noise.kernel")

_ext: ModuleType | None
try:
    _ext = importlib.import_module("prenoise.noise._noise_kernel")
    _IMPORT_ERROR = ""
except ImportError as _exc:  # pragma: no cover - depends on the build
    _ext = None
    if isinstance(_exc, ModuleNotFoundError) and _exc.name == "prenoise.noise._noise_kernel":
        # An optional build (pyproject `optional = true`): a failed compile installs without it.
        _IMPORT_ERROR = (
            "C kernel not built (no C compiler at install time?); torch draws the same bits, "
            "slower: reinstall with a C compiler (cc) for the kernel"
        )
    else:
        _IMPORT_ERROR = f"C extension prenoise.noise._noise_kernel not importable: {_exc}"
if _ext is not None and not hasattr(_ext, "UnsupportedPosition"):  # pragma: no cover
    _ext = None  # built from older sources: its errors cannot be told apart
    _IMPORT_ERROR = "C kernel built from older sources; rebuild it (pip install -e . or make setup)"


@dataclass(frozen=True)
class BackendStatus:
    """Which noise backend serves this process, and why.

    ``name`` is ``"avx2-fma"`` (the C kernel reproducing torch's AVX2 path), ``"avx512-fma"`` (the
    same arithmetic on 512-bit vectors, where the CPU has AVX-512F), ``"scalar-libm"`` (torch's
    generic path, e.g. ``ATEN_CPU_CAPABILITY=default``) or ``"torch"``; ``active`` is True when
    the C kernel is in use.
    """

    name: str
    active: bool
    reason: str


_lock = threading.Lock()
_status: BackendStatus | None = None
_code = -1  # backend code passed to the extension while active


# ----------------------------------------------------------------------------- backend choice


def backend_status() -> BackendStatus:
    """Return the active backend, running the one-time self-check on first use."""
    status = _status
    return status if status is not None else _resolve()


def _reset_backend() -> None:
    """Forget the chosen backend and the half-rule check so the next use redoes them (tests and
    env changes)."""
    global _status, _code, _half_rule
    with _lock:
        _status, _code, _half_rule = None, -1, None


@dataclass(frozen=True)
class HalfRuleStatus:
    """Whether local torch draws bfloat16/float16 ``randn`` of a multiple of 16 values as its
    float32 draw rounded (``holds``), the rule prenoise reproduces; ``reason`` says what was
    checked, or the first case that differs."""

    holds: bool
    reason: str


_half_rule: HalfRuleStatus | None = None
_HALF_RULE_CASES = ((0, 16), (1, 1024), (2, 4096), (3, 65536 + 16))


def half_rule_status() -> HalfRuleStatus:
    """Check once per process, against local torch itself, that ``torch.randn(n, dtype=half)``
    equals ``torch.randn(n).to(half)`` (values and generator state) for bfloat16 and float16 and
    n a multiple of 16. Where it does not hold, such draws are left to torch (:func:`randn`) and
    drawn natively (``HalfDrawRule.NATIVE``), never as the rounded float32 draw."""
    global _half_rule
    status = _half_rule
    if status is None:
        status = _check_half_rule()
        with _lock:
            _half_rule = status
        if not status.holds:
            _LOG.warning("prenoise noise kernel: %s", status.reason)
    return status


def _check_half_rule() -> HalfRuleStatus:
    for dtype in (torch.bfloat16, torch.float16):
        for seed, n in _HALF_RULE_CASES:
            native_gen = torch.Generator().manual_seed(seed)
            cast_gen = torch.Generator().manual_seed(seed)
            native = torch.randn(n, generator=native_gen, dtype=dtype)
            cast = torch.randn(n, generator=cast_gen).to(dtype)
            same_values = torch.equal(native.view(torch.int16), cast.view(torch.int16))
            if not same_values or not torch.equal(native_gen.get_state(), cast_gen.get_state()):
                what = "values" if not same_values else "generator state"
                return HalfRuleStatus(
                    False,
                    f"torch {torch.__version__} draws {str(dtype).removeprefix('torch.')} "
                    f"randn({n}) (seed {seed}) unlike its float32 draw rounded ({what} differ): "
                    "bfloat16/float16 draws are left to torch (the rule prenoise reproduces is "
                    "torch >= 2.13's)",
                )
    return HalfRuleStatus(
        True,
        f"torch {torch.__version__} draws bfloat16/float16 as its float32 draw rounded "
        "(multiples of 16 values), the rule prenoise reproduces",
    )


def _resolve(_corrupt: Callable[[torch.Tensor], None] | None = None) -> BackendStatus:
    """Choose the backend once per process. ``_corrupt`` (tests only) alters kernel results."""
    global _status, _code
    with _lock:
        if _status is not None:
            return _status
        status, code = _choose(_corrupt)
        _status, _code = status, code
        return status


_NAMES = {
    "avx512-fma": "BACKEND_AVX512",
    "avx2-fma": "BACKEND_AVX2",
    "scalar-libm": "BACKEND_SCALAR",
}


#: Accepted values of ``PRENOISE_NOISE_BACKEND`` (unset: ``auto``).
BACKEND_CHOICES = ("auto", "torch", *_NAMES)


def check_environment() -> None:
    """Raise :class:`~prenoise.guards.env.EnvVarError` now if ``PRENOISE_NOISE_BACKEND`` or
    ``PRENOISE_HUGE_PAGES`` has a value this module does not know (the CLI calls it first)."""
    env_choice(ENV_VAR, BACKEND_CHOICES, "auto")
    _huge_pages_allowed()


def _choose(corrupt: Callable[[torch.Tensor], None] | None) -> tuple[BackendStatus, int]:
    wanted = env_choice(ENV_VAR, BACKEND_CHOICES, "auto")
    if wanted == "torch":
        return BackendStatus("torch", False, f"forced by {ENV_VAR}=torch"), -1
    if _ext is None:
        _LOG.warning("prenoise noise kernel unavailable, using torch: %s", _IMPORT_ERROR)
        return BackendStatus("torch", False, _IMPORT_ERROR), -1
    capability = torch.backends.cpu.get_cpu_capability()
    available = set(_ext.available_backends())
    if capability in ("AVX2", "AVX512"):  # torch's AVX2 kernel (AVX512 dispatches to it too)
        candidates = [
            n for n in ("avx512-fma", "avx2-fma") if getattr(_ext, _NAMES[n]) in available
        ]
    else:  # torch's generic kernel (DEFAULT, and non-x86 CPUs)
        candidates = ["scalar-libm"]
    if wanted in _NAMES:
        candidates = [n for n in candidates if n == wanted]
    if not candidates:
        reason = f"no kernel matches torch's {capability} path here (wanted {wanted!r})"
        return BackendStatus("torch", False, reason), -1
    failures: list[str] = []
    for name in candidates:
        code = int(getattr(_ext, _NAMES[name]))
        problem = _self_check(code, corrupt)
        if problem is None:
            reason = f"self-check passed against torch (CPU capability {capability})"
            if failures:
                reason += "; failed first: " + "; ".join(failures)
                _LOG.warning("prenoise noise kernel: %s", reason)
            return BackendStatus(name, True, reason), code
        failures.append(f"{name}: {problem}")
    reason = "self-check against torch failed (" + "; ".join(failures) + "); using torch"
    _LOG.warning("prenoise noise kernel disabled: %s", reason)
    return BackendStatus("torch", False, reason), -1


def _self_check(code: int, corrupt: Callable[[torch.Tensor], None] | None) -> str | None:
    """Compare kernel and torch draws bit for bit; return a description of the first mismatch."""
    for seed in (0, 20240531):
        kernel_gen = torch.Generator().manual_seed(seed)
        torch_gen = torch.Generator().manual_seed(seed)
        for n, threads in ((16, 1), (17, 1), (31, 1), (33, 2), (1000, 1), (100003, 3), (624, 1)):
            expected = torch.randn(n, generator=torch_gen)
            got = torch.empty(n)
            _fill_with(got, kernel_gen, threads, code)
            if corrupt is not None:
                corrupt(got)
            if not torch.equal(got.view(torch.int32), expected.view(torch.int32)):
                return f"values differ for seed={seed} n={n} threads={threads}"
            if not torch.equal(kernel_gen.get_state(), torch_gen.get_state()):
                return f"generator state differs for seed={seed} n={n}"
        for keep in ((2, 1), (3, 5, 7, 5)):  # the second reaches the recomputed ragged tail
            shape = (3, 5, 7, 9)
            expected = _slice_prefix(torch.randn(shape, generator=torch_gen), keep)
            got = keep_prefix_with(shape, keep, kernel_gen, code)
            if corrupt is not None:
                corrupt(got)
            if not torch.equal(got.view(torch.int32), expected.view(torch.int32)):
                return f"keep-prefix values differ for seed={seed} keep={keep}"
            if not torch.equal(kernel_gen.get_state(), torch_gen.get_state()):
                return f"keep-prefix generator state differs for seed={seed} keep={keep}"
    return None


def _active_code() -> int:
    status = _status if _status is not None else _resolve()
    return _code if status.active else -1


# ----------------------------------------------------------------------------- raw kernel calls


def _fill_with(out: torch.Tensor, generator: torch.Generator, threads: int, code: int) -> None:
    """Kernel fill of a contiguous float32 CPU tensor with >= 16 elements (torch if unsupported)."""
    assert _ext is not None
    state = generator.get_state()
    try:
        _ext.fill_f32(out.data_ptr(), out.numel(), state.data_ptr(), state.numel(), threads, code)
    except _ext.UnsupportedPosition:  # a position the kernel does not model: torch draws it
        out.normal_(generator=generator)
        return
    generator.set_state(state)


def keep_prefix_with(
    shape: tuple[int, ...],
    keep: tuple[int, ...],
    generator: torch.Generator,
    code: int,
    *,
    fallback: bool = True,
) -> torch.Tensor:
    """Kernel version of draw-then-slice for ``math.prod(shape) >= 16`` (see randn_keep_prefix).

    A generator position the kernel does not model is drawn by torch, or with ``fallback=False``
    (a non-native noise stream, which torch may not draw) raises the extension's
    ``UnsupportedPosition`` (a ``ValueError``)."""
    assert _ext is not None
    k = len(keep)
    out_shape = keep + shape[k:]
    inner = math.prod(shape[k:])
    run_len = keep[-1] * inner if k else math.prod(shape)
    starts = torch.zeros((), dtype=torch.int64)
    for d in range(k - 1):  # row-major offsets of every kept index of dims 0..k-2
        stride = math.prod(shape[d + 1 :])
        starts = (
            starts.unsqueeze(-1) + torch.arange(keep[d], dtype=torch.int64) * stride
        ).flatten()
    starts = starts.reshape(-1).contiguous()
    n_runs = starts.numel() if run_len > 0 else 0
    out = empty(out_shape)
    state = generator.get_state()
    try:
        _ext.fill_runs_f32(
            out.data_ptr(),
            math.prod(shape),
            starts.data_ptr(),
            n_runs,
            run_len,
            state.data_ptr(),
            state.numel(),
            code,
        )
    except _ext.UnsupportedPosition:  # any other error is a bug and propagates
        if not fallback:
            raise
        return _slice_prefix(torch.randn(shape, generator=generator), keep)
    generator.set_state(state)
    return out


def _slice_prefix(full: torch.Tensor, keep: tuple[int, ...]) -> torch.Tensor:
    return full[tuple(slice(0, k) for k in keep)].contiguous()


# ----------------------------------------------------------------------------- public API


def empty(size: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``torch.empty(size, dtype=dtype)`` on the CPU, with large buffers backed by 2 MiB pages.

    A fresh 70 MB buffer costs ~17,000 page faults on its first write (≈ 24 ms here, a third of
    ``torch.randn``'s time). For buffers of at least ``HUGE_PAGE_MIN_BYTES`` this advises the
    kernel (``madvise(MADV_HUGEPAGE)``, Linux, transparent huge pages in ``madvise`` or ``always``
    mode) to map the aligned interior with 2 MiB pages: ~35 faults. This is what torch does for
    every allocation under ``THP_MEM_ALLOC_ENABLE=1``. Memory the allocator reused (already
    resident, so it will not fault) is left alone. The tensor is an ordinary torch allocation
    (resizable, freed by torch); values are never affected.
    """
    out = torch.empty(tuple(size), dtype=dtype)
    nbytes = out.numel() * out.element_size()
    if _ext is not None and nbytes >= HUGE_PAGE_MIN_BYTES and _huge_pages_allowed():
        _ext.advise_huge_pages(out.data_ptr(), nbytes)
    return out


def _huge_pages_allowed() -> bool:
    return env_choice(HUGE_PAGES_ENV_VAR, ("0", "1"), "1") == "1"


def huge_page_status() -> str:
    """One line: whether :func:`empty` advises big buffers onto 2 MiB pages here, and why."""
    if not _huge_pages_allowed():
        return f"off ({HUGE_PAGES_ENV_VAR}=0)"
    if _ext is None:
        return "off (C extension not built)"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return "no effect (no transparent huge pages on this system)"
    if mode == "never":
        return "no effect (transparent huge pages: never)"
    return f"on for buffers >= {HUGE_PAGE_MIN_BYTES >> 20} MiB (transparent huge pages: {mode})"


def extension() -> ModuleType | None:
    """The loaded C extension, or None when it is not built (see :func:`backend_status`)."""
    return _ext


def threads_for(numel: int, threads: int | None) -> int:
    """Threads a fill of ``numel`` values uses: ``threads``, or by default 2 from
    ``PARALLEL_MIN_NUMEL`` elements on (1 below). The count never changes a value."""
    if threads is None:
        return min(2, os.cpu_count() or 1) if numel >= PARALLEL_MIN_NUMEL else 1
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return threads


def _kernel_can_fill(out: torch.Tensor, generator: torch.Generator) -> bool:
    return (
        out.dtype == torch.float32
        and out.device.type == "cpu"
        and out.layout == torch.strided
        and generator.device.type == "cpu"
        and out.numel() >= max(16, KERNEL_MIN_NUMEL)
        and not out.requires_grad
        and out.is_contiguous()
    )


def fill_normal_(
    out: torch.Tensor,
    generator: torch.Generator,
    *,
    threads: int | None = None,
) -> torch.Tensor:
    """Exactly ``out.normal_(generator=generator)``: same values, same final generator state.

    The kernel serves contiguous float32 CPU tensors with at least ``KERNEL_MIN_NUMEL`` elements;
    anything else (including small tensors, where torch is cheaper) is delegated to torch.
    ``threads`` (default: 2 for >= 1M elements, else 1) never changes the result. Returns ``out``.
    """
    code = _active_code()
    if code < 0 or not _kernel_can_fill(out, generator):
        return out.normal_(generator=generator)
    _fill_with(out, generator, threads_for(out.numel(), threads), code)
    return out


def _as_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)


def randn(
    shape: int | Sequence[int],
    *,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    out: torch.Tensor | None = None,
    threads: int | None = None,
) -> torch.Tensor:
    """Exactly ``torch.randn(shape, generator=generator, dtype=dtype, out=out)`` on the CPU.

    Values are bitwise equal and the generator is left byte-identical. The kernel serves float32
    (numel >= 16) and bf16/f16 when numel % 16 == 0 (drawn in float32 and rounded, which is what
    torch does then: checked by :func:`half_rule_status`); every other case is delegated to torch.
    ``out``, if given, must be a contiguous CPU tensor of ``shape`` and ``dtype`` for the kernel
    to fill it in place.
    """
    size = _as_shape(shape)
    n = math.prod(size)
    code = _active_code()
    reduced = dtype in (torch.bfloat16, torch.float16)
    servable = (
        code >= 0
        and generator.device.type == "cpu"
        and n >= max(16, KERNEL_MIN_NUMEL)
        and (dtype == torch.float32 or (reduced and n % 16 == 0 and half_rule_status().holds))
        and (out is None or _out_matches(out, size, dtype))
    )
    if not servable:
        if out is None:
            return torch.randn(size, generator=generator, dtype=dtype)
        return torch.randn(size, generator=generator, dtype=dtype, out=out)
    nthreads = threads_for(n, threads)
    if dtype == torch.float32:
        result = out if out is not None else empty(size)
        _fill_with(result, generator, nthreads, code)
        return result
    draw = empty(size)
    _fill_with(draw, generator, nthreads, code)
    if out is None:
        return draw.to(dtype)
    return out.copy_(draw)


def _out_matches(out: torch.Tensor, size: tuple[int, ...], dtype: torch.dtype) -> bool:
    return (
        tuple(out.shape) == size
        and out.dtype == dtype
        and out.device.type == "cpu"
        and out.layout == torch.strided
        and not out.requires_grad
        and out.is_contiguous()
    )


def randn_keep_prefix(
    shape: Sequence[int],
    keep: Sequence[int],
    *,
    generator: torch.Generator,
    threads: int | None = None,
) -> torch.Tensor:
    """Exactly ``torch.randn(shape, generator=generator)[:keep[0], ..., :keep[-1]].contiguous()``.

    float32 only. The generator ends where the full draw leaves it, but only the 16-blocks that
    hold kept values (plus the ragged last block, which torch recomputes) are transformed; the
    other MT19937 words are skipped by twisting alone. ``keep`` gives prefix lengths for the
    leading ``len(keep)`` dims. ``threads`` is accepted for API symmetry; the skip is one thread.
    """
    del threads  # the work left (twisting over skipped words) is sequential by nature
    size, kept = _as_shape(shape), _as_shape(keep)
    if len(kept) > len(size) or any(not 0 <= k <= s for k, s in zip(kept, size, strict=False)):
        raise ValueError(f"keep {kept} is not a prefix selection of shape {size}")
    code = _active_code()
    if code < 0 or generator.device.type != "cpu" or math.prod(size) < max(16, KERNEL_MIN_NUMEL):
        return _slice_prefix(torch.randn(size, generator=generator), kept)
    return keep_prefix_with(size, kept, generator, code)
