"""prenoise.noise.kernel: exact texts, status fields, dispatch and self-check plan (mutation)."""

from __future__ import annotations

import builtins
import logging
import math
import re
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from bitwise import bitwise_equal, same_state
from kernel_spy import kernel_calls
from prenoise.guards.env import EnvVarError
from prenoise.noise import kernel, normal
from prenoise.noise import streams as noise_streams

THP_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
VECTOR = ("avx512-fma", "avx2-fma")


def _exact(text: str) -> str:
    return f"^{re.escape(text)}$"


def _gens(seed: int) -> tuple[torch.Generator, torch.Generator]:
    return torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)


@pytest.fixture(autouse=True)
def _fresh_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test re-selects the backend, from an environment without prenoise's variables."""
    monkeypatch.delenv(kernel.ENV_VAR, raising=False)
    monkeypatch.delenv(kernel.HUGE_PAGES_ENV_VAR, raising=False)
    kernel._reset_backend()
    yield
    kernel._reset_backend()


# ----------------------------------------------------------------------------- environment


def test_unknown_backend_value_is_refused_with_the_full_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(kernel.ENV_VAR, "Fastest")
    text = (
        "PRENOISE_NOISE_BACKEND='Fastest' is not a known value "
        "(accepted: auto, torch, avx512-fma, avx2-fma, scalar-libm; unset means auto)"
    )
    with pytest.raises(EnvVarError, match=_exact(text)):
        kernel.check_environment()
    with pytest.raises(EnvVarError, match=_exact(text)):
        kernel.backend_status()
    assert kernel._status is None  # nothing was decided


@pytest.mark.parametrize("value", ["auto", "torch", " AVX2-FMA ", "avx512-fma", "scalar-libm", ""])
def test_every_known_backend_value_passes_the_environment_check(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(kernel.ENV_VAR, value)
    assert kernel.check_environment() is None


def test_unknown_huge_page_value_is_refused_everywhere_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, "yes")
    text = "PRENOISE_HUGE_PAGES='yes' is not a known value (accepted: 0, 1; unset means 1)"
    with pytest.raises(EnvVarError, match=_exact(text)):
        kernel.check_environment()
    with pytest.raises(EnvVarError, match=_exact(text)):
        kernel.huge_page_status()
    with pytest.raises(EnvVarError, match=_exact(text)):
        kernel.empty((kernel.HUGE_PAGE_MIN_BYTES // 4,))
    assert kernel.empty((10,)).shape == (10,)  # small buffers never read the switch


@pytest.mark.parametrize(
    ("value", "allowed"), [("1", True), (" 1 ", True), ("", True), ("0", False)]
)
def test_huge_page_switch_values(
    monkeypatch: pytest.MonkeyPatch, value: str, allowed: bool
) -> None:
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, value)
    kernel.check_environment()
    assert kernel._huge_pages_allowed() is allowed


# ----------------------------------------------------------------------------- huge-page status


def _fake_thp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str | None) -> None:
    """Serve the transparent-huge-page mode file from tmp_path (missing when content is None)."""
    target = tmp_path / "enabled"
    if content is not None:
        target.write_text(content)
    real_open = builtins.open

    def fake_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        return real_open(target if file == THP_FILE else file, *args, **kwargs)

    monkeypatch.setattr(kernel, "open", fake_open, raising=False)


@pytest.mark.parametrize(
    ("content", "status"),
    [
        ("always [madvise] never\n", "on for buffers >= 32 MiB (transparent huge pages: madvise)"),
        ("[always] madvise never\n", "on for buffers >= 32 MiB (transparent huge pages: always)"),
        ("always madvise [never]\n", "no effect (transparent huge pages: never)"),
        # the first bracketed word is the mode
        (
            "always [madvise] never [x]\n",
            "on for buffers >= 32 MiB (transparent huge pages: madvise)",
        ),
        ("always madvise never\n", "no effect (no transparent huge pages on this system)"),
        ("", "no effect (no transparent huge pages on this system)"),
        (None, "no effect (no transparent huge pages on this system)"),
    ],
)
def test_huge_page_status_reports_the_system_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str | None, status: str
) -> None:
    assert kernel._ext is not None, kernel._IMPORT_ERROR
    _fake_thp(monkeypatch, tmp_path, content)
    assert kernel.huge_page_status() == status
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, "0")  # the switch wins over the system
    assert kernel.huge_page_status() == "off (PRENOISE_HUGE_PAGES=0)"


