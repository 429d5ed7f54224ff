"""Smoke tests of the tiny MiniMax-H3 modular pipeline (`tiny_minimax_h3.py`).

Every workflow runs on one pipeline built once for the module: `t2va`, `fl2va` (a first
keyframe, a last one, both) and `ref2va` (image references of two sizes, a video reference with
its soundtrack, an audio reference beside an image). Each call is made twice from the same seed
and must give identical tensors; the global RNG must not move and the request generator must be
consumed by exactly the draws of `before_denoise.py` (one per visual condition, then the video
noise, then the audio noise).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip(
    "diffusers.modular_pipelines.minimax_h3",
    reason="no modular MiniMax-H3 in this diffusers (added after 0.40.0; 0.42.1 has it)",
)
pytest.importorskip(
    "diffusers.modular_pipelines.minimax_h3.modular_blocks_minimax_h3",
    reason="the MiniMax-H3 blocks need a transformers with Qwen3-VL",
    exc_type=ImportError,
)

import tiny_minimax_h3 as tiny

VIDEO_SHAPE = (1, tiny.NUM_FRAMES, 3, tiny.HEIGHT, tiny.WIDTH)
AUDIO_SHAPE = (1, 2, tiny.NUM_AUDIO_SAMPLES)
# An image reference is encoded at a 64-pixel short edge, rounded to the 32-pixel canvas
# multiple: 64x48 -> 96x64 and 48x80 -> 64x96 pixels, i.e. 6x4 / 4x6 latents, 6 patch rows.
IMAGE_REFERENCE_ROWS = 6


@pytest.fixture(scope="module")
def pipe() -> Any:
    pipe: Any = tiny.minimax_h3()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _run(pipe: Any, workflow: str, seed: int = 0, **overrides: Any) -> Any:
    return pipe(**tiny.call_kwargs(workflow, seed=seed, **overrides))


def _assert_outputs(state: Any) -> tuple[torch.Tensor, torch.Tensor]:
    video, audio = state.get("videos"), state.get("audio")
    assert isinstance(video, torch.Tensor) and video.shape == VIDEO_SHAPE
    assert isinstance(audio, torch.Tensor) and audio.shape == AUDIO_SHAPE
    assert video.min() >= 0.0 and video.max() <= 1.0
    assert torch.isfinite(audio).all()
    assert state.get("sampling_rate") == tiny.AUDIO_SAMPLE_RATE
    return video, audio


def _assert_reproducible(pipe: Any, workflow: str, **overrides: Any) -> Any:
    """Two calls from the same seed: identical outputs. Returns the first call's state."""
    first = _run(pipe, workflow, **overrides)
    video, audio = _assert_outputs(first)
    again_video, again_audio = _assert_outputs(_run(pipe, workflow, **overrides))
    assert torch.equal(video, again_video)
    assert torch.equal(audio, again_audio)
    return first


def test_build_is_seeded_and_leaves_the_global_rng_alone() -> None:
    before = torch.random.get_rng_state()
    a: Any = tiny.minimax_h3()
    b: Any = tiny.minimax_h3()
    assert torch.equal(before, torch.random.get_rng_state())
    for name in ("text_encoder", "vae", "audio_vae", "transformer", "transformer_ref"):
        sa, sb = getattr(a, name).state_dict(), getattr(b, name).state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), name
    # the two transformer partitions are different modules with different weights
    assert not torch.equal(a.transformer.proj_in.weight, a.transformer_ref.proj_in.weight)
    assert a.config.reference_image_short_edge == tiny.REFERENCE_IMAGE_SHORT_EDGE
    assert a.config.canvas_short_edge == tiny.CANVAS_SHORT_EDGE


def test_t2va(pipe: Any) -> None:
    state = _assert_reproducible(pipe, "t2va")
    assert state.get("num_condition_video_rows") == 0
    assert state.get("num_condition_audio_rows") == 0
    other_seed = _run(pipe, "t2va", seed=1)
    assert not torch.equal(state.get("videos"), other_seed.get("videos"))


@pytest.mark.parametrize(
    "keyframes",
    [("image",), ("last_image",), ("image", "last_image")],
    ids=["first", "last", "first_and_last"],
)
def test_fl2va(pipe: Any, keyframes: tuple[str, ...]) -> None:
    overrides: dict[str, Any] = {"image": None}
    overrides.update({name: tiny.keyframe(seed=i) for i, name in enumerate(keyframes)})
    state = _assert_reproducible(pipe, "fl2va", **overrides)
    # a keyframe on the 32x32 canvas is a single 2x2 latent, one packed row
    assert state.get("num_condition_video_rows") == len(keyframes)
    assert state.get("keyframe_anchors") == tuple(
        {"image": "first", "last_image": "last"}[name] for name in keyframes
    )


