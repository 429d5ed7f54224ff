from __future__ import annotations

import numpy as np
import pytest
import torch

from bitwise import bitwise_equal
from prenoise.preparation.mixing import mix_coefficients, mix_condition, mix_conditions


def reference_mix(clean: torch.Tensor, noise: torch.Tensor, tau: float) -> torch.Tensor:
    """The contract's formula written out by hand: f32 CPU coefficients, 2 products, 1 sum."""
    tau_t = torch.tensor(tau, dtype=torch.float32)
    one_minus = torch.tensor(1.0, dtype=torch.float32) - tau_t
    return tau_t * clean + one_minus * noise


def rows(seed: int, n: int, f: int = 96) -> torch.Tensor:
    return torch.randn(n, f, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("tau", [0.0, 0.999, 1.0])
def test_mix_matches_hand_written_formula(tau: float) -> None:
    clean, noise = rows(1, 300), rows(2, 300)
    clean_copy, noise_copy = clean.clone(), noise.clone()
    out = mix_condition(clean, noise, tau)
    expected = clean if tau == 1.0 else reference_mix(clean, noise, tau)
    assert bitwise_equal(out, expected)
    assert bitwise_equal(clean, clean_copy) and bitwise_equal(noise, noise_copy)  # not mutated
    assert out.untyped_storage().data_ptr() not in {
        clean.untyped_storage().data_ptr(),
        noise.untyped_storage().data_ptr(),
    }


def test_fused_forms_would_differ() -> None:
    # Guards the reason the helper exists: a lerp or alpha-add is not the contract's arithmetic.
    clean, noise = rows(3, 2000), rows(4, 2000)
    exact = mix_condition(clean, noise, 0.999)
    tau = torch.tensor(0.999)
    assert not bitwise_equal(exact, torch.lerp(noise, clean, tau))


def test_tau_one_never_produces_noise() -> None:
    def no_noise() -> torch.Tensor:
        raise AssertionError("drawn")

    clean = rows(1, 10)
    assert bitwise_equal(mix_condition(clean, no_noise, 1.0), clean)
    assert bitwise_equal(
        mix_conditions([clean, clean], no_noise, [1.0, 1.0]), torch.cat([clean] * 2)
    )


def test_lazy_noise_is_produced_once() -> None:
    calls: list[int] = []
    noise = rows(9, 30)

    def make() -> torch.Tensor:
        calls.append(1)
        return noise

    mix_conditions([rows(1, 10), rows(2, 20)], make, [0.999, 0.5])
    assert calls == [1]


def test_several_conditions_including_non_contiguous() -> None:
    a = rows(1, 40)
    b_base = rows(2, 96, 60)
    b = b_base.t()[:50]  # non-contiguous [50, 96]
    c = rows(3, 30)
    noise = rows(4, 120)
    taus = [0.999, 0.0, 1.0]
    out = mix_conditions([a, b, c], noise, taus)
    expected = torch.cat(
        [
            reference_mix(a, noise[:40], 0.999),
            reference_mix(b.contiguous(), noise[40:90], 0.0),
            c,
        ]
    )
    assert not b.is_contiguous()
    assert bitwise_equal(out, expected)
    assert out.is_contiguous()


def test_coefficients_are_float32_cpu_and_computed_in_float32() -> None:
    tau, one_minus = mix_coefficients(0.999)
    assert tau.dtype == one_minus.dtype == torch.float32
    assert tau.device.type == one_minus.device.type == "cpu" and tau.dim() == 0
    assert bitwise_equal(one_minus, torch.tensor(1.0) - torch.tensor(0.999))


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="does not match clean shape"):
        mix_condition(rows(1, 3), rows(1, 4), 0.5)
    with pytest.raises(ValueError, match="rows"):
        mix_conditions([rows(1, 3)], rows(1, 4), [0.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mix_condition(rows(1, 3), rows(1, 3), 1.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tau", [0.0, 0.3, 0.999, 1.0])
def test_out_argument_gives_the_same_bits(dtype: torch.dtype, tau: float) -> None:
    clean = rows(5, 96, 70).t().to(dtype)  # non-contiguous [70, 96]
    noise = rows(6, 70).to(dtype)
    out = torch.full(clean.shape, float("nan"), dtype=dtype)
    got = mix_condition(clean, noise, tau, out=out)
    assert got is out
    assert bitwise_equal(out, mix_condition(clean, noise, tau))


def test_out_argument_is_checked() -> None:
    clean = rows(1, 8)
    for bad in (
        torch.empty(8, 95),
        torch.empty(8, 96, dtype=torch.float64),
        torch.empty(96, 8).t(),
    ):
        with pytest.raises(ValueError, match="out must be a contiguous"):
            mix_condition(clean, rows(2, 8), 0.5, out=bad)
    noise = rows(2, 8)
    with pytest.raises(ValueError, match="share memory with clean"):
        mix_condition(clean, noise, 1.0, out=clean)
    with pytest.raises(ValueError, match="share memory with noise"):
        mix_condition(clean, noise, 0.5, out=noise)
    assert bitwise_equal(clean, rows(1, 8)) and bitwise_equal(noise, rows(2, 8))


def test_large_cpu_mix_writes_blocks_in_place_with_reference_bits() -> None:
    # > 32 MiB of rows: the result buffer takes the huge-page allocation path
    a, b = rows(1, 50_000), rows(2, 40_000)
    noise = rows(3, 90_000)
    out = mix_conditions([a, b], noise, [0.999, 0.25])
    assert out.numel() * 4 >= 32 << 20 and out.is_contiguous()
    expected = torch.cat(
        [reference_mix(a, noise[:50_000], 0.999), reference_mix(b, noise[50_000:], 0.25)]
    )
    assert bitwise_equal(out, expected)


def test_blocks_that_cannot_share_a_buffer_use_cat() -> None:
    a = rows(1, 10).requires_grad_()
    b = rows(2, 20)
    noise = rows(3, 30)
    out = mix_conditions([a, b], noise, [0.5, 0.5])
    assert out.grad_fn is not None  # autograd still records the mix
    expected = torch.cat([reference_mix(a, noise[:10], 0.5), reference_mix(b, noise[10:], 0.5)])
    assert bitwise_equal(out.detach(), expected.detach())
    mixed_dtypes = mix_conditions([rows(1, 4), rows(2, 4).double()], rows(3, 8), [1.0, 1.0])
    assert mixed_dtypes.dtype == torch.float64  # torch.cat's promotion, as before


# -- half precision against an explicit per-element formula -------------------------------------


def _round_half(x: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float32 values rounded to `dtype` (nearest, ties to even) and widened back to float32.

    float16 by numpy's IEEE conversion; bfloat16 by hand on the bits (no NaNs here): add
    0x7FFF plus the lowest kept bit, then drop the low 16 bits.
    """
    if dtype == torch.float16:
        return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def half_reference(
    clean: torch.Tensor, noise: torch.Tensor, tau: float, *, rounded_once: bool = False
) -> torch.Tensor:
    """The documented rounding points, element by element, in numpy float32: `tau` and
    `1 − tau` stay float32 (`1 − tau` computed in float32); each product is computed in float32
    and rounded to the half dtype; the sum of the two rounded products is computed in float32
    and rounded to the half dtype. `rounded_once` is the wrong variant (one rounding at the end).
    """
    dtype = clean.dtype
    c, n = clean.float().numpy(), noise.float().numpy()
    t = np.float32(tau)
    one_minus = np.float32(1.0) - t
    if rounded_once:
        out = _round_half(c * t + n * one_minus, dtype)
    else:
        out = _round_half(_round_half(c * t, dtype) + _round_half(n * one_minus, dtype), dtype)
    return torch.from_numpy(np.ascontiguousarray(out)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tau", [0.0, 0.3, 0.999, 1.0])
def test_half_mix_equals_the_per_element_formula(dtype: torch.dtype, tau: float) -> None:
    clean = rows(5, 96, 70).t().to(dtype)  # non-contiguous [70, 96]: 6,720 values
    noise = rows(6, 70).to(dtype)
    expected = clean.contiguous() if tau == 1.0 else half_reference(clean, noise, tau)
    assert bitwise_equal(mix_condition(clean, noise, tau), expected)
    out = torch.full(clean.shape, float("nan"), dtype=dtype)
    assert bitwise_equal(mix_condition(clean, noise, tau, out=out), expected)
    blocks = mix_conditions([clean[:30], clean[30:]], noise, [tau, tau])
    assert bitwise_equal(blocks, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tau", [0.3, 0.999])
def test_half_formula_tells_one_rounding_from_three(dtype: torch.dtype, tau: float) -> None:
    """The reference has teeth: computing in float32 and rounding once changes hundreds of the
    6,720 values, so the test above fails for that implementation."""
    clean, noise = rows(5, 96, 70).t().to(dtype), rows(6, 70).to(dtype)
    right = half_reference(clean, noise, tau)
    wrong = half_reference(clean, noise, tau, rounded_once=True)
    differing = int((right.view(torch.int16) != wrong.view(torch.int16)).sum())
    assert differing > 500, differing


def test_mix_conditions_errors_name_the_counts() -> None:
    with pytest.raises(ValueError, match=r"^2 conditions but 1 taus$"):
        mix_conditions([rows(1, 3), rows(2, 3)], rows(3, 6), [0.5])
    with pytest.raises(ValueError, match=r"^mix_conditions needs at least one condition$"):
        mix_conditions([], rows(3, 6), [])
    with pytest.raises(ValueError, match=r"^noise has 4 rows, conditions have 3$"):
        mix_conditions([rows(1, 3)], rows(1, 4, 7), [0.5])


def test_blocks_sharing_device_dtype_and_row_shape_are_mixed_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The documented fast path: same device, dtype and row shape -> every block is mixed
    straight into its rows of one result (`out=`); anything else -> per-block results + cat."""
    from prenoise.preparation import mixing

    used_out: list[bool] = []
    real = mixing.mix_condition

    def spy(clean: torch.Tensor, noise: object, tau: object, **kw: object) -> torch.Tensor:
        used_out.append(kw.get("out") is not None)
        return real(clean, noise, tau, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(mixing, "mix_condition", spy)
    a, b, noise = rows(1, 10), rows(2, 20), rows(3, 30)
    same = mixing.mix_conditions([a, b], noise, [0.5, 0.25])
    assert used_out == [True, True]
    used_out.clear()
    wide = rows(4, 20, 97)
    with pytest.raises(ValueError):  # different row shapes: per block, and the noise must match
        mixing.mix_conditions([a, wide], noise, [0.5, 0.25])
    assert used_out[:1] == [False]
    used_out.clear()
    mixing.mix_conditions([a, b.double()], torch.cat([noise[:10], noise[10:].double()]), [1, 1])
    assert used_out == [False, False]
    expected = torch.cat([reference_mix(a, noise[:10], 0.5), reference_mix(b, noise[10:], 0.25)])
    assert bitwise_equal(same, expected)


def test_exact_texts_and_contracts_of_mix_condition() -> None:
    clean, noise = rows(1, 8), rows(2, 8)
    with pytest.raises(
        ValueError, match=r"^out must not share memory with clean \(inputs are never mutated\)$"
    ):
        mix_condition(clean, noise, 0.5, out=clean)
    # tau == 1: a new *contiguous* tensor, also for non-contiguous clean rows
    strided = rows(3, 96, 8).t()
    kept = mix_condition(strided, noise, 1.0)
    assert kept.is_contiguous() and bitwise_equal(kept, strided.contiguous())
    # a callable noise source is produced (once) when tau != 1
    calls: list[int] = []

    def make() -> torch.Tensor:
        calls.append(1)
        return noise

    assert bitwise_equal(mix_condition(clean, make, 0.5), reference_mix(clean, noise, 0.5))
    assert calls == [1]


def test_out_path_allocates_exactly_one_scratch_buffer_of_the_rows_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `out=` path allocates a scratch of `clean`'s shape with `kernel.empty` on the CPU (so
    big buffers get 2 MiB pages), and never makes torch resize an output."""
    import warnings

    from prenoise.noise import kernel

    allocated: list[tuple[tuple[int, ...], torch.dtype]] = []
    real = kernel.empty

    def spy(size: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        allocated.append((tuple(size), dtype))
        return real(size, dtype)

    monkeypatch.setattr(kernel, "empty", spy)
    clean, noise = rows(1, 70), rows(2, 70)
    out = torch.empty(70, 96)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "An output ... was resized"
        mix_condition(clean, noise, 0.3, out=out)
        mixed = mix_conditions([clean[:30], clean[30:]], noise, [0.3, 0.3])
    # mix_condition's scratch; mix_conditions' result, then one scratch per block
    assert [shape for shape, _ in allocated] == [(70, 96), (70, 96), (30, 96), (40, 96)]
    assert {dtype for _, dtype in allocated} == {torch.float32}
    assert bitwise_equal(out, reference_mix(clean, noise, 0.3)) and bitwise_equal(mixed, out)


def test_coefficients_are_float32_cpu_whatever_tau_and_defaults_are() -> None:
    tau64 = torch.tensor(0.999, dtype=torch.float64)
    tau, one_minus = mix_coefficients(tau64)
    assert tau.dtype == one_minus.dtype == torch.float32
    assert bitwise_equal(one_minus, torch.tensor(1.0) - torch.tensor(0.999))
    with torch.device("meta"):  # a different default device does not move the coefficients
        tau, one_minus = mix_coefficients(0.5)
    assert tau.device.type == one_minus.device.type == "cpu"
    with pytest.raises(ValueError, match=r"^tau must be a scalar, got shape \(2,\)$"):
        mix_coefficients([0.5, 0.5])
    with pytest.raises(ValueError, match=r"^tau must be in \[0, 1\], got 1.5$"):
        mix_coefficients(1.5)


def test_exact_texts_for_noise_that_does_not_fit() -> None:
    clean = rows(1, 8)
    with pytest.raises(
        ValueError, match=r"^noise dtype torch.float64 does not match clean dtype torch.float32$"
    ):
        mix_condition(clean, rows(2, 8).double(), 0.5)
    noise = rows(2, 8)
    with pytest.raises(
        ValueError, match=r"^out must not share memory with noise \(inputs are never mutated\)$"
    ):
        mix_condition(clean, noise, 0.5, out=noise)


def test_clean_rows_stay_on_their_device_and_the_noise_moves_there() -> None:
    """(The meta device stands in for an accelerator on this CPU-only machine.)"""
    clean = torch.empty(8, 96, device="meta")
    mixed = mix_condition(clean, rows(2, 8), 0.5)
    assert mixed.device.type == "meta" and mixed.shape == (8, 96)


def test_one_condition_mixes_like_mix_condition() -> None:
    g = torch.Generator().manual_seed(11)
    clean, noise = torch.randn(3, 40, generator=g), torch.randn(3, 40, generator=g)
    tau = torch.tensor(0.3)
    assert bitwise_equal(mix_conditions([clean], noise, [tau]), mix_condition(clean, noise, tau))