def test_huge_page_status_without_the_extension(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_thp(monkeypatch, tmp_path, "always [madvise] never\n")
    monkeypatch.setattr(kernel, "_ext", None)
    assert kernel.huge_page_status() == "off (C extension not built)"
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, "0")
    assert kernel.huge_page_status() == "off (PRENOISE_HUGE_PAGES=0)"


# ----------------------------------------------------------------------------- backend choice


def _fake_ext(available: tuple[int, ...]) -> SimpleNamespace:
    """An extension with the backend codes of the real one (2, 1, 0) and chosen availability."""
    return SimpleNamespace(
        BACKEND_AVX512=2, BACKEND_AVX2=1, BACKEND_SCALAR=0, available_backends=lambda: available
    )


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "prenoise.noise.kernel"]


def test_forced_torch_status_and_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernel.ENV_VAR, " Torch ")
    status = kernel.BackendStatus("torch", False, "forced by PRENOISE_NOISE_BACKEND=torch")
    assert kernel._choose(None) == (status, -1)
    assert kernel.backend_status() == status
    assert kernel._code == -1 and kernel._active_code() == -1


def test_missing_extension_status_code_and_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(kernel, "_ext", None)
    monkeypatch.setattr(kernel, "_IMPORT_ERROR", "no kernel here")
    with caplog.at_level(logging.WARNING, logger="prenoise.noise.kernel"):
        assert kernel._choose(None) == (kernel.BackendStatus("torch", False, "no kernel here"), -1)
    assert _warnings(caplog) == ["prenoise noise kernel unavailable, using torch: no kernel here"]


@pytest.mark.parametrize(
    ("capability", "available", "wanted", "reason"),
    [
        ("AVX2", (), None, "no kernel matches torch's AVX2 path here (wanted 'auto')"),
        ("AVX512", (0,), None, "no kernel matches torch's AVX512 path here (wanted 'auto')"),
        (
            "AVX512",
            (0, 1, 2),
            "scalar-libm",
            "no kernel matches torch's AVX512 path here (wanted 'scalar-libm')",
        ),
        (
            "DEFAULT",
            (0, 1, 2),
            "avx2-fma",
            "no kernel matches torch's DEFAULT path here (wanted 'avx2-fma')",
        ),
    ],
)
def test_no_matching_candidate(
    monkeypatch: pytest.MonkeyPatch,
    capability: str,
    available: tuple[int, ...],
    wanted: str | None,
    reason: str,
) -> None:
    monkeypatch.setattr(kernel, "_ext", _fake_ext(available))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    if wanted is not None:
        monkeypatch.setenv(kernel.ENV_VAR, wanted)
    monkeypatch.setattr(kernel, "_self_check", lambda code, corrupt: pytest.fail("not a candidate"))
    assert kernel._choose(None) == (kernel.BackendStatus("torch", False, reason), -1)


_PASS_2 = "self-check passed against torch (CPU capability AVX2)"
_FAILED_BOTH = (
    "self-check against torch failed (avx512-fma: bad wide; avx2-fma: bad narrow); using torch"
)


