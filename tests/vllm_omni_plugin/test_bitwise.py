"""Plugin on vs off through upstream's real `MiniMaxH3Pipeline.forward`: bitwise equal."""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from release import PRENOISE_WORKER, RELEASE, UPSTREAM_AHEAD, first_output_worker

from prenoise.integrations.vllm_omni.request import observe_draws
from prenoise.integrations.vllm_omni.settings import NEXT_OUTPUT_ENV
from prenoise.integrations.vllm_omni.verification import (
    H3Request,
    VerifyResult,
    run_arm,
    verify_request,
)

WORKER = PRENOISE_WORKER
NOISE = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")


def assert_overlapped(result: VerifyResult, fields: tuple[str, ...] = NOISE) -> None:
    """The first output's noise was drawn ahead on a worker: prenoise's, whose tensors had
    started before they were asked for, or (0.32.0rc1) upstream's own, in both arms, with
    nothing of it drawn by prenoise (never twice)."""
    on = result.on
    here = threading.current_thread().name
    for name in fields:
        assert on.drawn_on[name].startswith(first_output_worker()), (name, on.drawn_on[name])
        off_thread = result.off.drawn_on[name]
        if UPSTREAM_AHEAD:  # upstream draws ahead with the plugin off too
            assert off_thread.startswith(first_output_worker())
        else:
            assert off_thread == here
    if UPSTREAM_AHEAD:
        first_seed = min(seed for _, seed in on.upstream_ahead)
        assert not [r for r in on.records if r.seed == first_seed]
        assert {(name, first_seed) for name in fields} <= on.upstream_ahead
        return
    first_seed = min(r.seed for r in on.records)
    state_records = {r.name.split("@")[0]: r for r in on.records if r.seed == first_seed}
    for name in fields:
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
    if RELEASE == "0.30.0":
        assert (t, h) == (1, 128) and w > h  # the landscape image, resized to a 2048 short edge
    else:
        assert (t, h, w) == (1, 24, 32)  # 0.31.0rc1 on: the image's own 512x384 (32-px grid)


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
    assert result.prepared, result.not_prepared_reasons
    for prefix in ("", "output1.", "output2."):
        worker = first_output_worker() if prefix == "" else WORKER
        assert result.on.drawn_on[prefix + "initial_video_noise"].startswith(worker)
        assert result.on.drawn_on[prefix + "visual_condition_noise"].startswith(worker)
    # exactly what upstream does not draw ahead was prepared: nothing for a fourth output, and
    # on 0.32.0rc1 nothing of the first (upstream's own)
    prepared = [6, 7] if UPSTREAM_AHEAD else [5, 6, 7]
    assert sorted({r.seed for r in result.on.records}) == prepared


# The draw prenoise makes on every release: the first output's, or (0.32.0rc1, where upstream
# draws the first output ahead itself) the second output's, prepared with the next-output setting.
PRENOISE_SEED, PRENOISE_PREFIX = (2, "output1.") if UPSTREAM_AHEAD else (1, "")


@pytest.fixture
def prenoise_draws(monkeypatch: pytest.MonkeyPatch) -> H3Request:
    """A request some of whose noise prenoise draws on every release (`PRENOISE_SEED`)."""
    monkeypatch.setenv(NEXT_OUTPUT_ENV, "1")
    return H3Request((), seed=1, outputs=2)


@pytest.mark.parametrize(
    ("bit", "also_differing"),
    [(0, set()), (22, {"denoise.cond_anchor"})],  # 0.001·(1 ulp) vanishes in the anchor's rounding
)
def test_one_flipped_bit_is_reported(
    image_ref: Path, prenoise_draws: H3Request, bit: int, also_differing: set[str]
) -> None:
    """The harness is not blind: one changed bit of prepared noise makes verify fail."""

    def flip(name: str, seed: int, tensor: torch.Tensor) -> None:
        if name == "visual_condition_noise" and seed == PRENOISE_SEED:
            tensor.view(torch.int32).view(-1)[123] ^= 1 << bit

    with observe_draws(flip):
        result = verify_request(replace(prenoise_draws, references=(image_ref,)))
    assert not result.equal
    differing = {f.path for f in result.report.differing}
    # (a changed anchor also changes what forward decodes)
    assert differing - {"decoded.video", "decoded.audio"} == {
        PRENOISE_PREFIX + name for name in {"visual_condition_noise"} | also_differing
    }


def test_global_rng_use_is_reported(image_ref: Path, prenoise_draws: H3Request) -> None:
    def touch_global_rng(name: str, seed: int, tensor: torch.Tensor) -> None:
        torch.rand(1)

    with observe_draws(touch_global_rng):
        result = verify_request(replace(prenoise_draws, references=(image_ref,)))
    assert not result.rng_state_unchanged
    assert not result.equal


def test_no_worker_thread_outlives_the_request(image_ref: Path) -> None:
    run_arm(H3Request((image_ref,)), plugin_on=True)
    assert not [t for t in threading.enumerate() if t.name.startswith(WORKER)]


@pytest.mark.parametrize(("task", "keyframes"), [("t2va", 0), ("fl2va", 1), ("fl2va", 2)])
def test_t2va_and_fl2va_are_prepared_ahead(
    image_ref: Path, monkeypatch: pytest.MonkeyPatch, task: str, keyframes: int
) -> None:
    """Upstream draws their noise serially on every release: prenoise draws all of it ahead
    (the keyframes' condition noise too), every output with the next-output setting."""
    monkeypatch.setenv(NEXT_OUTPUT_ENV, "1")
    result = verify_request(H3Request((image_ref,) * keyframes, seed=9, outputs=2, task=task))
    assert result.verified, result.summary()
    fields = NOISE if keyframes else NOISE[:2]
    for prefix in ("", "output1."):
        for name in fields:
            assert result.on.drawn_on[prefix + name].startswith(WORKER), (prefix, name)
    assert not result.on.upstream_ahead
    assert len(result.off.geometry.get("condition_shapes", [])) == keyframes


GUIDES = importlib.util.find_spec("vllm_omni.model_executor.models.minimax_h3.timeline_guides")


@pytest.mark.skipif(GUIDES is None, reason="timeline guides are new in vllm-omni 0.32.0rc1")
def test_guided_requests_draw_the_guided_rows_ahead(
    image_ref: Path, video_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A still and a clip guide: upstream draws the target noise ahead itself; the `guided`
    recipe's condition rows (one `(rows, 96)` draw per condition) and the next output are
    prenoise's, mixed as upstream mixes them."""
    monkeypatch.setenv(NEXT_OUTPUT_ENV, "1")
    request = H3Request(
        (image_ref,), seed=4, outputs=2, duration=6.0, guides=((0, image_ref), (40, video_ref))
    )
    result = verify_request(request)
    assert result.verified, result.summary()
    assert [tuple(s) for s in result.off.geometry["condition_shapes"]] == [
        (1, 16, 16),  # the still guide, on the 256x256 canvas
        (17, 16, 16),  # the clip guide
        (1, 14, 18),  # the reference image, kept within the output area (guided)
    ]
    on = result.on
    assert on.drawn_on["visual_condition_noise"].startswith(WORKER)
    assert on.drawn_on["output1.visual_condition_noise"].startswith(WORKER)
    assert on.drawn_on["output1.initial_video_noise"].startswith(WORKER)
    worker = first_output_worker()
    assert on.drawn_on["initial_video_noise"].startswith(worker)
