"""MiniMax-H3 audio-condition noise, plugin on vs off, through upstream's real stages (0.5.23).

Below an `audio_cond_noise_aug_for_inference` of 1.0 the Denoising stage draws
`torch.randn(2 * ref_audio_t, 32)` per audio-bearing condition
(`minimax_h3_audio_cond_noise_aug_rows`, a fresh CPU generator seeded `seed + 1`). prenoise does
not prepare it (docs/sglang.md, Limits: `ref_audio_t` is the audio VAE's output length for the
waveform ffmpeg decodes inside the audio encoder's own call). A Ref2VA request with a real 32 kHz
audio file, admitted by upstream's pre-queue hook and encoded by upstream's own
`MiniMaxH3AudioEncodingStage._encode_reference_payload` (ffmpeg decode, upstream's
`DacAudioVAE` at a tiny width, untrained), must give upstream's bits: every tensor the
Denoising stage receives, every DiT input, what the audio function returned, the global RNG.
"""

from __future__ import annotations

import importlib
import math
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _h3_harness import (
    FakeH3DiT,
    encode_visual,
    fingerprint,
    make_request,
    recorded_draws,
    run,
    same,
)

from prenoise.integrations.sglang import harness, live, plugin

_H3 = "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3"
_HOP = 800  # encoder rates 2*4*5*5*4: the 40 latent frames a second of `minimax_h3_audio_latent_t`


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A reference image and two 32 kHz stereo WAV files (no resampler needed): one longer than
    the target (decoded up to the target's duration), one shorter (decoded whole)."""
    from PIL import Image

    folder: Path = tmp_path_factory.mktemp("h3_audio")
    image = folder / "ref.png"
    Image.new("RGB", (300, 200), (20, 20, 230)).save(image)
    out = {"image": str(image)}
    for name, seconds in (("long", 9.3), ("short", 2.7)):
        path = folder / f"{name}.wav"
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
             f"sine=frequency=440:sample_rate=32000:duration={seconds}", "-ac", "2", str(path)],
            check=True,
        )  # fmt: skip
        out[name] = str(path)
    return SimpleNamespace(**out)


@pytest.fixture(scope="module")
def audio_vae() -> Any:
    """Upstream's `DacAudioVAE` at a tiny width (weights from a private seed; the global RNG is
    left as it was)."""
    from sglang.multimodal_gen.runtime.models.vaes.minimax_h3_audio_vae.audio_vae import (
        DacAudioVAE,
    )

    with torch.random.fork_rng():
        torch.manual_seed(0)
        vae = DacAudioVAE(
            encoder_dim=1,
            encoder_rates=[2, 4, 5, 5, 4],
            latent_dim=32,
            decoder_dim=128,
            sample_rate=32000,
            vae_latent_channels=32,
        )
    assert int(vae.hop_length) == _HOP
    return vae.eval()


def encode_with_audio(h3: Any, vae: Any, payloads: list[dict[str, Any]]) -> Any:
    """The encoders' place: upstream's visual encoding (fake video VAE), then upstream's audio
    encoding of the plan's audio materials (its own ffmpeg decode and audio VAE call)."""
    from sglang.multimodal_gen.configs.models.vaes.minimax_h3_audio import (
        MiniMaxH3AudioVAEArchConfig,
    )

    audio_stage = importlib.import_module(f"{_H3}.stages.audio_encoding")
    resolved_plan = importlib.import_module(f"{_H3}.resolved_plan")
    visual = encode_visual(h3, {})

    def encode(batch: Any) -> None:
        visual(batch)
        plan = resolved_plan.minimax_h3_plan_from_batch(batch)
        routed = set(plan.encoders.get("audio") or ())
        materials = [m for m in plan.materials if m.condition_index in routed]
        stage = object.__new__(audio_stage.MiniMaxH3AudioEncodingStage)
        stage.audio_vae = vae
        stage.vae_arch_config = MiniMaxH3AudioVAEArchConfig(
            latents_mean=[0.1] * 32, latents_std=[0.9] * 32
        )
        payload = stage._encode_reference_payload(batch, plan, materials)
        batch.extra["minimax_h3_reference_audio_rows"] = payload
        payloads.append(payload)

    return encode


