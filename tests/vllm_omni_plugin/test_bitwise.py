"""Plugin on vs off through upstream's real `MiniMaxH3Pipeline.forward`: bitwise equal."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from prenoise.integrations.vllm_omni.request import observe_draws
from prenoise.integrations.vllm_omni.settings import NEXT_OUTPUT_ENV
from prenoise.integrations.vllm_omni.verification import (
    H3Request,
    VerifyResult,
    run_arm,
    verify_request,
)

WORKER = "prenoise-vllm-omni"
NOISE = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")


def assert_overlapped(result: VerifyResult, fields: tuple[str, ...] = NOISE) -> None:
    """The first output's prepared tensors were drawn on the worker and had started before they
    were asked for."""
    on = result.on
    first_seed = min(r.seed for r in on.records)
    state_records = {r.name.split("@")[0]: r for r in on.records if r.seed == first_seed}
    for name in fields:
        assert on.drawn_on[name].startswith(WORKER), (name, on.drawn_on[name])
        assert result.off.drawn_on[name] == threading.current_thread().name
        record = state_records[name]
        assert record.requested is not None and record.started < record.requested


@pytest.mark.parametrize("seed", [0, 2101])
def test_image_reference_two_outputs(image_ref: Path, seed: int) -> None:
    result = verify_request(H3Request((image_ref,), seed=seed, outputs=2))
    assert result.equal, result.report.summary()
    assert result.rng_state_unchanged
    assert "output1.denoise.cond_anchor" in result.report.fields
    assert result.report.fields["decoded.video"].equal  # forward's outputs, both of them
    assert_overlapped(result)
    # outputs after the first draw serially by default
    assert result.on.drawn_on["output1.initial_video_noise"] == threading.current_thread().name
    [(t, h, w)] = result.off.geometry["condition_shapes"]
    assert (t, h) == (1, 128) and w > h  # the landscape image, resized by upstream (short edge)


def test_video_reference_with_audio(video_ref: Path) -> None:
    result = verify_request(H3Request((video_ref,), seed=11))
    assert result.equal, result.report.summary()
    assert result.off.fields["denoise.audio_anchor"] is not None  # the video's soundtrack
    assert_overlapped(result)


def test_image_and_video_references(image_ref: Path, video_ref: Path) -> None:
    result = verify_request(H3Request((video_ref, image_ref), seed=3, width=320, height=192))
    assert result.equal, result.report.summary()
    assert len(result.off.geometry["condition_shapes"]) == 2
    assert_overlapped(result)


def test_prepare_next_output(image_ref: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NEXT_OUTPUT_ENV, "1")
    result = verify_request(H3Request((image_ref,), seed=5, outputs=3))
    assert result.equal, result.report.summary()
    for prefix in ("", "output1.", "output2."):
        assert result.on.drawn_on[prefix + "initial_video_noise"].startswith(WORKER)
        assert result.on.drawn_on[prefix + "visual_condition_noise"].startswith(WORKER)
    # exactly the three outputs were prepared: nothing for a fourth
    assert sorted({r.seed for r in result.on.records}) == [5, 6, 7]


@pytest.mark.parametrize(
    ("bit", "also_differing"),
    [(0, set()), (22, {"denoise.cond_anchor"})],  # 0.001·(1 ulp) vanishes in the anchor's rounding
)
def test_one_flipped_bit_is_reported(image_ref: Path, bit: int, also_differing: set[str]) -> None:
    """The harness is not blind: one changed bit of prepared noise makes verify fail."""

    def flip(name: str, seed: int, tensor: torch.Tensor) -> None:
        if name == "visual_condition_noise":
            tensor.view(torch.int32).view(-1)[123] ^= 1 << bit

    with observe_draws(flip):
        result = verify_request(H3Request((image_ref,), seed=1))
    assert not result.equal
    differing = {f.path for f in result.report.differing}
    # (a changed anchor also changes what forward decodes)
    assert (
        differing - {"decoded.video", "decoded.audio"}
        == {"visual_condition_noise"} | also_differing
    )


def test_global_rng_use_is_reported(image_ref: Path) -> None:
    def touch_global_rng(name: str, seed: int, tensor: torch.Tensor) -> None:
        torch.rand(1)

    with observe_draws(touch_global_rng):
        result = verify_request(H3Request((image_ref,), seed=1))
    assert not result.rng_state_unchanged
    assert not result.equal


def test_no_worker_thread_outlives_the_request(image_ref: Path) -> None:
    run_arm(H3Request((image_ref,)), plugin_on=True)
    assert not [t for t in threading.enumerate() if t.name.startswith(WORKER)]
