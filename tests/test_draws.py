from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bitwise import bitwise_equal, same_state
from prenoise.draws import (
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
from prenoise.layouts import Patchify

SEEDS = (0, 42, 2101)
SHAPES = [(16,), (17,), (31,), (33,), (1000,), (3, 7, 11), (1, 24, 5, 6, 10), (2, 1, 9, 8)]


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
    got = run_draw(Draw("x", shape), g)
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


@pytest.mark.parametrize("n", [16, 17, 31, 32, 33, 100, 1000, 4097])
@pytest.mark.parametrize("chunk", [16, 32, 48, 1024])
def test_chunked_fill_equals_one_shot(n: int, chunk: int) -> None:
    g_ref, g = gen(5), gen(5)
    torch.randn(19, generator=g_ref), torch.randn(19, generator=g)  # advanced, ragged
    expected = torch.randn(n, generator=g_ref)
    got = fill_normal_(torch.empty(n), g, chunk_elems=chunk)
    assert bitwise_equal(got, expected)
    assert same_state(g, g_ref)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(16, 3000),
    chunk_blocks=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    prior=st.integers(0, 40),
)
def test_chunking_property(n: int, chunk_blocks: int, seed: int, prior: int) -> None:
    g_ref, g = gen(seed), gen(seed)
    if prior >= 16:
        torch.randn(prior, generator=g_ref), torch.randn(prior, generator=g)
    expected = torch.randn(n, generator=g_ref)
    got = fill_normal_(torch.empty(n), g, chunk_elems=16 * chunk_blocks)
    assert bitwise_equal(got, expected)
    assert same_state(g, g_ref)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    chunk_blocks=st.one_of(st.none(), st.integers(1, 8)),
    seed=st.integers(0, 2**32 - 1),
)
def test_draw_property_over_shapes(shape: list[int], chunk_blocks: int | None, seed: int) -> None:
    draw = Draw("x", tuple(shape))
    if draw.takes_scalar_path:
        return
    g_ref, g = gen(seed), gen(seed)
    expected = torch.randn(shape, generator=g_ref)
    chunk = None if chunk_blocks is None else 16 * chunk_blocks
    assert bitwise_equal(run_draw(draw, g, chunk_elems=chunk), expected)
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
    from prenoise import draws, kernel

    g_kernel, g_torch = gen(2101), gen(2101)
    with_kernel = run_draw(draw, g_kernel)
    draws.set_fill_backend(draws._torch_fill)
    try:
        with_torch = run_draw(draw, g_torch)
    finally:
        draws.set_fill_backend(None)
    assert bitwise_equal(with_kernel, with_torch)
    assert same_state(g_kernel, g_torch)
    assert kernel.backend_status().name  # the self-check ran and reported


def test_doctor_reports_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from prenoise.cli import main

    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "noise backend" in out and "2 MiB pages" in out
