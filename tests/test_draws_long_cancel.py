"""Long draws poll for cancellation between chunks, without changing one bit.

`prenoise stream-digest` of 10^9 values drew each count in one kernel call and hashed it in one
call: Ctrl-C waited for both (7.5 s). It now fills and hashes chunk by chunk; a native half
draw given a cancel event is chunked too. Nothing here measures time: the cancel points are
counted, and the values are compared with the golden digests and one-shot torch draws.
"""

from __future__ import annotations

import pytest
import torch

from bitwise import bitwise_equal, same_state
from prenoise.guards.cancel import Cancelled
from prenoise.noise import streams as noise_streams
from prenoise.noise.streams import load_goldens, stream_digest
from prenoise.preparation import draws
from prenoise.preparation.draws import CANCEL_CHUNK_ELEMS, Draw, HalfDrawRule, run_draw


class CountingCancel:
    """A cancel event that counts its polls and reads as set from poll `set_at` on."""

    def __init__(self, set_at: int | None = None) -> None:
        self.polls = 0
        self.set_at = set_at

    def is_set(self) -> bool:
        self.polls += 1
        return self.set_at is not None and self.polls >= self.set_at


def _golden_cases() -> list[tuple[str, dict[str, object]]]:
    goldens = load_goldens()["streams"]
    # stream_digest draws the vector path only: the scalar-path cases (a count < 16) are not its
    return [
        (stream, case)
        for stream in goldens
        for case in goldens[stream]["cases"]
        if min(case["counts"]) >= 16
    ]


@pytest.mark.parametrize(
    ("stream", "case"), _golden_cases(), ids=lambda v: v if isinstance(v, str) else None
)
def test_a_chunked_digest_is_the_golden_digest(stream: str, case: dict[str, object]) -> None:
    """The goldens hash whole draws of real torch output; 48-element chunks give the same."""
    if not noise_streams.stream_status(stream).usable:
        pytest.skip(f"the {stream} stream is refused in this process")
    if case["dtype"] == "float64" and noise_streams.stream_status(stream).float64_error:
        pytest.skip(f"float64 of the {stream} stream is refused in this process")
    seed, counts, dtype = case["seed"], case["counts"], case["dtype"]
    assert isinstance(seed, int) and isinstance(counts, list) and isinstance(dtype, str)
    got = stream_digest(stream, seed, counts, dtype, chunk_elems=48, cancel=CountingCancel())
    assert got == case["sha256"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_the_native_digest_equals_one_draw_per_count(dtype: str) -> None:
    counts = [1000, 17, 4099, 16]
    g = torch.Generator().manual_seed(11)
    expected = torch.cat(
        [
            torch.randn(n, generator=g, dtype=noise_streams._DTYPES[dtype]).view(torch.uint8)
            for n in counts
        ]
    )
    import hashlib

    reference = hashlib.sha256(expected.numpy().tobytes()).hexdigest()
    assert stream_digest("native", 11, counts, dtype, chunk_elems=64) == reference
    assert stream_digest("native", 11, counts, dtype) == reference


def test_the_digest_polls_once_per_chunk_and_stops_when_cancelled() -> None:
    # 640 + 5 values in chunks of 64: nine of 64 and a last of 69 (a remainder < 16 merges).
    counts = [64 * 10 + 5, 32]
    every = CountingCancel()
    stream_digest("native", 3, counts, "float32", chunk_elems=64, cancel=every)
    assert every.polls == 10 + 1
    stop = CountingCancel(set_at=4)
    with pytest.raises(Cancelled, match=r"^stream digest: cancelled$"):
        stream_digest("native", 3, counts, "float32", chunk_elems=64, cancel=stop)
    assert stop.polls == 4  # three chunks filled, nothing after the event was seen set


def test_a_long_digest_has_a_cancel_point_every_default_chunk() -> None:
    """What bounds Ctrl-C: a count of 2 chunks + 16 runs as 3 fills, each back in Python."""
    every = CountingCancel()
    stream_digest("native", 0, [2 * CANCEL_CHUNK_ELEMS + 16], "float32", cancel=every)
    assert every.polls == 3
    assert CANCEL_CHUNK_ELEMS == 1 << 22  # 16 MiB of float32: a few ms per fill


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("numel", [1000, 1003, 16 * 7 + 1])
def test_a_cancellable_native_half_draw_is_chunked_and_exact(
    dtype: torch.dtype, numel: int
) -> None:
    draw = Draw("h", (numel,), dtype, half_rule=HalfDrawRule.NATIVE)
    g, ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    every = CountingCancel()
    got = run_draw(draw, g, chunk_elems=32, cancel=every)
    assert bitwise_equal(got, torch.randn(numel, generator=ref, dtype=dtype))
    assert same_state(g, ref)
    chunks = len(list(draws.chunk_bounds(numel, 32)))
    if draw.native_half:
        assert every.polls == 1 + chunks  # the draw's own check, then one per chunk
        stop = CountingCancel(set_at=3)
        with pytest.raises(Cancelled, match=r"^noise fill: cancelled$"):
            run_draw(draw, torch.Generator().manual_seed(5), chunk_elems=32, cancel=stop)
        assert stop.polls == 3


def test_a_native_half_draw_without_cancel_is_one_torch_draw() -> None:
    draw = Draw("h", (1003,), torch.bfloat16, half_rule=HalfDrawRule.NATIVE)
    g, ref = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    got = run_draw(draw, g)
    assert bitwise_equal(got, torch.randn(1003, generator=ref, dtype=torch.bfloat16))
    assert same_state(g, ref)
