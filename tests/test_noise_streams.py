"""prenoise.noise.streams: the x86 and libm streams equal torch under the matching CPU capability
(values and generator state), the portable x86 code equals the AVX code, and a stream whose
self-check against the golden digests fails is refused, never drawn differently."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import prenoise
from bitwise import bitwise_equal, same_state
from prenoise.noise import kernel
from prenoise.noise import streams as noise_streams
from prenoise.noise.streams import NoiseStreamError
from prenoise.preparation.draws import (
    Draw,
    HalfDrawRule,
    NoisePlan,
    Stream,
    run_draw,
    run_plan,
    run_stream,
)
from waits import READY_CEILING_S

LOCAL_X86 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
needs_x86_torch = pytest.mark.skipif(not LOCAL_X86, reason="local torch does not draw x86 here")
needs_kernel = pytest.mark.skipif(kernel._ext is None, reason="C kernel not built")
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


@pytest.fixture
def fresh_checks() -> Iterator[None]:
    """Forget self-check results before and after a test that forces or corrupts one."""
    noise_streams._reset()
    yield
    noise_streams._reset()


def _torch_and_stream(
    shape: tuple[int, ...], seed: int, dtype: torch.dtype, stream: str, advance: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Generator, torch.Generator]:
    a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    if advance:  # start from a generator in the middle of its 624-word block
        torch.randn(advance, generator=a)
        torch.randn(advance, generator=b)
    expected = torch.randn(shape, generator=a, dtype=dtype)
    got = prenoise.randn(shape, generator=b, dtype=dtype, stream=stream)
    return expected, got, a, b


@needs_x86_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 1000, 4099, 100003, 1048593])
def test_x86_stream_equals_local_avx_torch(n: int, dtype: torch.dtype) -> None:
    expected, got, a, b = _torch_and_stream((n,), 11, dtype, "x86", advance=37)
    assert bitwise_equal(got, expected)
    assert same_state(a, b)


@needs_x86_torch
@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(16, 5000),
    seed=st.integers(0, 2**32 - 1),
    advance=st.integers(0, 700),
    dtype=st.sampled_from(DTYPES),
)
def test_x86_stream_equals_torch_for_any_size(
    n: int, seed: int, advance: int, dtype: torch.dtype
) -> None:
    expected, got, a, b = _torch_and_stream((n,), seed, dtype, "x86", advance)
    assert bitwise_equal(got, expected)
    assert same_state(a, b)


@needs_kernel
@settings(max_examples=30, deadline=None)
@given(n=st.integers(16, 70000), seed=st.integers(0, 2**32 - 1), threads=st.integers(1, 3))
def test_portable_x86_code_equals_the_avx_code(n: int, seed: int, threads: int) -> None:
    ext = kernel._ext
    assert ext is not None
    available = set(ext.available_backends())
    avx = [c for c in (ext.BACKEND_AVX512, ext.BACKEND_AVX2) if c in available]
    if not avx:
        pytest.skip("no AVX2 here: the portable code is checked against the goldens instead")
    outs, states = [], []
    for code in (avx[0], ext.BACKEND_PORTABLE):
        state = torch.Generator().manual_seed(seed).get_state()
        out = torch.empty(n)
        ext.fill_f32(out.data_ptr(), n, state.data_ptr(), state.numel(), threads, code)
        outs.append(out)
        states.append(state)
    assert bitwise_equal(outs[0], outs[1])
    assert torch.equal(states[0], states[1])


@pytest.mark.usefixtures("fresh_checks")
def test_forced_portable_x86_passes_its_self_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(noise_streams.X86_IMPL_ENV_VAR, "portable")
    status = noise_streams.stream_status("x86")
    if kernel._ext is not None:
        assert status.implementation == "portable-c"
    assert status.float32_error is None and status.float64_error is None
    assert status.checked_cases == len(noise_streams.load_goldens()["streams"]["x86"]["cases"])


_LIBM_SCRIPT = textwrap.dedent(
    """
    import json, torch, prenoise
    from prenoise.noise import streams as noise_streams
    assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
    bad = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for n, seed, advance in ((1, 0, 0), (16, 1, 0), (17, 2, 5), (1000, 3, 600),
                                 (4099, 4, 0), (100003, 5, 17), (1048593, 6, 0)):
            a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
            torch.randn(advance, generator=a); torch.randn(advance, generator=b)
            x = torch.randn(n, generator=a, dtype=dtype)
            y = prenoise.randn(n, generator=b, dtype=dtype, stream="libm")
            same = torch.equal(x.view(torch.uint8), y.view(torch.uint8))
            if not same or not torch.equal(a.get_state(), b.get_state()):
                bad.append(f"{dtype} n={n}")
    print(json.dumps({"bad": bad, "x86": noise_streams.stream_status("x86").usable,
                      "local": noise_streams.local_torch_stream()}))
    """
)


@pytest.mark.slow
def test_libm_stream_equals_torch_default_capability_in_a_subprocess() -> None:
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    out = subprocess.run(
        [sys.executable, "-c", _LIBM_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"bad": [], "x86": True, "local": "libm"}


def test_local_torch_stream_is_detected() -> None:
    expected = "x86" if LOCAL_X86 else "libm"
    assert noise_streams.local_torch_stream() == expected


def _corrupted(dtype: str) -> dict[str, object]:
    goldens = copy.deepcopy(noise_streams.load_goldens())
    for case in goldens["streams"]["x86"]["cases"]:
        if case["dtype"] == dtype and case["counts"] == [1000003]:
            digest = case["sha256"]
            case["sha256"] = digest[:-1] + ("0" if digest[-1] != "0" else "1")
            break
    return goldens


@pytest.mark.usefixtures("fresh_checks")
def test_corrupted_float32_golden_refuses_the_stream() -> None:
    status, _ = noise_streams._resolve("x86", goldens=_corrupted("float32"))
    assert status.float32_error is not None and "values differ" in status.float32_error
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        with pytest.raises(NoiseStreamError, match=r"'x86'.*refused"):
            prenoise.randn(1000, generator=g, dtype=dtype, stream="x86")
    with pytest.raises(NoiseStreamError):
        run_plan(NoisePlan((Stream("s", 0, (Draw("d", (64,)),)),), noise_stream="x86"))
    assert torch.equal(g.get_state(), before)  # refused before drawing anything
    prenoise.randn(1000, generator=g, dtype=torch.float64, stream="x86")  # float64 unaffected


@pytest.mark.usefixtures("fresh_checks")
def test_corrupted_float64_golden_refuses_only_float64() -> None:
    status, _ = noise_streams._resolve("x86", goldens=_corrupted("float64"))
    assert status.float32_error is None and status.float64_error is not None
    g = torch.Generator().manual_seed(0)
    with pytest.raises(NoiseStreamError, match="float64"):
        prenoise.randn(1000, generator=g, dtype=torch.float64, stream="x86")
    prenoise.randn(1000, generator=g, stream="x86")


@pytest.mark.usefixtures("fresh_checks")
def test_wrong_arithmetic_is_refused_by_the_self_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """An implementation drawing different bits (here libm arithmetic posing as x86) fails."""
    libm = noise_streams._implementation("libm")
    monkeypatch.setattr(noise_streams, "_implementation", lambda stream: libm)
    status = noise_streams.stream_status("x86")
    assert not status.usable and "values differ" in (status.float32_error or "")
    with pytest.raises(NoiseStreamError):
        prenoise.randn(64, generator=torch.Generator(), stream="x86")


def test_unknown_stream_names_are_refused() -> None:
    g = torch.Generator()
    with pytest.raises(ValueError, match="unknown noise stream 'arm'"):
        prenoise.randn(64, generator=g, stream="arm")
    with pytest.raises(ValueError, match="unknown noise stream"):
        NoisePlan((), noise_stream="X86")
    with pytest.raises(ValueError, match="unknown noise stream"):
        Stream("s", 0, (), noise_stream="avx2")
    with pytest.raises(ValueError, match="unknown noise stream"):
        prenoise.fill_normal_(torch.empty(64), g, noise_stream="")


@pytest.mark.parametrize("stream", ["x86", "libm"])
def test_plans_record_and_run_their_stream(stream: str) -> None:
    draws = (Draw("a", (3, 17, 5)), Draw("b", (40,), dtype=torch.float64))
    plan = NoisePlan((Stream("s", 123, draws),), noise_stream=stream)
    got = run_plan(plan)
    g = torch.Generator().manual_seed(123)
    assert bitwise_equal(got["a"], prenoise.randn((3, 17, 5), generator=g, stream=stream))
    expected_b = prenoise.randn(40, generator=g, dtype=torch.float64, stream=stream)
    assert bitwise_equal(got["b"], expected_b)
    assert bitwise_equal(run_stream(Stream("t", 123, draws, noise_stream=stream))["a"], got["a"])
    with pytest.raises(ValueError, match="one plan draws one noise stream"):
        NoisePlan((Stream("s", 1, draws, noise_stream=stream),), noise_stream="native")


@needs_x86_torch
def test_stream_draws_cover_keep_half_and_chunks_like_torch() -> None:
    shape = (2, 7, 9, 11)
    cases = [
        (Draw("keep", shape, keep=(1, 5)), lambda t: t[:1, :5].contiguous()),
        (Draw("half", (3, 11), dtype=torch.bfloat16, half_rule=HalfDrawRule.NATIVE), None),
        (Draw("cast", (3, 11), dtype=torch.float16), None),
    ]
    for draw, post in cases:
        a, b = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
        dtype = draw.dtype if draw.native_half else draw.draw_dtype
        expected = torch.randn(draw.shape, generator=a, dtype=dtype)
        expected = (post(expected) if post else expected).to(draw.dtype)
        got = run_draw(draw, b, noise_stream="x86")
        assert bitwise_equal(got, expected), draw.name
        assert same_state(a, b)
    a, b = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
    chunked = prenoise.fill_normal_(torch.empty(5000), b, chunk_elems=1024, noise_stream="x86")
    assert bitwise_equal(chunked, torch.randn(5000, generator=a))
    assert same_state(a, b)


def test_streams_differ_from_each_other_in_float32_only() -> None:
    x = prenoise.randn(4096, generator=torch.Generator().manual_seed(1), stream="x86")
    y = prenoise.randn(4096, generator=torch.Generator().manual_seed(1), stream="libm")
    assert not bitwise_equal(x, y)
    x64 = prenoise.randn(64, generator=torch.Generator(), dtype=torch.float64, stream="x86")
    y64 = prenoise.randn(64, generator=torch.Generator(), dtype=torch.float64, stream="libm")
    assert bitwise_equal(x64, y64)