@pytest.mark.parametrize(
    ("capability", "available", "wanted", "problems", "tried", "expected", "log"),
    [
        ("AVX2", (0, 1, 2), None, {}, [2], (("avx512-fma", True, _PASS_2), 2), []),
        ("AVX2", (0, 1), None, {}, [1], (("avx2-fma", True, _PASS_2), 1), []),
        (
            "AVX512",
            (0, 1, 2),
            None,
            {2: "bad wide"},
            [2, 1],
            (
                (
                    "avx2-fma",
                    True,
                    "self-check passed against torch (CPU capability AVX512); "
                    "failed first: avx512-fma: bad wide",
                ),
                1,
            ),
            [
                "prenoise noise kernel: self-check passed against torch (CPU capability AVX512); "
                "failed first: avx512-fma: bad wide"
            ],
        ),
        (
            "AVX2",
            (0, 1, 2),
            None,
            {2: "bad wide", 1: "bad narrow"},
            [2, 1],
            (("torch", False, _FAILED_BOTH), -1),
            [f"prenoise noise kernel disabled: {_FAILED_BOTH}"],
        ),
        (
            "AVX2",
            (0, 1, 2),
            "avx2-fma",
            {1: "bad narrow"},
            [1],
            (
                (
                    "torch",
                    False,
                    "self-check against torch failed (avx2-fma: bad narrow); using torch",
                ),
                -1,
            ),
            [
                "prenoise noise kernel disabled: self-check against torch failed "
                "(avx2-fma: bad narrow); using torch"
            ],
        ),
        (
            "DEFAULT",
            (0, 1, 2),
            "scalar-libm",
            {},
            [0],
            (("scalar-libm", True, "self-check passed against torch (CPU capability DEFAULT)"), 0),
            [],
        ),
        (
            "VSX",
            (0,),
            None,
            {},
            [0],
            (("scalar-libm", True, "self-check passed against torch (CPU capability VSX)"), 0),
            [],
        ),
    ],
)
def test_candidates_are_tried_in_order(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capability: str,
    available: tuple[int, ...],
    wanted: str | None,
    problems: dict[int, str],
    tried: list[int],
    expected: tuple[tuple[str, bool, str], int],
    log: list[str],
) -> None:
    """Wide vector backend first, then the narrow one, then torch; the codes are the extension's
    and the test-only corruption hook reaches every self-check."""
    monkeypatch.setattr(kernel, "_ext", _fake_ext(available))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    if wanted is not None:
        monkeypatch.setenv(kernel.ENV_VAR, wanted)
    calls: list[tuple[int, object]] = []

    def corrupt(t: torch.Tensor) -> None:
        raise AssertionError("only handed on")

    def self_check(code: int, hook: object) -> str | None:
        calls.append((code, hook))
        return problems.get(code)

    monkeypatch.setattr(kernel, "_self_check", self_check)
    with caplog.at_level(logging.WARNING, logger="prenoise.noise.kernel"):
        status, code = kernel._choose(corrupt)
    assert (status, code) == (kernel.BackendStatus(*expected[0]), expected[1])
    assert calls == [(c, corrupt) for c in tried]
    assert _warnings(caplog) == log


def test_real_backend_codes() -> None:
    """The fake extension above mirrors these; code 0 (scalar-libm) is a valid active code."""
    assert kernel._ext is not None, kernel._IMPORT_ERROR
    ext = kernel._ext
    assert (ext.BACKEND_AVX512, ext.BACKEND_AVX2, ext.BACKEND_SCALAR) == (2, 1, 0)


def test_reset_forgets_status_and_code() -> None:
    """Between a reset and the next use no backend is chosen: no status and code -1 (none)."""
    assert kernel.backend_status().active
    assert kernel._code >= 0
    kernel._reset_backend()
    assert (kernel._status, kernel._code) == (None, -1)


