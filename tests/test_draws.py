from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bitwise import bitwise_equal, same_state
from kernel_spy import kernel_calls
from prenoise.noise import kernel
from prenoise.noise.layouts import Patchify
from prenoise.preparation.draws import (
    Draw,
    HalfDrawRule,
    NoisePlan,
    ScalarPathError,
    Stream,
    chunk_bounds,
    fill_normal_,
    run_draw,
    run_plan,
    run_stream,
)

SEEDS = (0, 42, 2101)
# below and above the kernel's size threshold (kernel.KERNEL_MIN_NUMEL = 1024)
SHAPES = [
    (16,),
    (17,),
    (31,),
    (33,),
    (1000,),
    (1024,),
    (1025,),
    (3, 7, 11),
    (3, 7, 111),
    (1, 24, 5, 6, 10),
    (2, 1, 9, 8),
]


def gen(seed: int) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(seed)


def mt_position(g: torch.Generator) -> int:
    """The `next` field of torch's CPU generator state (words used in the current block)."""
    return struct.unpack("<QiiQ", bytes(g.get_state()[:24].numpy()))[3]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_draw_equals_plain_randn(seed: int, shape: tuple[int, ...]) -> None:
    g_ref, g = gen(seed), gen(seed)
    expected = torch.randn(shape, generator=g_ref)
    with kernel_calls() as calls:
        got = run_draw(Draw("x", shape), g)
    n = expected.numel()
    assert calls == ([n] if n >= kernel.KERNEL_MIN_NUMEL else [])  # the kernel served it
    assert bitwise_equal(got, expected)
    assert same_state(g, g_ref)
    assert got.is_contiguous() and got.device.type == "cpu"
    # every later draw on the generator is unchanged too
    assert bitwise_equal(torch.randn(40, generator=g), torch.randn(40, generator=g_ref))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [32, 33, 100, 4096])
@pytest.mark.parametrize("rule", list(HalfDrawRule))
def test_half_draws_reproduce_their_rule(
    seed: int, dtype: torch.dtype, n: int, rule: HalfDrawRule
) -> None:
    g_ref, g = gen(seed), gen(seed)
    if rule is HalfDrawRule.NATIVE:
        expected = torch.randn(n, dtype=dtype, generator=g_ref)
    else:
        expected = torch.randn(n, generator=g_ref).to(dtype)
    draw = Draw("x", (n,), dtype, half_rule=rule)
    assert bitwise_equal(run_draw(draw, g), expected)
    assert same_state(g, g_ref)
    cast_path = rule is HalfDrawRule.FLOAT32_THEN_CAST or n % 16 == 0
    assert draw.draw_dtype == (torch.float32 if cast_path else dtype)


def test_float64_draw_is_its_own_stream() -> None:
    g_ref, g = gen(7), gen(7)
    expected = torch.randn(50, dtype=torch.float64, generator=g_ref)
    assert bitwise_equal(run_draw(Draw("x", (50,), torch.float64), g), expected)
    assert same_state(g, g_ref)


@pytest.mark.parametrize(
    "draw",
    [
        Draw("a", (100,)),
        Draw("b", (32,)),
        Draw("c", (33,), torch.bfloat16, half_rule=HalfDrawRule.NATIVE),
        Draw("d", (33,), torch.bfloat16),
        Draw("e", (50,), torch.float64),
        Draw("f", (1, 8, 3, 4, 4), keep=(1, 8, 1)),
    ],
)
def test_generator_words_match_torch(draw: Draw) -> None:
    g = gen(3)
    run_draw(draw, g)
    assert draw.generator_words == mt_position(g)  # all fit in the first 624-word block


def test_generator_words_match_numpy_mt19937_across_blocks() -> None:
    # 5000 words cross several MT blocks: the state must equal numpy's legacy MT19937 after
    # consuming exactly `generator_words` 32-bit words.
    draw = Draw("x", (4990,))
    g = gen(2101)
    run_draw(draw, g)
    words = draw.generator_words
    assert words == 4990 + 16
    rs = np.random.RandomState(2101)
    rs.randint(0, 2**32, size=words, dtype=np.uint64)  # one 32-bit word per value
    _, key, pos, *_ = rs.get_state()
    raw = g.get_state()[24 : 24 + 624 * 8].numpy().view(np.uint64)
    assert np.array_equal(raw.astype(np.uint32), key)
    assert mt_position(g) % 624 == pos % 624


def test_keep_prefix_and_patchify_equal_plain_code() -> None:
    shape, t_k = (1, 24, 6, 8, 12), 2
    g_ref, g = gen(42), gen(42)
    full = torch.randn(shape, generator=g_ref)
    kept = full[:, :, :t_k]
    expected = (
        kept.reshape(1, 24, t_k, 1, 4, 2, 6, 2)
        .permute(0, 2, 4, 6, 1, 3, 5, 7)
        .reshape(t_k * 4 * 6, 96)
        .contiguous()
    )
    draw = Draw("cond", shape, keep=(1, 24, t_k), layout=Patchify())
    got = run_draw(draw, g)
    assert draw.output_shape == (t_k * 4 * 6, 96)
    assert bitwise_equal(got, expected)
    assert same_state(g, g_ref)
    assert got.untyped_storage().nbytes() == got.numel() * 4  # owns only the kept rows


