"""Sizes are integers or refused: no float, string or bool is coerced into a draw's shape."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from prenoise.noise.streams import stream_digest
from prenoise.preparation import draws
from prenoise.preparation.draws import Draw, NoisePlan, Stream


def _raises(kind: type[Exception], message: str) -> pytest.RaisesContext[Exception]:
    return pytest.raises(kind, match=f"^{re.escape(message)}$")


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((1.5, 16), "draw 'd': shape[0] must be an int, got 1.5 (float)"),
        ((16.0,), "draw 'd': shape[0] must be an int, got 16.0 (float)"),
        (("16",), "draw 'd': shape[0] must be an int, got '16' (str)"),
        ((4, True), "draw 'd': shape[1] must be an int, got True (bool)"),
        ((np.bool_(True),), "draw 'd': shape[0] must be an int, got np.True_ (bool)"),
        ((torch.tensor(True),), "draw 'd': shape[0] must be an int, got tensor(True) (Tensor)"),
        (True, "draw 'd': shape must be a sequence of ints, got True (bool)"),
        (16, "draw 'd': shape must be a sequence of ints, got 16 (int)"),
        ("16", "draw 'd': shape must be a sequence of ints, got '16' (str)"),
    ],
)
def test_a_shape_that_is_not_ints_is_refused(shape: object, message: str) -> None:
    with _raises(TypeError, message):
        Draw("d", shape)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("keep", "message"),
    [
        ((1.5,), "draw 'd': keep[0] must be an int, got 1.5 (float)"),
        (("2",), "draw 'd': keep[0] must be an int, got '2' (str)"),
        ((True,), "draw 'd': keep[0] must be an int, got True (bool)"),
        (2, "draw 'd': keep must be a sequence of ints, got 2 (int)"),
    ],
)
def test_a_keep_that_is_not_ints_is_refused(keep: object, message: str) -> None:
    with _raises(TypeError, message):
        Draw("d", (4, 16), keep=keep)  # type: ignore[arg-type]


def test_integer_types_are_accepted_as_python_ints() -> None:
    d = Draw("d", (np.int64(4), torch.tensor(16)), keep=[np.int32(2)])  # type: ignore[list-item]
    assert d.shape == (4, 16) and d.keep == (2,)
    assert [type(s) for s in (*d.shape, *d.keep)] == [int, int, int]
    assert Draw("d", torch.Size([2, 16])).shape == (2, 16)


def test_chunk_sizes_and_budgets_are_ints_too() -> None:
    with _raises(TypeError, "chunk_elems must be an int, got 32.0 (float)"):
        list(draws.chunk_bounds(64, 32.0))  # type: ignore[arg-type]
    with _raises(TypeError, "chunk_elems must be an int, got True (bool)"):
        draws.fill_normal_(torch.empty(64), torch.Generator(), chunk_elems=True)
    stream = Stream("s", 0, (Draw("d", (64,)),))
    with _raises(TypeError, "max_bytes must be an int, got True (bool)"):
        NoisePlan((stream,), max_bytes=True)
    with _raises(TypeError, "max_bytes must be an int, got 1e+30 (float)"):
        NoisePlan((stream,), max_bytes=1e30)  # type: ignore[arg-type]
    assert NoisePlan((stream,), max_bytes=np.int64(256)).max_bytes == 256  # type: ignore[arg-type]


def test_stream_digest_counts_are_ints() -> None:
    with _raises(TypeError, "count must be an int, got 20.5 (float)"):
        stream_digest("native", 0, [20.5], "float32")  # type: ignore[list-item]
    with _raises(TypeError, "count must be an int, got True (bool)"):
        stream_digest("native", 0, [True], "float32")
