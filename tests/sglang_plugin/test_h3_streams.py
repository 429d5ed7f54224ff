"""`PRENOISE_SGLANG_NOISE_STREAM`: MiniMax-H3's noise in a named noise stream, through upstream's
real stages (SGLang 0.5.23, fake DiT and VAE).

Three arms per request: the plugin off (upstream's native draws); the plugin on in the stream
with every draw prepared on prenoise's workers; the plugin on in the stream with nothing
prepared (upstream's own serial draws run inside the stream's mode). The last two must be the
same bytes in every field; `native` and, on an x86 host, `x86` must equal the plugin off;
`libm` must equal prenoise.noise.streams' libm draw and differ from native.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from _h3_harness import encode_visual, make_request, run
from _h3_rollout_harness import differing, rollout_contexts, rollout_request, run_rollout

from prenoise.integrations.sglang import (
    h3_conditions,
    h3_initial,
    h3_rollout,
    harness,
    plugin,
    reviewed,
    support,
)
from prenoise.integrations.sglang.harness import synthetic_images
from prenoise.integrations.sglang.streams import NOISE_STREAM_ENV
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import draws_in_stream
from prenoise.noise.streams import NoiseStreamError

_H3 = "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3"


@pytest.fixture
def loops() -> Iterator[list[h3_rollout.RolloutLoop]]:
    seen: list[h3_rollout.RolloutLoop] = []
    h3_rollout.loop_observers.append(seen.append)
    yield seen
    h3_rollout.loop_observers.remove(seen.append)


def nothing_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin prepares nothing: upstream's serial draws run (in the stream's mode)."""
    monkeypatch.setattr(h3_initial.RequestDraws, "_submit_initial", lambda *_a: None)
    monkeypatch.setattr(h3_conditions, "predict", lambda *_a: ((), "not prepared (test)"))
    monkeypatch.setattr(h3_rollout, "expected_draws", lambda _b: (None, "not prepared (test)"))