def kernel_chunks(n: int, chunk: int) -> list[int]:
    """Sizes of the chunks of a chunked fill that the kernel serves (the others go to torch)."""
    sizes = [stop - start for start, stop in chunk_bounds(n, chunk)]
    return [size for size in sizes if size >= kernel.KERNEL_MIN_NUMEL]


@pytest.mark.parametrize("n", [16, 17, 31, 32, 33, 100, 1000, 4097, 10_007])
@pytest.mark.parametrize("chunk", [16, 32, 48, 1024, 2048])
def test_chunked_fill_equals_one_shot(n: int, chunk: int) -> None:
    g_ref, g = gen(5), gen(5)
    torch.randn(19, generator=g_ref), torch.randn(19, generator=g)  # advanced, ragged
    expected = torch.randn(n, generator=g_ref)
    with kernel_calls() as calls:
        got = fill_normal_(torch.empty(n), g, chunk_elems=chunk)
    assert calls == kernel_chunks(n, chunk)
    assert bitwise_equal(got, expected)
    assert same_state(g, g_ref)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1024, 40_000),
    chunk_blocks=st.integers(64, 1000),
    seed=st.integers(0, 2**32 - 1),
    prior=st.integers(0, 40),
)
def test_chunking_property(n: int, chunk_blocks: int, seed: int, prior: int) -> None:
    """Every example has at least one chunk above the kernel's threshold: the kernel and torch
    fill chunks of one buffer in turn, and the result is still one `torch.randn`."""
    g_ref, g = gen(seed), gen(seed)
    if prior >= 16:
        torch.randn(prior, generator=g_ref), torch.randn(prior, generator=g)
    expected = torch.randn(n, generator=g_ref)
    chunk = 16 * chunk_blocks
    with kernel_calls() as calls:
        got = fill_normal_(torch.empty(n), g, chunk_elems=chunk)
    assert calls and calls == kernel_chunks(n, chunk)
    assert bitwise_equal(got, expected)
    assert same_state(g, g_ref)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 24), min_size=1, max_size=4),
    chunk_blocks=st.one_of(st.none(), st.integers(64, 128)),
    seed=st.integers(0, 2**32 - 1),
)
def test_draw_property_over_shapes(shape: list[int], chunk_blocks: int | None, seed: int) -> None:
    """Every example is checked: scalar-path draws (numel < 16) must be refused unless allowed,
    and then equal torch too; the kernel serves exactly the fills above its threshold."""
    draw = Draw("x", tuple(shape))
    g_ref, g = gen(seed), gen(seed)
    expected = torch.randn(shape, generator=g_ref)
    chunk = None if chunk_blocks is None else 16 * chunk_blocks
    if draw.takes_scalar_path:
        with pytest.raises(ScalarPathError):
            run_draw(draw, gen(seed), chunk_elems=chunk)
    with kernel_calls() as calls:
        got = run_draw(draw, g, chunk_elems=chunk, allow_scalar_path=draw.takes_scalar_path)
    n = draw.numel
    if draw.takes_scalar_path:
        assert calls == []
    elif chunk is None:
        assert calls == ([n] if n >= kernel.KERNEL_MIN_NUMEL else [])
    else:
        assert calls == kernel_chunks(n, chunk)
    assert bitwise_equal(got, expected)
    assert same_state(g, g_ref)


def test_chunk_bounds_merge_short_tail() -> None:
    assert list(chunk_bounds(100, 32)) == [(0, 32), (32, 64), (64, 100)]
    assert list(chunk_bounds(96, 32)) == [(0, 32), (32, 64), (64, 96)]
    assert list(chunk_bounds(10, 32)) == [(0, 10)]
    with pytest.raises(ValueError, match="multiple of 16"):
        list(chunk_bounds(100, 24))


def test_fill_into_preallocated_buffer_is_the_result() -> None:
    buf = torch.empty(4, 64)
    got = run_draw(Draw("x", (4, 64)), gen(1), out=buf)
    assert got.data_ptr() == buf.data_ptr()
    with pytest.raises(ValueError, match="buffer"):
        run_draw(Draw("x", (4, 64)), gen(1), out=torch.empty(4, 65))


def test_stream_runs_in_order_on_a_callers_generator() -> None:
    g_ref, g = gen(9), gen(9)
    a, b = torch.randn(2, 40, generator=g_ref), torch.randn(33, generator=g_ref)
    out = run_stream(Stream("s", g, (Draw("a", (2, 40)), Draw("b", (33,)))))
    assert bitwise_equal(out["a"], a) and bitwise_equal(out["b"], b)
    assert same_state(g, g_ref)