def both_arms(
    h3: Any, monkeypatch: pytest.MonkeyPatch, make: Any, encode: Any
) -> tuple[dict[str, Any], dict[str, Any], list[Any], list[list[Any]]]:
    """The request with the plugin off, then on; also what the audio-condition function was
    called with and returned, and the global RNG after each arm."""
    module = importlib.import_module(f"{_H3}.condition_noise")
    hooked = module.minimax_h3_audio_cond_noise_aug_rows
    calls: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = hooked(*args, **kwargs)
        calls.append((dict(kwargs), fingerprint(out)))
        return out

    monkeypatch.setattr(module, "minimax_h3_audio_cond_noise_aug_rows", spy)
    arms, seen_per_arm = [], []
    start = torch.get_rng_state()
    for setting in ("0", "1"):
        torch.set_rng_state(start)
        monkeypatch.setenv(plugin.ENABLE_ENV, setting)
        calls.clear()
        with live.observing(spy, hooked), recorded_draws() as seen:
            fields = run(h3, make(), before_latents=encode)
        fields["audio_cond_calls"] = list(calls)
        fields["rng"] = fingerprint(torch.get_rng_state())
        arms.append(fields)
        seen_per_arm.append(seen)
    off, on = arms
    assert torch.equal(off["rng"][4], fingerprint(start)[4]), "the global RNG moved"
    return off, on, off.pop("audio_cond_calls"), [on.pop("audio_cond_calls"), *seen_per_arm]


@pytest.mark.parametrize("reference", ["long", "short"])
def test_audio_condition_noise_is_upstreams_bitwise(
    h3: Any, files: Any, audio_vae: Any, monkeypatch: pytest.MonkeyPatch, reference: str
) -> None:
    """An image and an audio reference, audio-condition noise at 0.9: upstream draws the audio
    rows (its length is the encoder's, told by no plan), the plugin's arm gives the same bits."""
    conditions = [
        {"type": "image", "uri": files.image, "role": "reference"},
        {"type": "audio", "uri": getattr(files, reference), "role": "reference"},
    ]

    def make() -> Any:
        return make_request(h3, 41, 64, 158 / 24, task="ref2va", conditions=conditions,
                            audio_cond_noise_aug_for_inference=0.9)  # fmt: skip

    payloads: list[dict[str, Any]] = []
    encode = encode_with_audio(h3, audio_vae, payloads)

    class AudioReferenceDiT(FakeH3DiT):
        """The fake DiT, its audio velocity over the reference rows too (the loop keeps the
        target suffix)."""

        def __init__(self, target_rows: int, audio_rows: int) -> None:
            super().__init__(target_rows, audio_rows + 2 * payloads[-1]["ref_audio_t"])

    monkeypatch.setattr(harness, "FakeH3DiT", AudioReferenceDiT)
    off, on, off_calls, (on_calls, _seen_off, seen_on) = both_arms(h3, monkeypatch, make, encode)
    assert any(k.startswith("dit[") for k in off) and same(off, on) == []
    assert len(off_calls) == len(on_calls) == 1, "upstream drew the audio-condition noise once"
    (kw_off, out_off), (kw_on, out_on) = off_calls[0], on_calls[0]
    assert kw_off == kw_on and kw_off["noise_aug"] == 0.9 and kw_off["seed"] == 41
    assert out_off[:4] == out_on[:4] and torch.equal(out_off[4], out_on[4])
    # Its length: the samples ffmpeg decoded (up to the target's duration) over the hop, padded
    # up by upstream's `preprocess`; not the plan's audio length (158 frames: 6.583 s, 263).
    shape = make().extra["minimax_h3_resolved_plan"].shape
    assert (shape["frame_count"], shape["audio_latent_t"]) == (158, 263)
    seconds = {"long": 158 / 24, "short": 2.7}[reference]
    ref_audio_t = payloads[0]["ref_audio_t"]
    assert kw_off["condition_audio_t"] == [ref_audio_t]
    assert (
        ref_audio_t
        == math.ceil(round(seconds * 32000) / _HOP)
        == {"long": 264, "short": 108}[reference]
    )
    # Nothing of it was prepared: only the initial and the visual-condition draws.
    assert not [label for label, *_ in seen_on if "audio_condition" in label]
