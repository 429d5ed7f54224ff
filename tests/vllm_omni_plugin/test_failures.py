"""Encoder failures, prediction mismatches and host-buffer release inside the real pipeline.

The requests are kinds prenoise draws ahead itself on every release: FL2VA (one keyframe: its
initial noise and its condition noise), and for a shape the prediction misses a reference video
(0.30/0.31) or, where upstream draws a Ref2VA first output ahead itself and checks its own
prediction (0.32.0rc1), a clip timeline guide, whose `guided` condition rows prenoise draws.
"""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import pytest
import torch
from release import UPSTREAM_AHEAD, first_output_worker

from prenoise.integrations.vllm_omni.request import observe_draws
from prenoise.integrations.vllm_omni.settings import MISMATCH_ENV
from prenoise.integrations.vllm_omni.standins import StandInHooks
from prenoise.integrations.vllm_omni.verification import H3Request, run_arm, run_forward
from prenoise.preparation.prediction import PredictionMismatchError
from prenoise.verify import compare, nest_dotted

WORKER = "prenoise-vllm-omni"


def keyframe(image: Path, **fields: int) -> H3Request:
    """An FL2VA request on one keyframe: all its noise is prenoise's to draw ahead."""
    return H3Request((image,), task="fl2va", **fields)


def missed(image: Path, video: Path) -> H3Request:
    """A request whose video-shaped condition prenoise predicts (see the module's docstring)."""
    if UPSTREAM_AHEAD:
        return H3Request((image,), seed=9, duration=6.0, guides=((40, video),))
    return H3Request((video,), seed=9)


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER)]


class EncoderFailed(RuntimeError):
    pass


@pytest.mark.parametrize("where", ["fail_text_encoder", "fail_media_encoder"])
def test_encoder_failure_reraises_and_leaves_no_worker(image_ref: Path, where: str) -> None:
    hooks = StandInHooks(**{where: EncoderFailed("encoder down")})
    with pytest.raises(EncoderFailed, match="encoder down") as info:
        run_forward(keyframe(image_ref), plugin_on=True, hooks=hooks)
    assert type(info.value) is EncoderFailed  # the original exception, not a wrapper
    assert not worker_threads()


def test_text_encoder_failure_cancels_pending_draws_and_joins_the_running_one(
    image_ref: Path,
) -> None:
    """The first draw is held on the worker while the text encoder fails: the two draws queued
    behind it are cancelled, the running one is joined, the original error propagates."""
    drawing, failed = threading.Event(), threading.Event()
    finished: list[str] = []

    def hold_first_draw(name: str, seed: int, tensor: torch.Tensor) -> None:
        drawing.set()
        failed.wait(timeout=30)
        finished.append(name)

    def fail_once_drawing() -> None:
        assert drawing.wait(timeout=30), "no draw started while the text encoder ran"
        threading.Timer(0.2, failed.set).start()  # releases the held draw during the join
        raise EncoderFailed("text encoder down")

    hooks = StandInHooks(on_text_encode=fail_once_drawing)
    with observe_draws(hold_first_draw), pytest.raises(EncoderFailed) as info:
        run_forward(keyframe(image_ref, seed=4), plugin_on=True, hooks=hooks)
    notes = getattr(info.value, "__notes__", [])
    assert notes == [
        "prenoise: cancelled pending preparation "
        "['initial_audio_noise@4', 'visual_condition_noise@4']"
    ]
    assert finished == ["initial_video_noise"]  # joined: it finished before forward returned
    assert not worker_threads()


def shape_miss() -> StandInHooks:
    """A video encoder whose latent is one frame longer than its processor's own arithmetic."""
    return StandInHooks(video_latent_t_offset=1)


def test_mismatch_runs_upstream_serial_code(image_ref: Path, video_ref: Path) -> None:
    request = missed(image_ref, video_ref)
    off = run_arm(request, plugin_on=False, hooks=shape_miss())
    on = run_arm(request, plugin_on=True, hooks=shape_miss())
    report = compare(nest_dotted(off.fields), nest_dotted(on.fields))
    assert report.equal, report.summary()
    [event] = on.prediction_events
    assert event.name == "visual_condition_noise@9"
    assert on.drawn_on["visual_condition_noise"] == threading.current_thread().name
    # unaffected by the miss
    assert on.drawn_on["initial_video_noise"].startswith(first_output_worker())


def test_mismatch_raises_when_configured(
    image_ref: Path, video_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MISMATCH_ENV, "raise")
    with pytest.raises(PredictionMismatchError, match="visual_condition_noise"):
        run_forward(missed(image_ref, video_ref), plugin_on=True, hooks=shape_miss())
    assert not worker_threads()


def test_prepared_noise_is_released_before_the_first_transformer_call(image_ref: Path) -> None:
    refs: dict[str, weakref.ref[torch.Tensor]] = {}
    alive_at_first_call: list[str] = []

    def keep_weakref(name: str, seed: int, tensor: torch.Tensor) -> None:
        refs[name] = weakref.ref(tensor)

    def first_call(calls: int) -> None:
        if calls == 1:
            gc.collect()
            alive_at_first_call.extend(n for n, r in refs.items() if r() is not None)

    hooks = StandInHooks(on_transformer_call=first_call)
    with observe_draws(keep_weakref):
        run_forward(keyframe(image_ref), plugin_on=True, hooks=hooks)
    assert set(refs) == {"initial_video_noise", "initial_audio_noise", "visual_condition_noise"}
    # The video rows were copied into the packed layout and the condition noise mixed: dead.
    # The audio rows are the model's input itself (no reference audio here) and stay alive.
    assert "visual_condition_noise" not in alive_at_first_call
    assert "initial_video_noise" not in alive_at_first_call
