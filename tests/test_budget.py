"""Draws and plans know their bytes and refuse what cannot fit, before allocating anything."""

from __future__ import annotations

import pytest
import torch

from prenoise.guards import budget
from prenoise.guards.budget import BudgetExceededError, format_bytes, require_fits
from prenoise.noise.layouts import Patchify
from prenoise.preparation.draws import Draw, NoisePlan, Stream, run_draw, run_stream

GIB = 2**30


@pytest.fixture
def one_gib_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "memory_limit", lambda: budget.MemoryLimit(GIB, "on this host"))


def test_peak_bytes_follow_what_a_run_holds() -> None:
    plain = Draw("plain", (4, 64))
    assert (plain.buffer_nbytes, plain.output_nbytes, plain.peak_nbytes) == (1024, 1024, 1024)
    kept = Draw("kept", (1, 24, 10, 4, 6), keep=(1, 24, 2), layout=Patchify())
    assert kept.buffer_nbytes == 24 * 10 * 24 * 4
    assert kept.output_nbytes == 24 * 2 * 24 * 4
    assert kept.peak_nbytes == kept.buffer_nbytes + kept.output_nbytes
    half = Draw("half", (64,), dtype=torch.bfloat16)  # drawn in float32, then cast
    assert (half.buffer_nbytes, half.output_nbytes, half.peak_nbytes) == (256, 128, 384)
    stream = Stream("s", 0, (plain, kept))
    # results are kept; only the largest transient buffer adds to them
    assert stream.peak_nbytes == plain.output_nbytes + kept.output_nbytes + kept.buffer_nbytes
    plan = NoisePlan((stream, Stream("t", 1, (half,))))
    assert plan.peak_nbytes == plan.output_nbytes + kept.buffer_nbytes


def test_plan_refuses_more_than_its_max_bytes() -> None:
    stream = Stream("video", 0, (Draw("video", (1, 24, 5, 8, 8), layout=Patchify()),))
    peak = NoisePlan((stream,)).peak_nbytes
    assert NoisePlan((stream,), max_bytes=peak).peak_nbytes == peak
    with pytest.raises(BudgetExceededError, match=r"noise plan needs .* 'video', shape"):
        NoisePlan((stream,), max_bytes=peak - 1)


@pytest.mark.usefixtures("one_gib_available")
def test_absurd_draws_are_refused_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_allocation(*_args: object, **_kwargs: object) -> torch.Tensor:
        raise AssertionError("allocated")

    monkeypatch.setattr("prenoise.noise.kernel.empty", no_allocation)
    monkeypatch.setattr("prenoise.noise.kernel.randn_keep_prefix", no_allocation)
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    huge = Draw("huge", (100_000, 100_000))
    with pytest.raises(BudgetExceededError, match=r"draw 'huge' of shape .* needs 37\.3 GiB"):
        run_draw(huge, g)
    # the keep-prefix path would skip a 10^9-frame stream word by word: refused just the same
    skip = Draw("skip", (1, 24, 10**9, 48, 84), keep=(1, 24, 1), layout=Patchify())
    with pytest.raises(BudgetExceededError, match=r"more than the 1\.0 GiB of memory available"):
        run_stream(Stream("skip", g, (skip,)))
    assert torch.equal(g.get_state(), state)  # nothing was drawn


def test_require_fits_and_format_bytes() -> None:
    require_fits(10, "x", budget=10)
    with pytest.raises(BudgetExceededError) as info:
        require_fits(11, "x", budget=10, fix="smaller")
    assert str(info.value) == "x needs 11 B, more than the memory budget of 10 B; smaller"
    assert format_bytes(1536 * 2**20) == "1.5 GiB"
    assert format_bytes(10**400) == "about 1e400 B"
    assert budget.available_memory_bytes() > 0
