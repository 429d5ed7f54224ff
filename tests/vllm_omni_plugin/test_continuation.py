"""Ref2VA continuation requests (`long_video_mode=continuation`) through upstream's real `forward`.

Upstream denoises one window after another (`diffuse_continuation`), each window drawing its
own initial noise and condition noise with the output's seed; no release draws any of it ahead.
prenoise draws the first window's during encoding and, with the next-output setting, window k+1's
while window k denoises: every window of every output bitwise upstream's, and the verifier
compares every window's inputs (`passK.` fields), not only the last one's.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from release import PRENOISE_WORKER

from prenoise.integrations.vllm_omni.request import observe_draws, record_name
from prenoise.integrations.vllm_omni.settings import NEXT_OUTPUT_ENV, NOISE_STREAM_ENV
from prenoise.integrations.vllm_omni.verification import H3Request, verify_request

NOISE = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")
TWO_WINDOWS = 8.0
"""Seconds: 192 frames, windows [0, 107) and [85, 192) of 107 frames overlapping by 22."""


@pytest.fixture
def next_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NEXT_OUTPUT_ENV, "1")


def continuation(image_ref: Path, outputs: int) -> H3Request:
    return H3Request(
        (image_ref,),
        seed=11,
        duration=TWO_WINDOWS,
        outputs=outputs,
        steps=1,
        continuation=True,
    )


@pytest.mark.usefixtures("next_output")
def test_every_window_of_every_output_is_drawn_ahead_and_equal(
    image_ref: Path,
) -> None:
    result = verify_request(continuation(image_ref, outputs=2))
    assert result.verified, result.summary()
    prefixes = ("", "pass1.", "output1.", "output1.pass1.")
    for prefix in prefixes:
        for name in NOISE:
            assert result.on.drawn_on[prefix + name].startswith(PRENOISE_WORKER), prefix + name
            assert result.off.drawn_on[prefix + name] == result.off.forward_thread
    # each window's denoise inputs are compared, the guide condition of window 2 included
    paths = set(result.report.fields)
    assert {"denoise.cond_anchor", "pass1.denoise.cond_anchor"} <= paths
    assert "output1.pass1.denoise.cond_anchor" in paths
    assert result.on.records and all(record.used for record in result.on.records)
    assert {record.name for record in result.on.records} == {
        record_name(name, seed, window) for name in NOISE for seed in (11, 12) for window in (0, 1)
    }
    # window 2 draws more condition rows than window 1: the previous window's latent tail
    first = result.on.fields["visual_condition_noise"]
    second = result.on.fields["pass1.visual_condition_noise"]
    assert second.shape[0] > first.shape[0]


@pytest.mark.parametrize("stream", ["native", "libm"])
def test_without_the_next_output_setting_the_first_window_only(
    image_ref: Path, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Window 1 drawn ahead, window 2 by upstream's serial code: in a named stream both are
    drawn in it (the verdict checks every serial draw went through the stream)."""
    monkeypatch.setenv(NOISE_STREAM_ENV, stream)
    result = verify_request(continuation(image_ref, outputs=1))
    assert result.verified, result.summary()
    assert result.on.noise_stream == stream
    assert result.on.serial_draws == 4  # window 2: video, audio, image and guide conditions
    assert result.on.serial_streamed == (4 if stream == "libm" else 0)
    assert {record.name for record in result.on.records} == {
        record_name(name, 11) for name in NOISE
    }
    for name in NOISE:
        assert result.on.drawn_on[name].startswith(PRENOISE_WORKER)
        assert result.on.drawn_on["pass1." + name] == threading.current_thread().name


@pytest.mark.usefixtures("next_output")
def test_a_flipped_bit_in_the_second_window_is_reported_there(
    image_ref: Path,
) -> None:
    """The verifier is not blind to windows before the last: a bit flipped in window 2's
    prepared video noise is named as window 2's field."""

    def flip(name: str, seed: int, tensor: torch.Tensor) -> None:
        if name == "initial_video_noise#1":
            tensor.view(torch.int32).view(-1)[5] ^= 1

    with observe_draws(flip):
        result = verify_request(continuation(image_ref, outputs=1))
    assert not result.equal
    differing = {entry.path for entry in result.report.differing}
    assert "pass1.initial_video_noise" in differing
    assert not {path for path in differing if not path.startswith(("pass1.", "decoded."))}
