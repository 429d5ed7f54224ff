"""prenoise.noise.kernel: bit-exact equality with torch's CPU normal draws (values, final state).

Every comparison is between two arms computed in this process; no tensor value is hard-coded.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_spy import kernel_calls
from prenoise.noise import kernel
from waits import READY_CEILING_S

SIZES = [16, 17, 31, 32, 33, 47, 1000, 4099, 100003]


def _gens(seed: int, advance: int = 0) -> tuple[torch.Generator, torch.Generator]:
    """Two generators in the same state; `advance` > 0 first draws a (ragged) torch.randn."""
    a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    if advance:
        torch.randn(advance, generator=a)
        torch.randn(advance, generator=b)
    return a, b


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    view = {torch.float32: torch.int32, torch.float64: torch.int64}.get(x.dtype, torch.int16)
    return torch.equal(x.contiguous().view(view), y.contiguous().view(view))


def _same_state(a: torch.Generator, b: torch.Generator) -> bool:
    return torch.equal(a.get_state(), b.get_state())


@pytest.fixture(autouse=True)
def _fresh_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Re-select the backend per test, and let the kernel (not torch) serve every size >= 16."""
    monkeypatch.setattr(kernel, "KERNEL_MIN_NUMEL", 16)
    kernel._reset_backend()
    yield
    kernel._reset_backend()


def test_small_draws_default_to_torch_with_identical_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert kernel.backend_status().active  # self-check done before counting kernel calls
    monkeypatch.setattr(kernel, "KERNEL_MIN_NUMEL", 1024)
    calls: list[int] = []
    real_fill = kernel._fill_with

    def counting_fill(out: torch.Tensor, gen: torch.Generator, threads: int, code: int) -> None:
        calls.append(out.numel())
        real_fill(out, gen, threads, code)

    monkeypatch.setattr(kernel, "_fill_with", counting_fill)
    for n in (16, 1000, 1023, 1024, 5000):
        ref_gen, gen = _gens(n)
        assert _same_bits(kernel.randn(n, generator=gen), torch.randn(n, generator=ref_gen))
        assert _same_state(gen, ref_gen)
    assert calls == [1024, 5000]


def test_backend_active_on_this_machine() -> None:
    status = kernel.backend_status()
    assert status.active, status
    assert status.name in ("avx512-fma", "avx2-fma", "scalar-libm")


