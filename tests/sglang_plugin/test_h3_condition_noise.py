"""MiniMax-H3 visual-condition noise, plugin on vs off, through upstream's real stages (0.5.23).

FL2VA (keyframes first / last / both) and Ref2VA (image references of two sizes under the
default `diffusers` resize mode, a video reference) requests are admitted by upstream's own
pre-queue hook from real files; their conditions are encoded by upstream's own visual-encoding
code (`MiniMaxH3VisualEncodingStage._encode_keyframes_from_plan`) with a fake VAE, then run
through the latent, timestep and denoising stages with a fake DiT. Compared byte for byte: every
tensor the Denoising stage receives, every DiT input, the outputs, what
`minimax_h3_imgvid_cond_noise_aug_rows` returns, and the global RNG.
"""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _h3_harness import (
    encode_visual,
    fingerprint,
    make_request,
    recorded_draws,
    recorded_serves,
    run,
    run_group,
    same,
)

from prenoise.integrations.sglang import h3_conditions, harness, live, plugin, reviewed, support

_H3 = "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3"


@pytest.fixture(scope="session")
def media(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Small real files upstream's pre-queue hook probes (PIL for images, ffprobe for video)."""
    import subprocess

    folder = tmp_path_factory.mktemp("h3_media")
    files = harness.synthetic_images(folder)  # the keyframes and references sglang-verify uses
    for name, seconds in (("video_long", 6), ("video_short", 1)):
        path = folder / f"{name}.mp4"
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
             "testsrc=size=128x72:rate=24", "-t", str(seconds), "-pix_fmt", "yuv420p",
             str(path)],
            check=True,
        )  # fmt: skip
        files[name] = str(path)
    return SimpleNamespace(**files)


def both_arms(
    h3: Any,
    monkeypatch: pytest.MonkeyPatch,
    make: Any,
    encode: Any,
) -> tuple[dict[str, Any], dict[str, Any], list[Any], list[Any]]:
    """The request made by `make()` with the plugin off, then on; also fingerprints what the
    condition-noise function returned and checks the global RNG."""
    module = __import__(f"{_H3}.condition_noise", fromlist=["x"])
    hooked = module.minimax_h3_imgvid_cond_noise_aug_rows
    mixed: list[torch.Tensor] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = hooked(*args, **kwargs)
        mixed.append(out)
        return out

    monkeypatch.setattr(module, "minimax_h3_imgvid_cond_noise_aug_rows", spy)
    arms = []
    start = torch.get_rng_state()
    for setting in ("0", "1"):
        torch.set_rng_state(start)
        monkeypatch.setenv(plugin.ENABLE_ENV, setting)
        mixed.clear()
        with (
            live.observing(spy, hooked),  # the spy is the test's own: still the reviewed code
            recorded_draws() as seen,
            recorded_serves() as serves,
        ):
            fields = run(h3, make(), before_latents=encode)
        fields["cond_noise_aug_rows"] = [fingerprint(t) for t in mixed]
        fields["rng"] = fingerprint(torch.get_rng_state())
        arms.append((fields, seen, serves))
    (off, _, _), (on, seen, serves) = arms
    assert len(off["cond_noise_aug_rows"]) == 1, "upstream drew condition noise once"
    a, b = off.pop("cond_noise_aug_rows")[0], on.pop("cond_noise_aug_rows")[0]
    assert a[:4] == b[:4] and torch.equal(a[4], b[4])
    return off, on, seen, serves


FL2VA = [(0,), (-1,), (0, -1)]


@pytest.mark.parametrize("frames", FL2VA, ids=["first", "last", "first_last"])
def test_fl2va_condition_noise_served_bitwise(
    h3: Any, media: Any, monkeypatch: pytest.MonkeyPatch, frames: tuple[int, ...]
) -> None:
    files = {0: media.kf_first, -1: media.kf_last}
    conditions = [
        {"type": "image", "uri": files[i], "role": "keyframe", "frame_index": i} for i in frames
    ]

    def make() -> Any:
        return make_request(h3, 17, 64, 4.0, task="fl2va", conditions=conditions,
                            aspect_ratio="auto")  # fmt: skip

    off, on, seen, serves = both_arms(h3, monkeypatch, make, encode_visual(h3, {}))
    assert any(k.startswith("dit[") for k in off) and same(off, on) == []
    labels = [label for label, *_ in seen if label.startswith("visual_condition_noise")]
    assert labels == [f"visual_condition_noise.{k}" for k in range(len(frames))]
    assert all(s == 17 and t.startswith("prenoise-sglang") for _l, s, t, _p in seen)
    assert all(t != threading.current_thread().name for _l, _s, t, _p in seen)
    assert serves == [("initial", True), ("conditions", True)]


