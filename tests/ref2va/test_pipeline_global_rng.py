"""Ref2VA's workers never share a generator with the request thread, the global RNG included.

Every stream of the draw contract runs on its own fresh generator, seeded inside the worker's job
(`Stream.generator()`), so nothing on the request thread can reach it, and the workers never draw
from the global RNG. Here the request thread draws from the global RNG heavily — dropout on the
text embeddings and discarded `torch.randn` calls — while a worker is inside a draw (forced by
`rng_contention.Handshake`): every prepared field and every MP4 byte equals the serial run's,
and the global RNG ends where the serial run leaves it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from prenoise.preparation import draws as draws_module
from prenoise.preparation.draws import run_stream
from prenoise.ref2va import ModelConfig, Recipe, Ref2VAModels
from prenoise.ref2va.media import write_image
from prenoise.ref2va.noise import initial_noise_streams
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request
from prenoise.ref2va.verification import prepared_fields
from prenoise.verify import compare, nest_dotted
from rng_contention import Handshake, dropout_on_global_rng, encoder_on_global_rng

GLOBAL_SEED = 1234


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


@pytest.fixture
def recipe(tiny_config: ModelConfig, synthetic_mp4: Path, tmp_path: Path) -> Recipe:
    image = tmp_path / "ref.png"
    write_image(image, (torch.arange(64 * 96 * 3).reshape(64, 96, 3) % 251).to(torch.uint8))
    return Recipe.model_validate(
        {
            "prompt": "a test clip",
            "references": [
                {"kind": "video", "path": str(synthetic_mp4)},
                {"kind": "image", "path": str(image)},
            ],
            "frames": 22,
            "width": 128,
            "height": 64,
            "seed": 77,
            "steps": 2,
            "outputs": 2,
            "model": tiny_config.model_dump(),
        }
    )


def _park_worker_draws(monkeypatch: pytest.MonkeyPatch, worker_prefix: str) -> Handshake:
    handshake = Handshake(worker_prefix)
    monkeypatch.setattr(draws_module, "run_draw", handshake.wrap(draws_module.run_draw))
    return handshake


def test_overlapped_preparation_with_an_encoder_on_the_global_rng_equals_serial(
    tiny_models: Ref2VAModels, recipe: Recipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    handshake = _park_worker_draws(monkeypatch, "ref2va-prep")
    encoder_on_global_rng(monkeypatch, tiny_models, handshake)
    pipe = Ref2VAPipeline(tiny_models)
    plan = plan_request(recipe)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(GLOBAL_SEED)
        untouched = torch.get_rng_state()
        serial, _ = pipe.prepare_outputs(plan, "serial", keep_noise=True)
        after_serial = torch.get_rng_state()
        torch.manual_seed(GLOBAL_SEED)
        handshake.arm()
        overlapped, events = pipe.prepare_outputs(plan, "overlapped", keep_noise=True)
        after_overlapped = torch.get_rng_state()
    assert handshake.met  # the global draws ran while the worker was inside a draw
    assert overlapped[0].used_prepared_noise and events == []
    report = compare(nest_dotted(prepared_fields(serial)), nest_dotted(prepared_fields(overlapped)))
    assert report.equal, report.summary()
    assert torch.equal(after_serial, after_overlapped)
    assert not torch.equal(after_serial, untouched)  # the encoder really drew from it
    # The noise is the contract's own, whatever the request thread did to the global RNG.
    noise = overlapped[0].noise
    assert noise is not None and noise.visual_condition_noise is not None
    geo = recipe.geometry()
    video, audio = initial_noise_streams(77, geo.T, geo.h, geo.w, geo.audio_t)
    assert torch.equal(_bits(noise.initial_video_noise), _bits(run_stream(video)[video.name]))
    assert torch.equal(_bits(noise.initial_audio_noise), _bits(run_stream(audio)[audio.name]))


def _denoiser_on_global_rng(
    monkeypatch: pytest.MonkeyPatch, models: Ref2VAModels, handshake: Handshake
) -> None:
    """The transformer draws the global RNG on every call: its output passes a dropout."""
    transformer = models.transformer
    real = transformer.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if isinstance(out, tuple):
            return handshake.request_side(lambda: tuple(dropout_on_global_rng(o) for o in out))
        return handshake.request_side(lambda: dropout_on_global_rng(out))

    monkeypatch.setattr(transformer, "forward", forward)


def test_next_output_drawn_while_the_denoiser_draws_the_global_rng_changes_no_byte(
    tiny_models: Ref2VAModels, recipe: Recipe, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    handshake = _park_worker_draws(monkeypatch, "ref2va-next-output")
    _denoiser_on_global_rng(monkeypatch, tiny_models, handshake)
    pipe = Ref2VAPipeline(tiny_models)
    plan = plan_request(recipe)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(GLOBAL_SEED)
        untouched = torch.get_rng_state()
        plain = pipe.generate(plan, tmp_path / "plain.mp4")
        after_plain = torch.get_rng_state()
        torch.manual_seed(GLOBAL_SEED)
        handshake.arm()
        ahead = pipe.generate(plan, tmp_path / "ahead.mp4", prepare_next_output=True)
        after_ahead = torch.get_rng_state()
    assert handshake.met  # output 1's draw ran while output 0's denoiser drew the global RNG
    assert len(plain.paths) == len(ahead.paths) == 2
    assert [p.read_bytes() for p in plain.paths] == [p.read_bytes() for p in ahead.paths]
    assert torch.equal(after_plain, after_ahead)
    assert not torch.equal(after_plain, untouched)