@pytest.mark.parametrize("name", ["avx512-fma", "avx2-fma"])
def test_each_vector_backend_matches_torch(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Both widths of the AVX2 arithmetic, forced one at a time, over sizes, threads and keeps."""
    monkeypatch.setenv(kernel.ENV_VAR, name)
    assert kernel._ext is not None, kernel._IMPORT_ERROR
    supported = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") and getattr(
        kernel._ext, kernel._NAMES[name]
    ) in set(kernel._ext.available_backends())
    if not supported:  # only a CPU (or torch dispatch) without the feature may skip
        pytest.skip(f"{name}: this CPU or torch's dispatch does not have it")
    status = kernel.backend_status()
    # the CPU has it: failing the self-check is a bug, not a reason to skip
    assert (status.name, status.active) == (name, True), status.reason
    for seed, advance in ((0, 0), (3, 37), (2**33 + 1, 625)):
        for n, threads in ((16, 1), (33, 1), (47, 2), (1000, 3), (100003, 2), (300_007, 4)):
            ref_gen, gen = _gens(seed, advance)
            expected = torch.randn(n, generator=ref_gen)
            assert _same_bits(kernel.randn(n, generator=gen, threads=threads), expected)
            assert _same_state(gen, ref_gen)
        ref_gen, gen = _gens(seed, advance)
        full = torch.randn((3, 7, 11, 13), generator=ref_gen)
        got = kernel.randn_keep_prefix((3, 7, 11, 13), (2, 3), generator=gen)
        assert _same_bits(got, full[:2, :3].contiguous()) and _same_state(gen, ref_gen)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [0, 1, 42, 2**32 + 5])
@pytest.mark.parametrize("advance", [0, 37])
def test_randn_matches_torch(n: int, seed: int, advance: int) -> None:
    ref_gen, gen = _gens(seed, advance)
    expected = torch.randn(n, generator=ref_gen)
    with kernel_calls() as calls:
        got = kernel.randn(n, generator=gen)
    assert calls == [n]  # the kernel drew it, not torch
    assert _same_bits(got, expected)
    assert _same_state(gen, ref_gen)
    # later torch draws (vector and scalar path) are unchanged
    assert _same_bits(torch.randn(40, generator=gen), torch.randn(40, generator=ref_gen))
    assert _same_bits(torch.randn(3, generator=gen), torch.randn(3, generator=ref_gen))


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [33, 4099, 1_000_003, 1 << 20])
def test_threads_do_not_change_results(threads: int, n: int) -> None:
    ref_gen, gen = _gens(7, advance=21)
    expected = torch.randn(n, generator=ref_gen)
    with kernel_calls() as calls:
        got = kernel.randn(n, generator=gen, threads=threads)
    assert calls == [n]
    assert _same_bits(got, expected)
    assert _same_state(gen, ref_gen)


def test_fill_normal_matches_normal_and_chunks_compose() -> None:
    ref_gen, gen = _gens(3, advance=5)  # numel < 16: scalar path, caches a normal in the state
    buf_ref, buf = torch.empty(2, 3, 1000), torch.empty(2, 3, 1000)
    buf_ref.normal_(generator=ref_gen)
    assert kernel.fill_normal_(buf, gen) is buf
    assert _same_bits(buf, buf_ref) and _same_state(gen, ref_gen)
    # filling 16-multiple chunks of one flat buffer reproduces one big draw
    ref_gen, gen = _gens(11)
    whole = torch.randn(6000 + 23, generator=ref_gen)
    flat = torch.empty(6000 + 23)
    for lo, hi in ((0, 1600), (1600, 3200), (3200, 6023)):
        kernel.fill_normal_(flat[lo:hi], gen)
    assert _same_bits(flat, whole) and _same_state(gen, ref_gen)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.empty(8),  # numel < 16
        lambda: torch.empty(40, 30).t(),  # not contiguous
        lambda: torch.empty(100, dtype=torch.float64),
        lambda: torch.empty(100, dtype=torch.bfloat16),
        lambda: torch.empty(2, 16, 5, 5).to(memory_format=torch.channels_last),
    ],
)
def test_fill_normal_delegates_uncovered_cases(make: Callable[[], torch.Tensor]) -> None:
    ref_gen, gen = _gens(5, advance=17)
    a, b = make(), make()
    a.normal_(generator=ref_gen)
    kernel.fill_normal_(b, gen)
    assert _same_bits(b, a) and _same_state(gen, ref_gen)


def test_concurrent_draws_on_separate_generators() -> None:
    """The kernel releases the GIL; draws on independent generators from Python threads."""
    seeds = [101, 202, 303, 404]
    expected = [torch.randn(600_001, generator=torch.Generator().manual_seed(s)) for s in seeds]

    def draw(seed: int) -> torch.Tensor:
        return kernel.randn(600_001, generator=torch.Generator().manual_seed(seed), threads=2)

    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(draw, seeds))
    assert all(_same_bits(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("n", [16, 32, 1000, 1008, 4099])
def test_reduced_precision_and_f64(dtype: torch.dtype, n: int) -> None:
    ref_gen, gen = _gens(9, advance=19)
    expected = torch.randn(n, generator=ref_gen, dtype=dtype)
    got = kernel.randn(n, generator=gen, dtype=dtype)
    assert _same_bits(got, expected) and _same_state(gen, ref_gen)


def test_randn_out_argument() -> None:
    ref_gen, gen = _gens(13)
    expected = torch.randn((4, 250), generator=ref_gen)
    out = torch.full((4, 250), 7.0)
    assert kernel.randn((4, 250), generator=gen, out=out) is out
    assert _same_bits(out, expected) and _same_state(gen, ref_gen)
    half = torch.empty(4, 256, dtype=torch.float16)
    expected16 = torch.randn((4, 256), generator=ref_gen, dtype=torch.float16)
    kernel.randn((4, 256), generator=gen, dtype=torch.float16, out=half)
    assert _same_bits(half, expected16) and _same_state(gen, ref_gen)


@pytest.mark.parametrize(
    ("shape", "keep"),
    [
        ((1, 24, 38, 48, 84), (1, 24, 1)),
        ((2, 3, 5, 7, 9), (2, 2, 3)),  # ragged total (1890 % 16 == 2), runs of 63
        ((3, 5, 7, 9), (3, 5, 7, 5)),  # last run inside the recomputed ragged tail
        ((3, 5, 7, 9), (1, 1, 1, 1)),
        ((4, 100), (4,)),
        ((4, 100), ()),
        ((4, 101), (2, 0)),  # nothing kept: only the generator moves
        ((5, 3), (2,)),  # numel < 16: delegated
        ((1000,), (17,)),
    ],
)
@pytest.mark.parametrize("seed", [0, 77])
def test_keep_prefix_matches_draw_then_slice(
    shape: tuple[int, ...], keep: tuple[int, ...], seed: int
) -> None:
    ref_gen, gen = _gens(seed, advance=29)
    full = torch.randn(shape, generator=ref_gen)
    expected = full[tuple(slice(0, k) for k in keep)].contiguous()
    with kernel_calls() as calls:
        got = kernel.randn_keep_prefix(shape, keep, generator=gen)
    assert calls == ([] if full.numel() < 16 else [full.numel()])
    assert _same_bits(got, expected)
    assert _same_state(gen, ref_gen)
    assert _same_bits(torch.randn(50, generator=gen), torch.randn(50, generator=ref_gen))


def test_keep_prefix_rejects_bad_keep() -> None:
    with pytest.raises(ValueError):
        kernel.randn_keep_prefix((4, 5), (5,), generator=torch.Generator())
    with pytest.raises(ValueError):
        kernel.randn_keep_prefix((4, 5), (1, 1, 1), generator=torch.Generator())


def test_unmodelled_generator_position_falls_back_to_torch() -> None:
    ref_gen, gen = _gens(21, advance=40)
    state = ref_gen.get_state()
    state[8:24] = torch.tensor(
        list(struct.pack("<iiQ", 5, 1, 100)), dtype=torch.uint8
    )  # left=5, next=100: valid for torch, but next + left != 625
    ref_gen.set_state(state)
    gen.set_state(state)
    assert _same_bits(kernel.randn(1000, generator=gen), torch.randn(1000, generator=ref_gen))
    assert _same_state(gen, ref_gen)


def test_state_layout_matches_numpy_mt19937() -> None:
    seed, n = 1234, 1000 + 5  # ragged: consumes n + 16 words
    gen = torch.Generator().manual_seed(seed)
    raw = gen.get_state().numpy().tobytes()
    assert len(raw) == 5056
    assert struct.unpack("<QiiQ", raw[:24]) == (seed, 1, 1, 0)
    kernel.randn(n, generator=gen)
    raw = gen.get_state().numpy().tobytes()
    the_seed, left, seeded, nxt = struct.unpack("<QiiQ", raw[:24])
    words = np.frombuffer(raw[24 : 24 + 8 * 624], dtype="<u8")
    consumed = n + 16
    rs = np.random.RandomState(seed)
    rs._bit_generator.random_raw(consumed)  # the same words, drawn raw
    _, key, pos, *_ = rs.get_state(legacy=True)
    assert (the_seed, seeded) == (seed, 1)
    assert nxt == pos == (consumed - 1) % 624 + 1 and left == 625 - nxt
    assert np.array_equal(words, np.asarray(key, dtype=np.uint64))
    # the cached-normal fields: zero and invalid after vector draws only
    normal_x, normal_y, normal_rho, valid = struct.unpack("<dddi", raw[5016:5044])
    f_sample, f_valid = struct.unpack("<f?", raw[5048:5053])
    assert (normal_x, normal_y, normal_rho, valid, f_sample, f_valid) == (0, 0, 0, 0, 0, False)
    # a scalar draw (numel < 16) caches its second double in normal_y / normal_is_valid
    torch.randn(1, generator=gen)
    assert struct.unpack("<i", gen.get_state().numpy().tobytes()[5040:5044]) == (1,)
    # uniforms are (word & 0xFFFFFF) * 2**-24, one 32-bit word each
    uni = torch.rand(40, generator=torch.Generator().manual_seed(seed))
    words40 = np.random.RandomState(seed)._bit_generator.random_raw(40)
    assert np.array_equal(uni.numpy(), ((words40 & 0xFFFFFF) * 2.0**-24).astype(np.float32))


def test_env_var_forces_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernel.ENV_VAR, "torch")
    status = kernel.backend_status()
    assert (status.name, status.active) == ("torch", False)
    assert kernel.ENV_VAR in status.reason
    ref_gen, gen = _gens(4)
    assert _same_bits(kernel.randn(1001, generator=gen), torch.randn(1001, generator=ref_gen))
    got = kernel.randn_keep_prefix((6, 100), (2,), generator=gen)
    assert _same_bits(got, torch.randn((6, 100), generator=ref_gen)[:2].contiguous())
    assert _same_state(gen, ref_gen)


def test_self_check_catches_a_corrupted_result(caplog: pytest.LogCaptureFixture) -> None:
    def flip_last_bit(t: torch.Tensor) -> None:
        if t.numel() == 100003:
            t.view(torch.int32)[12345] ^= 1

    with caplog.at_level(logging.WARNING, logger="prenoise.noise.kernel"):
        status = kernel._resolve(_corrupt=flip_last_bit)
        assert kernel.backend_status() is status  # decided once per process
    assert (status.name, status.active) == ("torch", False)
    assert "n=100003" in status.reason
    warnings = [r for r in caplog.records if r.name == "prenoise.noise.kernel"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    ref_gen, gen = _gens(8)  # and the fallback still gives torch's numbers
    assert _same_bits(kernel.randn(777, generator=gen), torch.randn(777, generator=ref_gen))


def test_scalar_backend_matches_torch_default_capability() -> None:
    script = textwrap.dedent(
        """
        import torch
        from prenoise.noise import kernel
        kernel.KERNEL_MIN_NUMEL = 16
        st = kernel.backend_status()
        assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
        assert (st.name, st.active) == ("scalar-libm", True), st
        for seed, n in ((0, 16), (1, 17), (2, 1000), (3, 100003)):
            a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
            x, y = torch.randn(n, generator=a), kernel.randn(n, generator=b)
            assert torch.equal(x.view(torch.int32), y.view(torch.int32)), (seed, n)
            assert torch.equal(a.get_state(), b.get_state())
        print("ok")
        """
    )
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    env.pop(kernel.ENV_VAR, None)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=5000),
    seed=st.integers(min_value=0, max_value=2**40),
    threads=st.integers(min_value=1, max_value=4),
    advance=st.sampled_from([0, 1, 3, 17, 623, 624, 625, 1249]),
)
def test_property_randn_equals_torch(n: int, seed: int, threads: int, advance: int) -> None:
    ref_gen, gen = _gens(seed, advance)
    expected = torch.randn(n, generator=ref_gen)
    with kernel_calls() as calls:
        got = kernel.randn(n, generator=gen, threads=threads)
    assert calls == ([n] if n >= 16 else [])
    assert _same_bits(got, expected)
    assert _same_state(gen, ref_gen)


def _vm_flags_at(address: int) -> set[str] | None:
    """The VmFlags of the mapping that holds `address` in /proc/self/smaps (None: not Linux)."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return set(line.split()[1:])
    return None


def test_empty_advises_huge_pages_only_for_large_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    advised: list[int] = []
    assert kernel._ext is not None
    real = kernel._ext

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def advise_huge_pages(self, ptr: int, nbytes: int) -> int:
            advised.append(nbytes)
            return int(real.advise_huge_pages(ptr, nbytes))

    monkeypatch.setattr(kernel, "_ext", Spy())
    small = kernel.empty((2, 1000))
    assert small.shape == (2, 1000) and small.dtype == torch.float32 and advised == []
    big = kernel.empty((kernel.HUGE_PAGE_MIN_BYTES // 2,), dtype=torch.float16)
    assert advised == [kernel.HUGE_PAGE_MIN_BYTES] and big.dtype == torch.float16
    # an ordinary torch allocation: its storage can still be resized by torch
    big.resize_(10)
    assert big.shape == (10,)
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, "0")
    kernel.empty((kernel.HUGE_PAGE_MIN_BYTES // 4,))
    assert advised == [kernel.HUGE_PAGE_MIN_BYTES]  # switched off: no further advice


def test_advice_marks_fresh_memory_huge_page_eligible_and_skips_resident_memory() -> None:
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        pytest.skip("no transparent huge pages on this system")
    if "[never]" in mode:
        pytest.skip("transparent huge pages are disabled")
    assert kernel._ext is not None
    size = 8 << 20
    region = mmap.mmap(-1, size)  # a fresh anonymous mapping, like glibc's for big buffers
    view = ctypes.c_char.from_buffer(region)
    address = ctypes.addressof(view)
    advised = kernel._ext.advise_huge_pages(address, size)
    assert advised >= 4 << 20  # at least two aligned 2 MiB pages inside 8 MiB
    flags = _vm_flags_at(address + size // 2)
    assert flags is not None and "hg" in flags
    region.write(b"\1" * size)  # now resident: it will not fault, so it is left alone
    assert kernel._ext.advise_huge_pages(address, size) == 0
    del view
    region.close()


@pytest.mark.parametrize(("threads", "shape"), [(1, (1, 48, 45, 48, 84)), (2, (8_709_131,))])
def test_randn_large_fresh_tensor_matches_torch(threads: int, shape: tuple[int, ...]) -> None:
    """Draws big enough for the huge-page allocation path (>= 32 MiB) stay bit-exact."""
    ref_gen, gen = _gens(11, advance=5)
    expected = torch.randn(shape, generator=ref_gen)
    got = kernel.randn(shape, generator=gen, threads=threads)
    assert got.numel() * 4 >= kernel.HUGE_PAGE_MIN_BYTES
    assert _same_bits(got, expected) and _same_state(gen, ref_gen)


def test_huge_page_status_follows_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, "0")
    assert kernel.huge_page_status() == f"off ({kernel.HUGE_PAGES_ENV_VAR}=0)"
    monkeypatch.delenv(kernel.HUGE_PAGES_ENV_VAR)
    assert not kernel.huge_page_status().startswith("off (PRENOISE")


def _advance_16(generator: torch.Generator) -> None:
    """A wrong final state: 16 more words consumed than torch would."""
    torch.randn(16, generator=generator)


@pytest.mark.parametrize(
    ("part", "reason"),
    [
        ("values", "values differ for seed=0 n=1000 threads=1"),
        ("state", "generator state differs for seed=0 n=1000"),
        ("keep_values", "keep-prefix values differ for seed=0 keep=(2, 1)"),
        ("keep_state", "keep-prefix generator state differs for seed=0 keep=(2, 1)"),
    ],
)
def test_self_check_refuses_each_kind_of_wrong_result(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, part: str, reason: str
) -> None:
    """Corrupt, in turn, the values, the final generator state and the keep-prefix result (its
    values, then its state) of every candidate backend: the self-check must refuse each, and the
    process must fall back to torch (the kernel is never called again)."""
    real_fill, real_keep = kernel._fill_with, kernel.keep_prefix_with

    def fill(out: torch.Tensor, gen: torch.Generator, *args: object) -> None:
        real_fill(out, gen, *args)  # type: ignore[arg-type]
        if out.numel() == 1000 and part == "values":
            out.view(torch.int32)[999] ^= 1
        if out.numel() == 1000 and part == "state":
            _advance_16(gen)

    def keep(shape: tuple[int, ...], keep: tuple[int, ...], gen: torch.Generator, *args: object):
        got = real_keep(shape, keep, gen, *args)  # type: ignore[arg-type]
        if part == "keep_values":
            got.view(-1).view(torch.int32)[-1] ^= 1
        if part == "keep_state":
            _advance_16(gen)
        return got

    monkeypatch.setattr(kernel, "_fill_with", fill)
    monkeypatch.setattr(kernel, "keep_prefix_with", keep)
    with caplog.at_level(logging.WARNING, logger="prenoise.noise.kernel"):
        status = kernel.backend_status()
    assert (status.name, status.active) == ("torch", False), status
    assert status.reason.startswith("self-check against torch failed")
    candidates = [n for n in ("avx512-fma", "avx2-fma", "scalar-libm") if f"{n}: " in status.reason]
    assert candidates and all(f"{n}: {reason}" in status.reason for n in candidates)
    assert [r.levelno for r in caplog.records if r.name == "prenoise.noise.kernel"] == [
        logging.WARNING
    ]

    # the fallback is engaged: torch serves every draw, the kernel is never called
    called: list[int] = []
    monkeypatch.setattr(kernel, "_fill_with", lambda out, *a: called.append(out.numel()))
    monkeypatch.setattr(kernel, "keep_prefix_with", lambda shape, *a: called.append(0))
    ref_gen, gen = _gens(8)
    assert _same_bits(kernel.randn(5000, generator=gen), torch.randn(5000, generator=ref_gen))
    got = kernel.randn_keep_prefix((6, 1000), (2,), generator=gen)
    assert _same_bits(got, torch.randn((6, 1000), generator=ref_gen)[:2].contiguous())
    buf, ref = torch.empty(3000), torch.empty(3000)
    kernel.fill_normal_(buf, gen)
    ref.normal_(generator=ref_gen)
    assert _same_bits(buf, ref) and _same_state(gen, ref_gen)
    assert called == []