def test_a_decided_backend_is_read_without_the_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decided once per process: later status reads and draws never re-enter the resolver (nor
    take its lock)."""
    status = kernel.backend_status()
    assert status.active

    def resolve_again(*args: object) -> kernel.BackendStatus:
        raise AssertionError("resolved again")

    monkeypatch.setattr(kernel, "_resolve", resolve_again)
    assert kernel.backend_status() is status
    ref, gen = _gens(2)
    with kernel_calls() as calls:
        got = kernel.randn(2000, generator=gen)
        kernel.fill_normal_(buf := torch.empty(3000), gen)
        kept = kernel.randn_keep_prefix((4, 1000), (1,), generator=gen)
    assert calls == [2000, 3000, 4000]
    assert bitwise_equal(got, torch.randn(2000, generator=ref))
    assert bitwise_equal(buf, torch.randn(3000, generator=ref))
    assert bitwise_equal(kept, torch.randn((4, 1000), generator=ref)[:1])
    assert same_state(gen, ref)


# ----------------------------------------------------------------------------- self-check plan

_SIZES = ((16, 1), (17, 1), (31, 1), (33, 2), (1000, 1), (100003, 3), (624, 1))
_KEEPS = ((2, 1), (3, 5, 7, 5))


def test_self_check_runs_its_documented_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two seeds; per seed, sizes with ragged tails (16, 17, 31, 33, 1000, 100003, 624) on one
    generator that keeps advancing, split over 1-3 threads, then two keep-prefix draws of
    (3, 5, 7, 9), the second reaching the recomputed ragged tail; every result goes through the
    corruption hook."""
    status = kernel.backend_status()
    assert status.active, status.reason
    code = kernel._code
    events: list[tuple[object, ...]] = []
    real_fill, real_keep = kernel._fill_with, kernel.keep_prefix_with

    def fill(out: torch.Tensor, gen: torch.Generator, threads: int, c: int) -> None:
        events.append(("fill", gen.initial_seed(), out.numel(), threads, c))
        real_fill(out, gen, threads, c)

    def keep(
        shape: tuple[int, ...], kept: tuple[int, ...], gen: torch.Generator, c: int
    ) -> torch.Tensor:
        events.append(("keep", gen.initial_seed(), shape, kept, c))
        return real_keep(shape, kept, gen, c)

    def hook(t: torch.Tensor) -> None:
        events.append(("hook", t.numel()))

    monkeypatch.setattr(kernel, "_fill_with", fill)
    monkeypatch.setattr(kernel, "keep_prefix_with", keep)
    assert kernel._self_check(code, hook) is None
    expected: list[tuple[object, ...]] = []
    for seed in (0, 20240531):
        for n, threads in _SIZES:
            expected += [("fill", seed, n, threads, code), ("hook", n)]
        for kept in _KEEPS:
            numel = math.prod((*kept, 7, 9)[:4])
            expected += [("keep", seed, (3, 5, 7, 9), kept, code), ("hook", numel)]
    assert events == expected


