"""Draws: exact error texts, boundaries and argument routing (found by mutation testing)."""

from __future__ import annotations

import re
import threading

import pytest
import torch

from bitwise import bitwise_equal, same_state
from prenoise.guards.budget import BudgetExceededError, format_bytes
from prenoise.guards.cancel import Cancelled
from prenoise.noise import streams as noise_streams
from prenoise.preparation import draws
from prenoise.preparation.draws import (
    Draw,
    NoisePlan,
    ScalarPathError,
    Stream,
    run_draw,
    run_plan,
    run_stream,
    set_fill_backend,
)


def _raises(exc: type[Exception], text: str) -> pytest.RaisesContext[Exception]:
    return pytest.raises(exc, match=f"^{re.escape(text)}$")


class _Recorded(Exception):
    pass


def test_containers_are_frozen_into_tuples() -> None:
    d = Draw("d", [16])  # type: ignore[arg-type]
    stream = Stream("s", 0, [d])  # type: ignore[arg-type]
    plan = NoisePlan([stream])  # type: ignore[arg-type]
    assert d.shape == (16,) and type(stream.draws) is tuple and type(plan.streams) is tuple
    assert stream.draws == (d,) and plan.streams == (stream,)


def test_stream_errors_read_exactly() -> None:
    d = Draw("d", (16,))
    with _raises(ValueError, "stream 's': duplicate draw names ['d', 'd']"):
        Stream("s", 0, (d, d))


def test_plan_errors_read_exactly() -> None:
    d, e = Draw("d", (16,)), Draw("e", (16,))
    with _raises(
        ValueError,
        "stream 's' names noise stream 'x86' but the plan's is 'native'; "
        "one plan draws one noise stream",
    ):
        NoisePlan((Stream("s", 0, (d,), noise_stream="x86"),))
    with _raises(ValueError, "duplicate draw names in plan: ['d', 'd']"):
        NoisePlan((Stream("s", 0, (d,)), Stream("t", 1, (d,))))
    with _raises(ValueError, "duplicate stream names in plan: ['s', 's']"):
        NoisePlan((Stream("s", 0, (d,)), Stream("s", 1, (e,))))
    g = torch.Generator().manual_seed(0)
    with _raises(ValueError, "two streams of a plan share one generator object; use one stream"):
        NoisePlan((Stream("s", g, (d,)), Stream("t", g, (e,))))
    with _raises(
        ScalarPathError,
        "draw 'x' in stream 's' has 15 elements (< 16): torch draws it on its stateful scalar "
        "path; pass allow_scalar_path=True to accept that",
    ):
        NoisePlan((Stream("s", 0, (Draw("x", (15,)),)),))


def test_plan_accepts_distinct_generators_and_empty_draws() -> None:
    plan = NoisePlan(
        (
            Stream("s", torch.Generator().manual_seed(0), (Draw("d", (16,)),)),
            Stream("t", torch.Generator().manual_seed(0), (Draw("e", (0,)),)),
        )
    )
    assert plan.draw_names == ("d", "e")
    assert run_plan(plan)["e"].shape == (0,)


def test_plan_refuses_a_one_element_draw() -> None:
    with pytest.raises(ScalarPathError, match="has 1 elements"):
        NoisePlan((Stream("s", 0, (Draw("x", (1,)),)),))


def test_plan_budget_is_inclusive_and_names_the_largest_draw() -> None:
    small, large = Draw("small", (16,)), Draw("large", (4, 64))
    stream = Stream("s", 0, (small, large))
    peak = NoisePlan((stream,)).peak_nbytes
    assert NoisePlan((stream,), max_bytes=peak).max_bytes == peak
    with _raises(
        BudgetExceededError,
        f"noise plan needs {format_bytes(peak)}, more than its max_bytes "
        f"{format_bytes(peak - 1)} (largest draw "
        "'large', shape (4, 64)); draw smaller shapes or raise max_bytes",
    ):
        NoisePlan((stream,), max_bytes=peak - 1)


def test_sizes_follow_the_dtype() -> None:
    assert Draw("d", (16,), torch.float64).output_nbytes == 128
    assert Draw("d", (16,), torch.float64).buffer_nbytes == 128
    assert Draw("d", (32,), torch.float16).output_nbytes == 64
    assert Draw("d", (32,), torch.float16).buffer_nbytes == 128  # drawn as float32, then cast


def _record_require_fits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    calls: list[tuple[object, ...]] = []

    def record(nbytes: int, what: str, budget: int | None = None, fix: str = "") -> None:
        calls.append((nbytes, what, budget, fix))
        raise _Recorded

    monkeypatch.setattr(draws, "require_fits", record)
    return calls