def test_ref2va_images_and_video_served_bitwise(
    h3: Any, media: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two image references of different sizes under the default resize mode (2048-pixel short
    edge: 3072x2048 and 2048x2720, drawn at 128x192 / 170x128 latents and kept to one frame)
    and a video reference as long as the target."""
    conditions = [
        {"type": "image", "uri": media.ref_wide, "role": "reference"},
        {"type": "video", "uri": media.video_long, "role": "reference"},
        {"type": "image", "uri": media.ref_tall, "role": "reference"},
    ]

    def make() -> Any:
        return make_request(h3, 2**40 + 3, 64, 4.0, task="ref2va", conditions=conditions)

    off, on, seen, serves = both_arms(h3, monkeypatch, make, encode_visual(h3, {}))
    assert same(off, on) == []
    drawn = {label: key for label, key, _t, _p in seen}
    assert set(drawn) >= {f"visual_condition_noise.{k}" for k in range(3)}
    assert serves == [("initial", True), ("conditions", True)]


def test_short_reference_video_falls_back_bitwise(
    h3: Any, media: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference video shorter than the target encodes to fewer latent frames than predicted:
    the key differs, the prepared rows are dropped and upstream draws (same bits as off)."""
    conditions = [
        {"type": "video", "uri": media.video_short, "role": "reference"},
        {"type": "image", "uri": media.ref_wide, "role": "reference"},
    ]

    def make() -> Any:
        return make_request(h3, 5, 64, 4.0, task="ref2va", conditions=conditions)

    encode = encode_visual(h3, {media.video_short: 1.0})
    off, on, seen, serves = both_arms(h3, monkeypatch, make, encode)
    assert same(off, on) == []
    assert "visual_condition_noise.0" in [label for label, *_ in seen]  # prepared ...
    assert serves == [("initial", True), ("conditions", False)]  # ... and not used


@pytest.mark.parametrize("wrong", ["shape", "seed"])
def test_wrong_prediction_falls_back_bitwise(
    h3: Any, media: Any, monkeypatch: pytest.MonkeyPatch, wrong: str
) -> None:
    """A predicted key with another latent width (or seed) than the call's: upstream draws,
    bit for bit the plugin-off result (breaking the key check fails this test)."""
    predict = h3_conditions.predict

    def mispredict(batch: Any, plan: Any) -> Any:
        keys, why = predict(batch, plan)
        change = {"shape": {"latent_w": keys[0].latent_w + 2}, "seed": {"seed": keys[0].seed + 1}}
        return (h3_conditions.ConditionKey(**{**keys[0].__dict__, **change[wrong]}),), why

    monkeypatch.setattr(h3_conditions, "predict", mispredict)
    conditions = [{"type": "image", "uri": media.kf_first, "role": "keyframe", "frame_index": 0}]

    def make() -> Any:
        return make_request(h3, 23, 64, 4.0, task="fl2va", conditions=conditions,
                            aspect_ratio="auto")  # fmt: skip

    off, on, seen, serves = both_arms(h3, monkeypatch, make, encode_visual(h3, {}))
    assert same(off, on) == []
    assert "visual_condition_noise.0" in [label for label, *_ in seen]
    assert serves == [("initial", True), ("conditions", False)]


def test_changed_condition_digest_runs_upstream_with_one_line(
    h3: Any, media: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = f"{_H3}.condition_noise:minimax_h3_imgvid_cond_noise_aug_rows"
    assert key in reviewed.PATHS[reviewed.H3_CONDITIONS_PATH]
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    support.reset()
    try:
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
            plugin.register()
        lines = [r for r in caplog.records if r.name == "prenoise.sglang"]
        warnings = [r for r in lines if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "minimax_h3_imgvid_cond_noise_aug_rows" in (
            warnings[0].getMessage()
        )
        assert "upstream's code runs untouched" in warnings[0].getMessage()
        assert support.current().h3_initial  # the initial noise is still prepared
        conditions = [
            {"type": "image", "uri": media.kf_last, "role": "keyframe", "frame_index": -1}
        ]

        def make() -> Any:
            return make_request(h3, 29, 64, 4.0, task="fl2va", conditions=conditions,
                                aspect_ratio="auto")  # fmt: skip

        off, on, seen, serves = both_arms(h3, monkeypatch, make, encode_visual(h3, {}))
        assert same(off, on) == []
        assert not [label for label, *_ in seen if label.startswith("visual_condition")]
        assert serves == [("initial", True)]
    finally:
        monkeypatch.undo()
        support.reset()
    assert support.current().runs(reviewed.H3_CONDITIONS_PATH)


def test_several_outputs_each_prepared_bitwise(
    h3: Any, media: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An FL2VA prompt with three outputs, expanded by upstream (`expand_request_outputs`: one
    request per output, seeds 31, 32, 33) and run as a group through `forward_batch`: every
    output's initial and condition noise prepared on the worker and served, bit for bit."""
    from sglang.multimodal_gen.runtime.pipelines_core.request_utils import (
        expand_request_outputs,
    )

    conditions = [
        {"type": "image", "uri": media.kf_first, "role": "keyframe", "frame_index": 0},
        {"type": "image", "uri": media.kf_last, "role": "keyframe", "frame_index": -1},
    ]

    def make() -> list[Any]:
        req = make_request(h3, 31, 64, 4.0, task="fl2va", conditions=conditions,
                           aspect_ratio="auto", num_outputs_per_prompt=3)  # fmt: skip
        outputs = expand_request_outputs(req)
        for out in outputs:
            out.generator = [torch.Generator("cpu").manual_seed(out.seed)]
        return outputs

    encode = encode_visual(h3, {})
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_group(h3, make(), encode)
    torch.set_rng_state(start)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with recorded_draws() as seen, recorded_serves() as serves:
        on = run_group(h3, make(), encode)
    assert torch.equal(torch.get_rng_state(), start)
    assert len([k for k in off if k.startswith("[2].dit[")]) > 0 and same(off, on) == []
    assert [(label.split(".")[0], s) for label, s, *_ in seen] == [
        *[(f"initial_{m}_noise", s) for s in (31, 32, 33) for m in ("video", "audio")],
        *[("visual_condition_noise", s) for s in (31, 32, 33) for _k in range(2)],
    ]
    assert serves == [("initial", True)] * 3 + [("conditions", True)] * 3