def test_self_check_refuses_a_corrupted_keep_prefix_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Plain draws pass; a flipped bit in the ragged-tail keep-prefix draw of the second seed is
    reported exactly, for every candidate, and torch serves the process."""

    def flip(t: torch.Tensor) -> None:
        if t.numel() == 3 * 5 * 7 * 5:
            t.view(-1).view(torch.int32)[-1] ^= 1

    with caplog.at_level(logging.WARNING, logger="prenoise.noise.kernel"):
        status = kernel._resolve(_corrupt=flip)
    problem = "keep-prefix values differ for seed=0 keep=(3, 5, 7, 5)"
    assert (status.name, status.active) == ("torch", False)
    tried = [name for name in (*VECTOR, "scalar-libm") if f"{name}: " in status.reason]
    assert tried, status.reason
    failures = "; ".join(f"{name}: {problem}" for name in tried)
    assert status.reason == f"self-check against torch failed ({failures}); using torch"
    assert _warnings(caplog) == [f"prenoise noise kernel disabled: {status.reason}"]
    assert kernel._active_code() == -1


# ----------------------------------------------------------------------------- dispatch


def _use_backend(monkeypatch: pytest.MonkeyPatch, name: str, code: int) -> None:
    """Make `name` (extension code `code`) the active backend without a self-check."""
    monkeypatch.setattr(kernel, "_status", kernel.BackendStatus(name, True, "test"))
    monkeypatch.setattr(kernel, "_code", code)


def test_scalar_backend_code_zero_is_served_by_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """scalar-libm has extension code 0: with it active, the kernel (not torch) serves every
    entry point, drawing the "libm" noise stream, and leaves the generator where torch would."""
    assert kernel._ext is not None, kernel._IMPORT_ERROR
    _use_backend(monkeypatch, "scalar-libm", int(kernel._ext.BACKEND_SCALAR))
    assert kernel._active_code() == 0
    libm = noise_streams.randn(5000, generator=torch.Generator().manual_seed(3), stream="libm")
    libm_keep = noise_streams.randn_keep_prefix(
        (5, 1000), (2, 999), generator=torch.Generator().manual_seed(3), stream="libm"
    )
    ref, gen = _gens(3)
    torch.randn(5000, generator=ref)
    with kernel_calls() as calls:
        buf = torch.empty(5000)
        assert kernel.fill_normal_(buf, gen) is buf
    assert calls == [5000] and bitwise_equal(buf, libm) and same_state(gen, ref)
    ref, gen = _gens(3)
    torch.randn(5000, generator=ref)
    with kernel_calls() as calls:
        got = kernel.randn(5000, generator=gen)
    assert calls == [5000] and bitwise_equal(got, libm) and same_state(gen, ref)
    ref, gen = _gens(3)
    torch.randn((5, 1000), generator=ref)
    with kernel_calls() as calls:
        got = kernel.randn_keep_prefix((5, 1000), (2, 999), generator=gen)
    assert calls == [5000] and bitwise_equal(got, libm_keep) and same_state(gen, ref)


@pytest.mark.parametrize("n", [15, 16])
def test_sixteen_elements_is_the_kernel_floor(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """With the tuning threshold at 0, 16 elements still bound what the kernel serves."""
    monkeypatch.setattr(kernel, "KERNEL_MIN_NUMEL", 0)
    served = [n] if n >= 16 else []
    ref, gen = _gens(n)
    expected = torch.empty(n).normal_(generator=ref)
    with kernel_calls() as calls:
        got = kernel.fill_normal_(torch.empty(n), gen)
    assert calls == served and bitwise_equal(got, expected) and same_state(gen, ref)
    with kernel_calls() as calls:
        got = kernel.randn(n, generator=gen)
    assert calls == served and bitwise_equal(got, torch.randn(n, generator=ref))
    with kernel_calls() as calls:
        got = kernel.randn_keep_prefix((1, n), (1, n - 1), generator=gen)
    assert calls == served and bitwise_equal(got, torch.randn((1, n), generator=ref)[:, : n - 1])
    assert same_state(gen, ref)


@pytest.mark.parametrize("n", [1023, 1024])
def test_default_threshold_is_inclusive(n: int) -> None:
    served = [n] if n >= kernel.KERNEL_MIN_NUMEL else []
    assert kernel.KERNEL_MIN_NUMEL == 1024
    ref, gen = _gens(n)
    with kernel_calls() as calls:
        got = kernel.fill_normal_(torch.empty(n), gen)
    assert calls == served and bitwise_equal(got, torch.empty(n).normal_(generator=ref))
    with kernel_calls() as calls:
        got = kernel.randn(n, generator=gen)
    assert calls == served and bitwise_equal(got, torch.randn(n, generator=ref))
    with kernel_calls() as calls:
        got = kernel.randn_keep_prefix((n, 1), (5,), generator=gen)
    assert calls == served and bitwise_equal(got, torch.randn((n, 1), generator=ref)[:5])
    assert same_state(gen, ref)


def test_threads_argument_reaches_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernel.backend_status().active
    seen: list[tuple[int, int]] = []
    real_fill = kernel._fill_with

    def fill(out: torch.Tensor, gen: torch.Generator, threads: int, code: int) -> None:
        seen.append((out.numel(), threads))
        real_fill(out, gen, threads, code)

    monkeypatch.setattr(kernel, "_fill_with", fill)
    ref, gen = _gens(1)
    got = kernel.fill_normal_(torch.empty(5000), gen, threads=3)
    assert bitwise_equal(got, torch.randn(5000, generator=ref))
    got = kernel.randn(4000, generator=gen, threads=2)
    assert bitwise_equal(got, torch.randn(4000, generator=ref)) and same_state(gen, ref)
    assert seen == [(5000, 3), (4000, 2)]
    text = "threads must be >= 1, got 0"
    with pytest.raises(ValueError, match=_exact(text)):
        kernel.fill_normal_(torch.empty(5000), gen, threads=0)
    with pytest.raises(ValueError, match=_exact(text)):
        kernel.randn(5000, generator=gen, threads=0)
    assert seen == [(5000, 3), (4000, 2)] and same_state(gen, ref)


@pytest.mark.parametrize(
    ("shape", "keep"), [((4, 5), (5,)), ((4, 5), (1, 1, 1)), ((4, 5), (-1,)), ((4, 5), (4, 6))]
)
def test_bad_keep_message(shape: tuple[int, ...], keep: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(0)
    before = gen.get_state()
    text = f"keep {keep} is not a prefix selection of shape {shape}"
    with pytest.raises(ValueError, match=_exact(text)):
        kernel.randn_keep_prefix(shape, keep, generator=gen)
    assert torch.equal(gen.get_state(), before)


def _noncontiguous() -> torch.Tensor:
    return torch.empty(256, 4).t()


@pytest.mark.parametrize(
    ("make", "dtype"),
    [
        (lambda: torch.empty(0), torch.float32),  # resized by torch
        (lambda: torch.empty(1024), torch.float32),  # same numel, other shape: resized
        (lambda: torch.empty(4, 256, dtype=torch.float64), torch.float32),
        (lambda: torch.empty(4, 256, dtype=torch.float32), torch.float16),
        (_noncontiguous, torch.float32),
        (lambda: torch.empty(4, 256, requires_grad=True), torch.float32),
        (lambda: torch.empty(4, 256).to_sparse(), torch.float32),
    ],
)
def test_randn_out_that_does_not_match_goes_to_torch(
    make: Callable[[], torch.Tensor], dtype: torch.dtype
) -> None:
    """Each condition of a fillable ``out`` on its own: failing any one hands the call to torch,
    which gives its own result or error, unchanged."""
    ref, gen = _gens(13)
    ref_out, out = make(), make()
    try:
        expected: torch.Tensor | Exception = torch.randn(
            (4, 256), generator=ref, dtype=dtype, out=ref_out
        )
    except RuntimeError as exc:
        expected = exc
    with kernel_calls() as calls:
        if isinstance(expected, Exception):
            with pytest.raises(type(expected), match=_exact(str(expected))):
                kernel.randn((4, 256), generator=gen, dtype=dtype, out=out)
        else:
            assert kernel.randn((4, 256), generator=gen, dtype=dtype, out=out) is out
            assert out.shape == ref_out.shape == (4, 256) and out.stride() == ref_out.stride()
            assert bitwise_equal(out.to_dense(), expected.to_dense())
    assert calls == []
    assert same_state(gen, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_randn_out_that_matches_is_filled_in_place_by_the_kernel(dtype: torch.dtype) -> None:
    ref, gen = _gens(14)
    expected = torch.randn((4, 256), generator=ref, dtype=dtype)
    out = torch.full((4, 256), 7.0, dtype=dtype)
    with kernel_calls() as calls:
        assert kernel.randn((4, 256), generator=gen, dtype=dtype, out=out) is out
    assert calls == [1024]
    assert bitwise_equal(out, expected) and same_state(gen, ref)


# ----------------------------------------------------------------------------- named streams


def test_named_streams_are_delegated_with_every_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-native ``stream`` hands every argument, unchanged, to prenoise.noise.streams."""
    seen: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    result = torch.empty(1)

    def spy(name: str) -> Callable[..., torch.Tensor]:
        def call(*args: Any, **kwargs: Any) -> torch.Tensor:
            seen.append((name, args, kwargs))
            return result

        return call

    for name in ("fill_", "randn", "randn_keep_prefix"):
        monkeypatch.setattr(noise_streams, name, spy(name))
    gen, out = torch.Generator(), torch.empty(64)
    assert normal.fill_normal_(out, gen, threads=3, stream="libm") is result
    assert (
        normal.randn((8, 8), generator=gen, dtype=torch.float16, out=out, threads=2, stream="x86")
        is result
    )
    assert normal.randn_keep_prefix((8, 8), (2,), generator=gen, threads=4, stream="x86") is result
    assert seen == [
        ("fill_", (out, gen, "libm"), {"threads": 3}),
        (
            "randn",
            ((8, 8),),
            {"generator": gen, "stream": "x86", "dtype": torch.float16, "out": out, "threads": 2},
        ),
        ("randn_keep_prefix", ((8, 8), (2,)), {"generator": gen, "stream": "x86"}),
    ]