def test_seeded_stream_uses_a_fresh_generator_each_run() -> None:
    stream = Stream("s", 42, (Draw("a", (64,)),))
    assert bitwise_equal(run_stream(stream)["a"], run_stream(stream)["a"])
    assert bitwise_equal(run_stream(stream)["a"], torch.randn(64, generator=gen(42)))


def test_plan_reports_sizes_and_runs_all_streams() -> None:
    plan = NoisePlan(
        (
            Stream("v", 1, (Draw("video", (1, 24, 3, 4, 4), layout=Patchify()),)),
            Stream("a", 1, (Draw("audio", (6, 32)),)),
            Stream("c", 1, (Draw("cond", (1, 24, 4, 4, 4), keep=(1, 24, 1)),)),
        )
    )
    assert plan.numel == 1152 + 192 + 1536
    assert plan.output_nbytes == (1152 + 192 + 384) * 4
    assert plan.generator_words == {"v": 1152, "a": 192, "c": 1536}
    out = run_plan(plan)
    assert set(out) == {"video", "audio", "cond"} == set(plan.draw_names)
    assert out["video"].shape == (12, 96)


def test_plan_refuses_scalar_path_unless_allowed() -> None:
    with pytest.raises(ScalarPathError, match="tiny"):
        NoisePlan((Stream("s", 0, (Draw("tiny", (3, 5)),)),))
    plan = NoisePlan((Stream("s", 0, (Draw("tiny", (3, 5)),)),), allow_scalar_path=True)
    assert plan.generator_words == {"s": None}
    expected = torch.randn(3, 5, generator=gen(0))
    assert bitwise_equal(run_plan(plan)["tiny"], expected)


def test_fill_refuses_non_contiguous_output() -> None:
    out = torch.empty(8, 8).t()
    with pytest.raises(ScalarPathError, match="non-contiguous"):
        fill_normal_(out, gen(0))


def test_plan_refuses_shared_generator_and_duplicate_names() -> None:
    g = gen(0)
    with pytest.raises(ValueError, match="share one generator"):
        NoisePlan((Stream("a", g, (Draw("x", (16,)),)), Stream("b", g, (Draw("y", (16,)),))))
    with pytest.raises(ValueError, match="duplicate draw names"):
        NoisePlan((Stream("a", 0, (Draw("x", (16,)),)), Stream("b", 0, (Draw("x", (16,)),))))


def test_bad_draw_descriptions_are_rejected() -> None:
    with pytest.raises(ValueError, match="prefix"):
        Draw("x", (1, 24, 4), keep=(1, 24, 5))
    with pytest.raises(ValueError, match="floating"):
        Draw("x", (16,), torch.int64)
    with pytest.raises(ValueError, match="divisible"):
        Draw("x", (1, 24, 3, 5, 4), layout=Patchify())


def test_draws_never_touch_the_global_rng() -> None:
    before = torch.get_rng_state()
    run_plan(NoisePlan((Stream("s", 3, (Draw("x", (1000,)),)),)))
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize(
    "draw",
    [
        Draw("big", (1, 24, 5, 16, 20)),
        Draw("ragged", (3, 1001)),
        Draw("dependent", (1, 24, 9, 8, 12), keep=(1, 24, 1), layout=Patchify()),
        Draw("dependent_video", (1, 24, 9, 8, 12), keep=(1, 24, 8)),
        Draw("half", (1, 24, 9, 8, 12), torch.bfloat16, keep=(1, 24, 2)),
    ],
)
def test_core_draws_equal_with_kernel_and_with_torch(draw: Draw) -> None:
    from prenoise.preparation import draws

    g_kernel, g_torch, g_plain = gen(2101), gen(2101), gen(2101)
    with kernel_calls() as calls:
        with_kernel = run_draw(draw, g_kernel)
    assert calls == [draw.numel]  # the kernel arm really used the kernel
    draws.set_fill_backend(draws._torch_fill)
    try:
        with kernel_calls() as calls:
            with_torch = run_draw(draw, g_torch)
    finally:
        draws.set_fill_backend(None)
    assert calls == []  # ... and the torch arm did not
    assert bitwise_equal(with_kernel, with_torch)
    assert same_state(g_kernel, g_torch)
    # an independent reference: the plain torch code the draw describes, written out by hand
    full = torch.randn(draw.shape, generator=g_plain)
    kept = full if draw.keep is None else full[tuple(slice(0, k) for k in draw.keep)]
    if draw.layout is not None:
        b, c, t, h, w = kept.shape
        kept = kept.reshape(b, c, t, 1, h // 2, 2, w // 2, 2).permute(0, 2, 4, 6, 1, 3, 5, 7)
        kept = kept.reshape(-1, 96)
    assert bitwise_equal(with_kernel, kept.contiguous().to(draw.dtype))
    assert same_state(g_kernel, g_plain)


def test_doctor_reports_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from prenoise.cli.commands import main

    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "noise backend" in out and "2 MiB pages" in out
