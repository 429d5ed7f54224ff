"""prenoise.noise.layouts.Patchify: the fast path (wider-int runs) equals the reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bitwise import bitwise_equal
from prenoise.noise.layouts import Patchify


def reference(x: torch.Tensor, patch: tuple[int, int, int]) -> torch.Tensor:
    """The contract's rearrangement written out: view, permute, contiguous."""
    n, c, t, h, w = x.shape
    pt, ph, pw = patch
    grid = x.reshape(n, c, t // pt, pt, h // ph, ph, w // pw, pw)
    rows = n * (t // pt) * (h // ph) * (w // pw)
    return grid.permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(rows, c * pt * ph * pw).contiguous()


DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
SIDES = st.sampled_from([1, 2, 4])


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    patch=st.tuples(
        st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4])
    ),
    n=st.integers(1, 2),
    c=st.integers(1, 5),
    t_blocks=st.integers(1, 3),
    h_blocks=st.integers(1, 3),
    w_blocks=st.integers(1, 4),
    keep_t=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_patchify_equals_reference(
    dtype: torch.dtype,
    patch: tuple[int, int, int],
    n: int,
    c: int,
    t_blocks: int,
    h_blocks: int,
    w_blocks: int,
    keep_t: bool,
    seed: int,
) -> None:
    pt, ph, pw = patch
    shape = (n, c, t_blocks * pt, h_blocks * ph, w_blocks * pw)
    g = torch.Generator().manual_seed(seed)
    full = torch.randn((n, c, shape[2] + pt, shape[3], shape[4]), generator=g).to(dtype)
    # a keep-slice (non-contiguous, as the dependent-noise rule produces) or a contiguous tensor
    x = full[:, :, : shape[2]] if keep_t else full[:, :, : shape[2]].contiguous()
    got = Patchify(patch).apply(x)
    assert got.is_contiguous() and got.dtype == dtype
    assert bitwise_equal(got, reference(x, patch))


def test_misaligned_input_takes_the_plain_path() -> None:
    base = torch.randn(1 * 2 * 2 * 2 * 4 + 1)
    x = base[1:].view(1, 2, 2, 2, 4)  # odd storage offset: pairs cannot be viewed as int64
    assert bitwise_equal(Patchify().apply(x), reference(x, (1, 2, 2)))


def test_nan_payloads_and_signed_zeros_move_unchanged() -> None:
    x = torch.randn(1, 3, 2, 4, 4)
    bits = x.view(torch.int32)
    bits[0, 0, 0, 0, 0] = 0x7FC01234  # a NaN with a payload
    x[0, 1, 1, 1, 1] = -0.0
    assert bitwise_equal(Patchify().apply(x), reference(x, (1, 2, 2)))


def test_rejects_shapes_the_patch_does_not_divide() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        Patchify().apply(torch.zeros(1, 2, 3, 5, 4))
