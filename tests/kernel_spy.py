"""Proof that the compiled kernel, not torch, served a draw (kernel-vs-torch tests must not
silently become torch-vs-torch when the kernel's self-check fails)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from prenoise.noise import kernel


@contextmanager
def kernel_calls() -> Iterator[list[int]]:
    """Numels of the fills and keep-prefix draws the compiled kernel served inside the block.

    Fails at once when the kernel is not active in this process (its self-check failed, or it
    is not built): a test that needs it must not pass on torch alone.
    """
    status = kernel.backend_status()  # the self-check runs here, outside the spy
    assert status.active, f"noise kernel inactive: {status.reason}"
    calls: list[int] = []
    real_fill, real_keep = kernel._fill_with, kernel.keep_prefix_with

    def fill(out: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(out.numel())
        return real_fill(out, *args, **kwargs)

    def keep(shape: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(math.prod(shape))
        return real_keep(shape, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel, "_fill_with", fill)
        patch.setattr(kernel, "keep_prefix_with", keep)
        yield calls
