"""Exact behaviour of the RNG snapshot and the prediction errors (mutation-testing survivors)."""

from __future__ import annotations

import logging

import pytest
import torch

from prenoise.preparation.prediction import PredictionEvent, PredictionMismatchError
from prenoise.verify import rng_guard
from prenoise.verify.rng_guard import GlobalRNGChangedError, RNGSnapshot, global_rng_guard


def test_snapshot_differences_name_each_changed_state() -> None:
    base = RNGSnapshot(cpu=b"a", cuda=(b"x", b"y"))
    assert base.differences(RNGSnapshot(b"a", (b"x", b"y"))) == []
    assert base.differences(RNGSnapshot(b"b", (b"x", b"y"))) == ["cpu"]
    assert base.differences(RNGSnapshot(b"a", (b"x", b"z"))) == ["cuda:1"]
    assert base.differences(RNGSnapshot(b"b", (b"w", b"z"))) == ["cpu", "cuda:0", "cuda:1"]
    assert base.differences(RNGSnapshot(b"a", (b"x",))) == ["cuda (device count)"]


def test_snapshot_reads_initialised_cuda_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU here, CUDA is faked: its per-device states are read only once initialised."""
    states = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: states)
    assert rng_guard.snapshot_global_rng().cuda == ()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    snap = rng_guard.snapshot_global_rng()
    assert snap.cuda == (b"\x01\x02", b"\x03")
    assert snap.cpu == bytes(torch.get_rng_state().numpy())
    expected = r"^the block changed the global RNG state: cuda:1$"
    with pytest.raises(GlobalRNGChangedError, match=expected), global_rng_guard("the block"):
        states[1] = torch.tensor([4], dtype=torch.uint8)  # device 1's generator moved


def test_prediction_mismatch_error_keeps_both_keys_and_says_what_to_do() -> None:
    error = PredictionMismatchError("cond", (1, 2), (1, 3))
    assert (error.name, error.predicted, error.actual) == ("cond", (1, 2), (1, 3))
    assert str(error) == (
        "prepared 'cond' was computed for predicted (1, 2) but the actual value is (1, 3); the "
        "prepared result was discarded (fix the prediction, or use MismatchPolicy.FALLBACK to "
        "recompute serially)"
    )


def test_prediction_event_logs_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="prenoise.preparation.prediction"):
        PredictionEvent("cond", (1, 2), (1, 3)).log()
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            "prenoise.preparation.prediction",
            logging.WARNING,
            "prediction mismatch for 'cond': predicted (1, 2), actual (1, 3); recomputed serially",
        )
    ]
