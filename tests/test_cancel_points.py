"""Cancel points: chunked draws stop between chunks; an executor exit stops running draws."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

from bitwise import bitwise_equal
from prenoise.guards.cancel import Cancelled, any_of
from prenoise.preparation.draws import Draw, Stream, run_draw, run_stream, set_fill_backend
from prenoise.preparation.executor import PreparationExecutor

CHUNK = 1024


@pytest.fixture
def fills() -> Iterator[list[int]]:
    """Chunk sizes filled, recorded by a torch-exact fill backend."""
    seen: list[int] = []

    def recording(out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        seen.append(out.numel())
        return out.normal_(generator=generator)

    set_fill_backend(recording)
    yield seen
    set_fill_backend(None)


def test_cancelled_draw_stops_between_chunks(fills: list[int]) -> None:
    draw = Draw("noise", (16, CHUNK))
    cancel = threading.Event()
    reference = run_draw(draw, torch.Generator().manual_seed(3), chunk_elems=CHUNK, cancel=cancel)
    expected = torch.randn(16, CHUNK, generator=torch.Generator().manual_seed(3))
    assert bitwise_equal(reference, expected) and fills == [CHUNK] * 16  # unset: same bits
    fills.clear()

    def cancel_after_first(out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        fills.append(out.numel())
        cancel.set()  # e.g. a DELETE arriving while the first chunk fills
        return out.normal_(generator=generator)

    set_fill_backend(cancel_after_first)
    with pytest.raises(Cancelled, match="noise fill: cancelled"):
        run_draw(draw, torch.Generator().manual_seed(3), chunk_elems=CHUNK, cancel=cancel)
    assert fills == [CHUNK]  # the other 15 chunks were never filled
    with pytest.raises(Cancelled, match="draw 'noise': cancelled"):
        run_draw(draw, torch.Generator(), cancel=cancel)  # set before it starts: nothing drawn
    assert fills == [CHUNK]


def test_executor_exit_stops_a_running_draw(fills: list[int]) -> None:
    """The body fails while a draw runs: the draw stops at its next chunk, the error stands."""
    stream = Stream("video", 5, (Draw("video", (64, CHUNK)),))
    started = threading.Event()
    prep = PreparationExecutor(name="cancel-test")

    def blocking(out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        fills.append(out.numel())
        started.set()
        # hold the first chunk until the executor exits, as a long fill would
        while not prep.cancel_event.is_set():
            threading.Event().wait(0.001)
        return out.normal_(generator=generator)

    set_fill_backend(blocking)
    with pytest.raises(KeyError, match="encoder failed"), prep:
        job = prep.submit(
            "video", lambda: run_stream(stream, chunk_elems=CHUNK, cancel=prep.cancel_event)
        )
        assert started.wait(10)
        raise KeyError("encoder failed")
    assert fills == [CHUNK]  # 1 of 64 chunks, then Cancelled on the worker
    assert job.name == "video" and not prep.threads


def test_executor_cancel_argument_and_any_of() -> None:
    outer = threading.Event()
    with PreparationExecutor(cancel=outer) as prep:
        assert not prep.cancel_event.is_set()
        outer.set()
        assert prep.cancel_event.is_set()
        job = prep.submit(
            "x", lambda: run_stream(Stream("x", 0, (Draw("x", (64,)),)), cancel=prep.cancel_event)
        )
        with pytest.raises(Cancelled):
            prep.take(job)
    a, b = threading.Event(), threading.Event()
    both = any_of(a, None, b)
    assert both is not None and not both.is_set()
    b.set()
    assert both.is_set() and any_of(None) is None and any_of(a) is a