# ----------------------------------------------------------------------------- keep-prefix edges


def _unmodelled(seed: int) -> tuple[torch.Generator, torch.Generator]:
    """Two generators at a position torch accepts but the kernel does not model."""
    ref, gen = _gens(seed)
    torch.randn(40, generator=ref)
    state = ref.get_state()
    state[8:24] = torch.tensor(list(struct.pack("<iiQ", 5, 1, 100)), dtype=torch.uint8)
    ref.set_state(state)
    gen.set_state(state)
    return ref, gen


def test_keep_prefix_falls_back_to_torch_at_an_unmodelled_position() -> None:
    ref, gen = _unmodelled(21)
    expected = torch.randn((6, 1000), generator=ref)[:2, :999].contiguous()
    with kernel_calls() as calls:
        got = kernel.randn_keep_prefix((6, 1000), (2, 999), generator=gen)
    assert calls == [6000]  # the kernel path was taken, and handed the draw to torch
    assert bitwise_equal(got, expected) and same_state(gen, ref)


def testkeep_prefix_without_fallback_refuses_an_unmodelled_position() -> None:
    """Non-native noise streams (which torch may not draw) ask for an error instead."""
    code = kernel._active_code()
    assert code >= 0, kernel.backend_status().reason
    _, gen = _unmodelled(22)
    before = gen.get_state()
    assert kernel._ext is not None
    with pytest.raises(
        kernel._ext.UnsupportedPosition,
        match=_exact("generator position not supported by the kernel"),
    ):
        kernel.keep_prefix_with((6, 1000), (2,), gen, code, fallback=False)
    assert torch.equal(gen.get_state(), before)