def rollout_arms(
    h3: Any, monkeypatch: pytest.MonkeyPatch, stream: str, **request: Any
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A t2va rollout: plugin off; on in `stream`, prepared; on in `stream`, nothing prepared."""
    start = torch.get_rng_state()
    arms = []
    for setting, prepared in (("0", True), ("1", True), ("1", False)):
        torch.set_rng_state(start)
        with monkeypatch.context() as patch:
            patch.setenv(plugin.ENABLE_ENV, setting)
            patch.setenv(NOISE_STREAM_ENV, stream)
            if not prepared:
                nothing_prepared(patch)
            arms.append(run_rollout(h3, rollout_request(h3, 21, **request), monkeypatch))
        assert torch.equal(torch.get_rng_state(), start)  # never the global RNG
    off, served, serial = arms
    return off, served, serial


NOISE_FIELDS = (
    "extra.minimax_h3_denoise_state.initial_video_rows",
    "rollout.log_probs",
    "rollout.latents",
)


def test_native_changes_nothing(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    off, served, serial = rollout_arms(h3, monkeypatch, "native", steps=5)
    assert differing(off, served) == [] and differing(off, serial) == []
    assert loops[0].served == 5 and loops[1].served == 0  # every draw, the first one too


@pytest.mark.skipif(
    noise_streams.local_torch_stream() != "x86", reason="local torch does not draw the x86 stream"
)
def test_x86_on_an_x86_host_is_upstreams_cpu_bits(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    off, served, serial = rollout_arms(h3, monkeypatch, "x86", steps=5, sde_steps=[0, 2, 3])
    assert differing(off, served) == [] and differing(off, serial) == []
    assert loops[0].served == 3 and loops[0].first_ahead and loops[0].stream == "x86"


def test_libm_is_the_libm_stream_and_not_native(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    off, served, serial = rollout_arms(h3, monkeypatch, "libm", steps=6)
    assert differing(served, serial) == []
    assert set(NOISE_FIELDS) <= set(differing(off, served))
    assert loops[0].served == 6 and loops[0].first_ahead and loops[1].served == 0
    # the initial video rows are the libm draw of the request seed, patchified by upstream
    packed = __import__(f"{_H3}.packed_tokens", fromlist=["x"])
    rows = served["extra.minimax_h3_denoise_state.initial_video_rows"]
    generator = torch.Generator().manual_seed(21)
    latent = served["latent_shape"]
    video = noise_streams.randn(latent, generator=generator, stream="libm")
    expected = packed.minimax_h3_patchify_video_latent(video, patch_size=(1, 2, 2))
    assert torch.equal(rows[4], expected.contiguous().reshape(-1).view(torch.uint8))
    # the rollout noise: consecutive libm draws of a CPU generator seeded with the seed, the
    # generator consumed as torch consumes it
    generator = torch.Generator().manual_seed(21)
    shape = served["noise_buffer"].shape
    noise = [noise_streams.randn(shape, generator=generator, stream="libm") for _ in range(6)]
    assert torch.equal(served["noise_buffer"], noise[-1])
    assert torch.equal(served["generator"].get_state(), generator.get_state())
    assert not torch.equal(off["noise_buffer"], noise[-1])


class DeviceGenerator(torch.Generator):
    """A stand-in for a CUDA generator: a CPU generator whose `device` reads `cuda` (no GPU
    here; the copy to the device is then a CPU tensor's `.to(cpu)`)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda")


def device_rollout(
    h3: Any, monkeypatch: pytest.MonkeyPatch, stream: str, **request: Any
) -> dict[str, Any]:
    """A rollout whose generator is a `DeviceGenerator` seeded as upstream seeds its own."""
    with rollout_contexts() as contexts, monkeypatch.context() as patch:
        module = __import__(f"{_H3}.minimax_h3_rollout", fromlist=["x"])
        recorded = module.MiniMaxH3RolloutCtx

        class OnDevice(recorded):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                device = DeviceGenerator()
                device.manual_seed(self.generator.initial_seed())
                self.generator = device

        patch.setattr(module, "MiniMaxH3RolloutCtx", OnDevice)
        patch.setenv(plugin.ENABLE_ENV, "1")
        patch.setenv(NOISE_STREAM_ENV, stream)
        fields = run_rollout(h3, rollout_request(h3, 33, **request), monkeypatch)
    (ctx,) = contexts
    assert isinstance(ctx.generator, DeviceGenerator)
    return fields


def test_device_generator_in_a_stream_draws_a_cpu_stream(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    """Under libm the device generator is never drawn from: the noise is the libm stream of a
    CPU generator seeded with its `initial_seed()`, prepared on the worker; under x86 on this
    host it is the CPU generator's own bits — the same rollout on any device."""
    libm = device_rollout(h3, monkeypatch, "libm", steps=6)
    generator = torch.Generator().manual_seed(33)
    shape = libm["noise_buffer"].shape
    noise = [noise_streams.randn(shape, generator=generator, stream="libm") for _ in range(6)]
    assert torch.equal(libm["noise_buffer"], noise[-1])
    assert torch.equal(libm["generator"].get_state(), torch.Generator().manual_seed(33).get_state())
    assert loops[-1].served == 6 and loops[-1].drawn == 6 and loops[-1].first_ahead
    # every step's noise: the same rollout with upstream's CPU generator, in libm
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
    cpu_libm = run_rollout(h3, rollout_request(h3, 33, steps=6), monkeypatch)
    assert differing(cpu_libm, libm) == ["generator.final_state"]
    if noise_streams.local_torch_stream() == "x86":
        x86 = device_rollout(h3, monkeypatch, "x86", steps=6)
        monkeypatch.setenv(plugin.ENABLE_ENV, "0")
        cpu = run_rollout(h3, rollout_request(h3, 33, steps=6), monkeypatch)
        assert differing(cpu, x86) == ["generator.final_state"]  # the device one never drawn


def test_device_generator_in_native_is_upstreams_own_draw(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    fields = device_rollout(h3, monkeypatch, "native", steps=4)
    assert loops[-1].drawn == 0 and loops[-1].served == 0  # the mode was never entered
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_rollout(h3, rollout_request(h3, 33, steps=4), monkeypatch)
    assert differing(off, fields) == []


def test_fl2va_conditions_and_initial_in_libm(
    h3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Keyframe (visual-condition) and initial noise, prepared in libm, equal upstream's own
    serial draws run in libm, and differ from native."""
    files = synthetic_images(tmp_path)
    conditions = [
        {"type": "image", "uri": files["kf_first"], "role": "keyframe", "frame_index": 0},
        {"type": "image", "uri": files["kf_last"], "role": "keyframe", "frame_index": -1},
    ]
    arms = []
    for setting, prepared in (("0", True), ("1", True), ("1", False)):
        with monkeypatch.context() as patch:
            patch.setenv(plugin.ENABLE_ENV, setting)
            patch.setenv(NOISE_STREAM_ENV, "libm")
            if not prepared:
                nothing_prepared(patch)
            request = make_request(
                h3, 17, 64, 4.0, task="fl2va", conditions=conditions, aspect_ratio="auto"
            )
            arms.append(run(h3, request, before_latents=encode_visual(h3, {})))
    off, served, serial = arms
    for arm in arms:
        arm.pop("served_ptrs")
    assert differing(served, serial) == []
    assert "dit[0].x" in differing(off, served)


def test_condition_functions_outside_a_request_draw_in_the_stream(
    h3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's visual- and audio-condition functions, called through the plugin's hooks with
    no request prepared: drawn in the stream (the reference: the same function inside
    `draws_in_stream`), native unchanged."""
    module = __import__(f"{_H3}.condition_noise", fromlist=["x"])
    visual = module.minimax_h3_imgvid_cond_noise_aug_rows.__wrapped__
    audio = module.minimax_h3_audio_cond_noise_aug_rows.__wrapped__
    clean_v = torch.zeros(1 * 4 // 2 * 8 // 2, 96)  # t * h/2 * w/2 rows
    v_kw = {"condition_shapes": [(1, 4, 8)], "target_latent_t": 3, "imgvid_cond_num_frames": 1,
            "seed": 5, "noise_aug": 0.25}  # fmt: skip
    clean_a = torch.zeros(2 * 3, 32)
    a_kw = {"condition_audio_t": [3], "seed": 5, "noise_aug": 0.25}
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    for stream in ("native", "libm", "x86"):
        monkeypatch.setenv(NOISE_STREAM_ENV, stream)
        got_v = plugin.around_imgvid_cond_noise(visual, clean_v, **v_kw)
        got_a = plugin.around_audio_cond_noise(audio, clean_a, **a_kw)
        with draws_in_stream(stream):
            assert torch.equal(got_v, visual(clean_v, **v_kw))
            assert torch.equal(got_a, audio(clean_a, **a_kw))
        native = (visual(clean_v, **v_kw), audio(clean_a, **a_kw))
        same = stream == "native" or noise_streams.local_torch_stream() == stream
        assert torch.equal(got_v, native[0]) is same and torch.equal(got_a, native[1]) is same


def test_a_draw_the_stream_cannot_serve_raises(h3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's rollout update with a device generator, outside a prepared loop, in a named
    stream: `NoiseStreamError` naming the stream, never a native draw."""
    from types import SimpleNamespace

    module = __import__(f"{_H3}.minimax_h3_rollout", fromlist=["x"])
    update = module.minimax_h3_rollout_update_video_target
    batch = SimpleNamespace(rollout_sde_type="cps", rollout_noise_level=0.7)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(NOISE_STREAM_ENV, "x86")
    with pytest.raises(NoiseStreamError, match="x86"):
        update(torch.zeros(4, 96), torch.zeros(4, 96), sigma_curr=0.9, sigma_next=0.8,
               batch=batch, generator=DeviceGenerator(), loop_step_index=0,
               noise_buffer=None)  # fmt: skip


def test_bad_setting_registers_nothing(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    registered: list[str] = []
    monkeypatch.setattr(
        h3.plugins.HookRegistry,
        "register",
        classmethod(lambda _cls, target, *_a: registered.append(target)),
    )
    monkeypatch.setattr(plugin, "_said", set())
    monkeypatch.setenv(NOISE_STREAM_ENV, "avx2")
    with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
        plugin.register()
        plugin.register()
    (line,) = [r for r in caplog.records if r.name == "prenoise.sglang"]
    assert line.levelno == logging.ERROR and NOISE_STREAM_ENV in line.getMessage()
    assert "'avx2'" in line.getMessage() and registered == []
    # set later in a process that registered: each request fails, never drawn natively
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with pytest.raises(NoiseStreamError, match=NOISE_STREAM_ENV):
        run(h3, make_request(h3, 2, 64, 4.0))


def test_a_stream_on_changed_code_fails_requests(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = next(k for k in reviewed.REVIEWED if k.endswith(":minimax_h3_audio_cond_noise_aug_rows"))
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    monkeypatch.setattr(h3.plugins.HookRegistry, "register", classmethod(lambda *_a: None))
    support.reset()
    try:
        monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and reviewed.H3_STREAMS_PATH in warnings[0]
        assert "NoiseStreamError" in warnings[0]
        monkeypatch.setenv(plugin.ENABLE_ENV, "1")
        with pytest.raises(NoiseStreamError, match="minimax_h3_audio_cond_noise_aug_rows"):
            run(h3, make_request(h3, 2, 64, 4.0))
        monkeypatch.setenv(NOISE_STREAM_ENV, "native")  # native: upstream's code, as always
        run(h3, make_request(h3, 2, 64, 4.0))
    finally:
        monkeypatch.undo()
        support.reset()


class PosteriorVAE(harness.FakeVideoVAE):
    """The fake VAE's latents as a posterior's mean, sampled by upstream's own
    `DiagonalGaussianDistribution.sample` (`torch.randn(mean.shape, generator=None)` on the
    CPU, then `noise * std + mean`) as the H3 VAE's encode does; each sample recorded."""

    samples: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # (mean, std, sample)

    def __init__(self) -> None:
        super().__init__()
        self.samples = []

    def _sample(self, latent: torch.Tensor) -> list[torch.Tensor]:
        klvae = __import__(_KLVAE, fromlist=["x"])
        dist = klvae.DiagonalGaussianDistribution(torch.cat([latent, latent * 0.3 - 1.0], dim=1))
        z = dist.sample()
        self.samples.append((dist.mean.clone(), dist.std.clone(), z.clone()))
        return [z]

    def encode_images(self, image: Any, use_fp16_latent: bool = True) -> list[torch.Tensor]:
        return self._sample(super().encode_images(image, use_fp16_latent)[0])

    def encode_videos(self, frames: Any, use_fp16_latent: bool = True) -> list[torch.Tensor]:
        return self._sample(super().encode_videos(frames, use_fp16_latent)[0])


_KLVAE = "sglang.multimodal_gen.runtime.models.vaes.minimax_h3_video_vae.klvae"


def posterior_arm(
    h3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, enabled: str, stream: str
) -> tuple[dict[str, Any], list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], torch.Tensor]:
    """A ref2va request (an image and a video reference) through upstream's real visual
    encoding with `PosteriorVAE`: its fields, the posterior samples, the global RNG after."""
    import subprocess

    files = synthetic_images(tmp_path)
    video = tmp_path / "ref.mp4"
    if not video.exists():
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
             "testsrc=size=128x72:rate=24", "-t", "6", "-pix_fmt", "yuv420p", str(video)],
            check=True,
        )  # fmt: skip
    conditions = [
        {"type": "image", "uri": files["ref_wide"], "role": "reference"},
        {"type": "video", "uri": str(video), "role": "reference"},
    ]
    vaes: list[PosteriorVAE] = []

    def vae() -> PosteriorVAE:
        vaes.append(PosteriorVAE())
        return vaes[-1]

    torch.manual_seed(1234)  # the global RNG the request starts from (every arm)
    with monkeypatch.context() as patch:
        patch.setenv(plugin.ENABLE_ENV, enabled)
        patch.setenv(NOISE_STREAM_ENV, stream)
        patch.setattr(harness, "FakeVideoVAE", vae)
        request = make_request(h3, 9, 64, 4.0, task="ref2va", conditions=conditions)
        fields = run(h3, request, before_latents=encode_visual(h3, {}))
    fields.pop("served_ptrs")
    after = torch.get_rng_state()
    samples = [s for v in vaes for s in v.samples]
    assert len(samples) == 2  # the image's and the video's posterior
    return fields, samples, after


def test_vae_posterior_samples_in_the_stream(
    h3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The reference image's and video's VAE posterior samples (upstream's visual encoding,
    upstream's `DiagonalGaussianDistribution.sample` inside upstream's seed-42 `fork_rng`):
    `native` is the plugin off bit for bit; `libm` is prenoise's libm draw of seed 42 for that
    shape (and differs from native), the global RNG after it exactly the plugin off's; `x86`
    on an x86 host is native's bits."""
    off, off_samples, off_rng = posterior_arm(h3, monkeypatch, tmp_path, "0", "native")
    for stream in ("native", "x86", "libm"):
        fields, samples, rng = posterior_arm(h3, monkeypatch, tmp_path, "1", stream)
        assert torch.equal(rng, off_rng), stream  # fork_rng restored it, as upstream
        for (mean, std, z), (_m, _s, native) in zip(samples, off_samples, strict=True):
            if stream != "native":  # prenoise's draw of seed 42, then upstream's arithmetic
                seed_42 = torch.Generator().manual_seed(42)
                drawn = noise_streams.fill_(torch.empty(mean.shape), seed_42, stream)
                assert torch.equal(z, drawn.mul_(std).add_(mean)), stream
            same = stream == "native" or noise_streams.local_torch_stream() == stream
            assert torch.equal(z, native) is same, stream
        assert (differing(off, fields) == []) is (stream != "libm"), stream