REF2VA_CASES: dict[str, tuple[list[Any], int, int]] = {
    # references, conditioning video rows, conditioning audio rows
    "two_image_sizes": (
        [tiny.image_reference(64, 48), tiny.image_reference(48, 80, seed=1)],
        2 * IMAGE_REFERENCE_ROWS,
        0,
    ),
    # 48 frames of 32x32 at 24 fps: encoded as 39 (17 * 2 + 5) frames, 12 latent frames of one
    # row each; its 2 s soundtrack is 80 latents per channel, 160 rows
    "video_with_audio": ([tiny.video_reference(48, 32, 32, with_audio=True)], 12, 160),
    "image_and_audio": (
        [tiny.image_reference(64, 48), tiny.audio_reference(2.0, seed=2)],
        IMAGE_REFERENCE_ROWS,
        160,
    ),
}


@pytest.mark.parametrize("case", sorted(REF2VA_CASES))
def test_ref2va(pipe: Any, case: str) -> None:
    references, video_rows, audio_rows = REF2VA_CASES[case]
    state = _assert_reproducible(pipe, "ref2va", references=references)
    assert state.get("num_condition_video_rows") == video_rows
    assert state.get("num_condition_audio_rows") == audio_rows


def test_ref2va_default_reference(pipe: Any) -> None:
    state = _assert_reproducible(pipe, "ref2va")
    assert state.get("num_condition_video_rows") == IMAGE_REFERENCE_ROWS


RNG_CASES: list[tuple[str, dict[str, Any]]] = [
    ("t2va", {}),
    ("fl2va", {"last_image": tiny.keyframe(seed=1)}),
    ("ref2va", {"references": REF2VA_CASES["two_image_sizes"][0]}),
    ("ref2va", {"references": REF2VA_CASES["video_with_audio"][0]}),
]


@pytest.mark.parametrize(
    ("workflow", "overrides"), RNG_CASES, ids=["t2va", "fl2va", "ref2va_images", "ref2va_video"]
)
def test_draws_only_from_the_request_generator(
    pipe: Any, workflow: str, overrides: dict[str, Any]
) -> None:
    """The global RNG does not move, and the request generator ends where one draw per visual
    condition, then the video noise, then the audio noise leave it. (The VAE posterior of a
    condition is sampled too, but from a private generator seeded 42.)"""
    kwargs = tiny.call_kwargs(workflow, seed=3, **overrides)
    before = torch.random.get_rng_state()
    state = pipe(**kwargs)
    assert torch.equal(before, torch.random.get_rng_state())

    expected = torch.Generator("cpu").manual_seed(3)
    for condition in state.get("condition_latents") or []:
        torch.randn(condition.shape, generator=expected)
    latent_size = tiny.HEIGHT // 16
    video_noise = (1, tiny.VAE_LATENT_CHANNELS, tiny.NUM_LATENT_FRAMES, latent_size, latent_size)
    torch.randn(video_noise, generator=expected)
    torch.randn((2 * tiny.NUM_AUDIO_LATENTS, tiny.AUDIO_LATENT_CHANNELS), generator=expected)
    assert torch.equal(kwargs["generator"].get_state(), expected.get_state())


@pytest.mark.parametrize("workflow", tiny.WORKFLOWS)
def test_workflow_pipeline_matches_the_full_one(pipe: Any, workflow: str) -> None:
    """A workflow's own pipeline holds only its components and gives the full pipeline's output."""
    workflow_pipe: Any = tiny.minimax_h3(workflow)
    workflow_pipe.set_progress_bar_config(disable=True)
    own = "transformer_ref" if workflow == "ref2va" else "transformer"
    other = "transformer" if workflow == "ref2va" else "transformer_ref"
    assert getattr(workflow_pipe, own, None) is not None
    assert other not in workflow_pipe.components
    state = _run(workflow_pipe, workflow)
    video, audio = _assert_outputs(state)
    full = _run(pipe, workflow)
    assert torch.equal(video, full.get("videos"))
    assert torch.equal(audio, full.get("audio"))