def test_only_an_unmodelled_position_falls_back_to_torch() -> None:
    """Any other refusal of the extension (here an unknown backend code) is a bug: it raises,
    and the generator has not moved; it never silently becomes a torch draw."""
    _, gen = _gens(23)
    before = gen.get_state()
    text = "backend 99 is not available on this CPU"
    with pytest.raises(ValueError, match=_exact(text)) as raised:
        kernel._fill_with(torch.empty(5000), gen, 1, 99)
    assert type(raised.value) is ValueError
    with pytest.raises(ValueError, match=_exact(text)):
        kernel.keep_prefix_with((6, 1000), (2, 999), gen, 99)
    assert torch.equal(gen.get_state(), before)


@pytest.mark.parametrize(
    ("shape", "keep"),
    [((40, 101), (0, 0)), ((3, 40, 50), (2, 0)), ((3, 40, 50), (0, 40, 50)), ((40, 101), (0,))],
)
def test_keep_prefix_of_nothing_only_moves_the_generator(
    shape: tuple[int, ...], keep: tuple[int, ...]
) -> None:
    ref, gen = _gens(5)
    expected = torch.randn(shape, generator=ref)[tuple(slice(0, k) for k in keep)].contiguous()
    with kernel_calls() as calls:
        got = kernel.randn_keep_prefix(shape, keep, generator=gen)
    assert calls == [math.prod(shape)] and got.numel() == 0
    assert bitwise_equal(got, expected) and same_state(gen, ref)


# ----------------------------------------------------------------------------- default threads


@pytest.mark.parametrize(
    ("numel", "cpus", "threads"),
    [
        (kernel.PARALLEL_MIN_NUMEL - 1, 8, 1),
        (kernel.PARALLEL_MIN_NUMEL, 8, 2),
        (kernel.PARALLEL_MIN_NUMEL, 1, 1),
        (kernel.PARALLEL_MIN_NUMEL, None, 1),  # os.cpu_count() may not know
        (5000, 8, 1),
    ],
)
def test_default_threads(
    monkeypatch: pytest.MonkeyPatch, numel: int, cpus: int | None, threads: int
) -> None:
    """min(2, cpu count) threads from PARALLEL_MIN_NUMEL elements on, else one."""
    assert kernel.backend_status().active
    monkeypatch.setattr(kernel, "os", SimpleNamespace(cpu_count=lambda: cpus))
    seen: list[int] = []
    real_fill = kernel._fill_with

    def fill(out: torch.Tensor, gen: torch.Generator, nthreads: int, code: int) -> None:
        seen.append(nthreads)
        real_fill(out, gen, nthreads, code)

    monkeypatch.setattr(kernel, "_fill_with", fill)
    ref, gen = _gens(numel)
    assert bitwise_equal(kernel.randn(numel, generator=gen), torch.randn(numel, generator=ref))
    assert bitwise_equal(
        kernel.fill_normal_(torch.empty(numel), gen), torch.randn(numel, generator=ref)
    )
    assert seen == [threads, threads] and same_state(gen, ref)