def test_memory_check_starts_at_64_mib_and_counts_a_given_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _record_require_fits(monkeypatch)
    limit = draws._CHECK_MIN_BYTES
    just_below = Draw("small", ((limit - 64) // 4,))
    assert just_below.peak_nbytes < limit
    at_limit = Draw("big", (limit // 4,))
    assert at_limit.peak_nbytes == limit
    run_draw(Draw("tiny", (16,)), torch.Generator().manual_seed(0))
    assert calls == []
    with pytest.raises(_Recorded):
        run_draw(at_limit, torch.Generator().manual_seed(0))
    assert calls == [(limit, f"draw 'big' of shape ({limit // 4},)", None, "draw a smaller shape")]
    # A caller's buffer is already allocated: only the cast result would be new.
    half = Draw("half", (limit // 4,), torch.float16)
    calls.clear()
    with pytest.raises(_Recorded):
        run_draw(half, torch.Generator(), out=torch.empty(limit // 4))
    assert calls[0][0] == half.peak_nbytes - half.buffer_nbytes == half.output_nbytes


def test_run_stream_takes_the_named_noise_stream() -> None:
    draw = Draw("d", (64,))
    native = run_stream(Stream("s", 5, (draw,)))["d"]
    libm = noise_streams.randn((64,), generator=torch.Generator().manual_seed(5), stream="libm")
    assert not bitwise_equal(native, libm), "this test needs libm to differ from native here"
    assert bitwise_equal(run_stream(Stream("s", 5, (draw,)), noise_stream="libm")["d"], libm)
    declared = Stream("s", 5, (draw,), noise_stream="libm")
    assert bitwise_equal(run_stream(declared)["d"], libm)
    assert bitwise_equal(run_stream(declared, noise_stream="libm")["d"], libm)
    with _raises(ValueError, "stream 's' is declared 'libm', run as 'x86'"):
        run_stream(declared, noise_stream="x86")


def test_run_plan_passes_stream_cancel_and_chunks_on() -> None:
    draw = Draw("d", (64,))
    libm = noise_streams.randn((64,), generator=torch.Generator().manual_seed(5), stream="libm")
    plan = NoisePlan((Stream("s", 5, (draw,)),), noise_stream="libm")
    assert bitwise_equal(run_plan(plan)["d"], libm)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        run_plan(NoisePlan((Stream("s", 5, (draw,)),)), cancel=cancel)

    chunks: list[int] = []

    def recording_fill(out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        chunks.append(out.numel())
        return out.normal_(generator=generator)

    set_fill_backend(recording_fill)
    try:
        got = run_plan(NoisePlan((Stream("s", 5, (draw,)),)), chunk_elems=16)
    finally:
        set_fill_backend(None)
    assert chunks == [16, 16, 16, 16]
    g = torch.Generator().manual_seed(5)
    assert bitwise_equal(got["d"], torch.randn(64, generator=g))


def test_run_stream_passes_cancel_and_scalar_path_on() -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        run_stream(Stream("s", 5, (Draw("d", (64,)),)), cancel=cancel)
    tiny = Stream("s", 5, (Draw("d", (3,)),))
    with pytest.raises(ScalarPathError):
        run_stream(tiny)
    g = torch.Generator().manual_seed(5)
    assert bitwise_equal(run_stream(tiny, allow_scalar_path=True)["d"], torch.randn(3, generator=g))


def test_a_callers_generator_is_advanced_in_place() -> None:
    g, ref = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    out = run_stream(Stream("s", g, (Draw("d", (40,)),)))["d"]
    assert bitwise_equal(out, torch.randn(40, generator=ref)) and same_state(g, ref)


def test_draw_errors_read_exactly() -> None:
    with _raises(ValueError, "draw 'd': negative size in shape (4, -1)"):
        Draw("d", (4, -1))
    with _raises(ValueError, "draw 'd': keep (0,) is not a non-empty prefix of (4, 16)"):
        Draw("d", (4, 16), keep=(0,))
    with _raises(ValueError, "draw 'd': keep (4, 16, 1) is not a non-empty prefix of (4, 16)"):
        Draw("d", (4, 16), keep=(4, 16, 1))


def test_keep_is_frozen_and_may_cover_every_dim() -> None:
    d = Draw("d", (4, 16), keep=[2])  # type: ignore[arg-type]
    assert type(d.keep) is tuple and d.keep == (2,) and d.kept_shape == (2, 16)
    full = Draw("d", (4, 16), keep=(2, 8))
    assert full.kept_shape == (2, 8)
    g, ref = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    expected = torch.randn((4, 16), generator=ref)[:2, :8].contiguous()
    assert bitwise_equal(run_draw(full, g), expected) and same_state(g, ref)


def test_chunk_bounds_refuses_zero_with_its_own_message() -> None:
    with _raises(ValueError, "chunk_elems must be a positive multiple of 16, got 0"):
        list(draws.chunk_bounds(64, 0))


def test_fill_errors_read_exactly() -> None:
    g = torch.Generator()
    with _raises(ValueError, "fill_normal_ needs a CPU tensor, got meta"):
        draws.fill_normal_(torch.empty(64, device="meta"), g)
    with _raises(
        ScalarPathError,
        "a tensor of 15 elements is filled on torch's stateful scalar path; "
        "pass allow_scalar_path=True to accept",
    ):
        draws.fill_normal_(torch.empty(15), g)
    with _raises(
        ScalarPathError,
        "a non-contiguous tensor of 32 elements is filled on torch's stateful scalar path; "
        "pass allow_scalar_path=True to accept",
    ):
        draws.fill_normal_(torch.empty(64)[::2], g)
    with _raises(ValueError, "draw 'h': a native half draw cannot fill a buffer"):
        run_draw(
            Draw("h", (17,), torch.float16, half_rule=draws.HalfDrawRule.NATIVE),
            g,
            out=torch.empty(17, dtype=torch.float16),
        )


def _recording_backend() -> tuple[list[int], draws.FillFn]:
    chunks: list[int] = []

    def fill(out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        chunks.append(out.numel())
        return out.normal_(generator=generator)

    return chunks, fill


def test_the_fill_backend_serves_float32_only() -> None:
    chunks, fill = _recording_backend()
    set_fill_backend(fill)
    try:
        draws.fill_normal_(torch.empty(64, dtype=torch.float64), torch.Generator())
        assert chunks == []
        draws.fill_normal_(torch.empty(64), torch.Generator())
    finally:
        set_fill_backend(None)
    assert chunks == [64]


def test_only_a_cancellable_fill_is_chunked_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(draws, "CANCEL_CHUNK_ELEMS", 32)
    chunks, fill = _recording_backend()
    set_fill_backend(fill)
    try:
        draws.fill_normal_(torch.empty(100), torch.Generator())
        assert chunks == [100]
        chunks.clear()
        draws.fill_normal_(torch.empty(100), torch.Generator(), cancel=threading.Event())
        assert chunks == [32, 32, 36]
    finally:
        set_fill_backend(None)


def _keep_prefix_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    from prenoise.noise import normal

    calls: list[tuple[object, ...]] = []
    real = normal.randn_keep_prefix

    def spy(shape: object, keep: object, **kwargs: object) -> torch.Tensor:
        calls.append((shape, keep, kwargs.get("stream")))
        return real(shape, keep, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(normal, "randn_keep_prefix", spy)
    return calls


def test_the_keep_prefix_path_is_taken_exactly_when_it_applies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _keep_prefix_calls(monkeypatch)
    keep = Draw("k", (4, 256), keep=(1,))

    def expect(**kwargs: object) -> torch.Tensor:
        g, ref = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
        got = run_draw(keep, g, **kwargs)  # type: ignore[arg-type]
        full = torch.randn((4, 256), generator=ref)
        assert bitwise_equal(got, full[:1].contiguous()) and same_state(g, ref)
        return full

    expect()
    assert calls == [((4, 256), (1,), "native")]
    calls.clear()
    buffer = torch.empty((4, 256))
    full = expect(out=buffer)  # a caller's buffer is filled whole
    assert calls == [] and bitwise_equal(buffer, full)
    expect(chunk_elems=256)  # chunked fills go through the chunk loop
    assert calls == []
    chunks, fill = _recording_backend()
    set_fill_backend(fill)
    try:
        expect()  # a custom backend must see every value
    finally:
        set_fill_backend(None)
    assert calls == [] and chunks == [1024]
    g = torch.Generator().manual_seed(8)
    run_draw(Draw("k64", (4, 256), torch.float64, keep=(1,)), g)
    assert calls == []
    run_draw(Draw("tiny", (1, 15), keep=(1,)), g, allow_scalar_path=True)
    assert calls == []


def test_a_keep_prefix_draw_in_a_named_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _keep_prefix_calls(monkeypatch)
    g = torch.Generator().manual_seed(4)
    got = run_draw(Draw("k", (4, 256), keep=(1,)), g, noise_stream="libm")
    ref = torch.Generator().manual_seed(4)
    full = noise_streams.randn((4, 256), generator=ref, stream="libm")
    assert calls == [((4, 256), (1,), "libm")]
    assert bitwise_equal(got, full[:1].contiguous()) and same_state(g, ref)


class _SetAfter:
    """A cancel event that reads unset `n` times, then set."""

    def __init__(self, n: int) -> None:
        self.reads = 0
        self.n = n

    def is_set(self) -> bool:
        self.reads += 1
        return self.reads > self.n


def test_a_keep_prefix_draw_checks_cancel_after_drawing() -> None:
    with _raises(Cancelled, "draw 'k': cancelled"):
        run_draw(Draw("k", (4, 256), keep=(1,)), torch.Generator(), cancel=_SetAfter(1))
