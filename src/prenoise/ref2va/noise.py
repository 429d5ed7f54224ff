"""The Ref2VA draw contract as prenoise streams (`docs/background/ref2va-contract.md`).

For request seed `s`, every stream uses its own fresh CPU generator seeded `s`:
1. `initial_video_noise`: `randn(1, 24, T, h, w)` → patchified rows `[T·h/2·w/2, 96]`;
2. `initial_audio_noise`: `randn(2·audio_t, 32)`;
3. `visual_condition_noise`: per visual condition k, in order, `randn(1, 24, full_t, h_k, w_k)`
   with `full_t = max(T + n_visual, t_k)`, keep `[:, :, :t_k]`, patchify; rows concatenated.
Every stream is drawn in one noise stream (`noise_stream`, default "native"; see
`prenoise.noise.streams`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.noise.layouts import Patchify
from prenoise.preparation.draws import Draw, Stream, run_stream

__all__ = [
    "LATENT_CHANNELS",
    "NoiseFields",
    "OutputDraws",
    "condition_streams",
    "draw_condition_noise",
    "initial_noise_streams",
    "output_draws",
]

LATENT_CHANNELS = 24
AUDIO_FEATURES = 32

LatentShape = tuple[int, int, int]
"""`(t, h, w)` of one visual condition's latents."""


def initial_noise_streams(
    seed: int,
    latent_t: int,
    latent_h: int,
    latent_w: int,
    audio_t: int,
    *,
    noise_stream: str = "native",
) -> tuple[Stream, Stream]:
    """The video and audio initial-noise streams (two generators, both seeded `seed`)."""
    video = Stream(
        "initial_video_noise",
        seed,
        (
            Draw(
                "initial_video_noise",
                (1, LATENT_CHANNELS, latent_t, latent_h, latent_w),
                layout=Patchify(),
            ),
        ),
        noise_stream=noise_stream,
    )
    audio = Stream(
        "initial_audio_noise",
        seed,
        (Draw("initial_audio_noise", (2 * audio_t, AUDIO_FEATURES)),),
        noise_stream=noise_stream,
    )
    return video, audio


def condition_streams(
    seed: int,
    latent_t: int,
    condition_shapes: Sequence[LatentShape],
    *,
    noise_stream: str = "native",
) -> tuple[Stream, ...]:
    """One fresh-generator stream per visual condition (the dependent-noise rule)."""
    n_visual = len(condition_shapes)
    streams = []
    for k, (t_k, h_k, w_k) in enumerate(condition_shapes):
        full_t = max(latent_t + n_visual, t_k)
        draw = Draw(
            f"visual_condition_noise.{k}",
            (1, LATENT_CHANNELS, full_t, h_k, w_k),
            keep=(1, LATENT_CHANNELS, t_k),
            layout=Patchify(),
        )
        streams.append(
            Stream(f"visual_condition_noise.{k}", seed, (draw,), noise_stream=noise_stream)
        )
    return tuple(streams)


def draw_condition_noise(
    seed: int,
    latent_t: int,
    condition_shapes: Sequence[LatentShape],
    cancel: CancelEvent | None = None,
    *,
    noise_stream: str = "native",
) -> torch.Tensor | None:
    """Draw every visual condition's noise and concatenate the rows (None without conditions)."""
    parts = [
        tensor
        for stream in condition_streams(seed, latent_t, condition_shapes, noise_stream=noise_stream)
        for tensor in run_stream(stream, cancel=cancel).values()
    ]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else torch.cat(parts)


@dataclass
class NoiseFields:
    """The three contract fields exactly as drawn (CPU, float32, contiguous)."""

    initial_video_noise: torch.Tensor
    initial_audio_noise: torch.Tensor
    visual_condition_noise: torch.Tensor | None


@dataclass(frozen=True)
class OutputDraws:
    """Every stream of one output, all in `noise_stream`: the initial video and audio noise and
    one stream per visual condition of `condition_shapes`, in order (seed `seed` each).

    Built by `output_draws`; a request's are resolved once, in its `Ref2VARequestPlan`.
    """

    index: int
    """The output (0 first); its seed is the request seed + `index`."""
    seed: int
    latent_t: int
    """`T` of the request: each condition's full draw has `max(T + n_visual, t_k)` frames."""
    video: Stream
    audio: Stream
    condition_shapes: tuple[LatentShape, ...]
    conditions: tuple[Stream, ...]
    noise_stream: str

    def for_conditions(self, shapes: Sequence[LatentShape]) -> OutputDraws:
        """These draws for the visual conditions `shapes` (as encoded): `self` when `shapes` are
        `condition_shapes`, else a copy whose condition streams follow `shapes` (the video and
        audio streams do not depend on them and are kept)."""
        wanted = tuple((int(t), int(h), int(w)) for t, h, w in shapes)
        if wanted == self.condition_shapes:
            return self
        streams = condition_streams(
            self.seed, self.latent_t, wanted, noise_stream=self.noise_stream
        )
        return replace(self, condition_shapes=wanted, conditions=streams)


def output_draws(
    index: int,
    seed: int,
    latent_t: int,
    latent_h: int,
    latent_w: int,
    audio_t: int,
    condition_shapes: Sequence[LatentShape],
    *,
    noise_stream: str = "native",
) -> OutputDraws:
    """The streams of output `index`, drawn from `seed` (`initial_noise_streams` and
    `condition_streams` of `condition_shapes`), all in `noise_stream`."""
    shapes = tuple((int(t), int(h), int(w)) for t, h, w in condition_shapes)
    video, audio = initial_noise_streams(
        seed, latent_t, latent_h, latent_w, audio_t, noise_stream=noise_stream
    )
    return OutputDraws(
        index=index,
        seed=seed,
        latent_t=latent_t,
        video=video,
        audio=audio,
        condition_shapes=shapes,
        conditions=condition_streams(seed, latent_t, shapes, noise_stream=noise_stream),
        noise_stream=noise_stream,
    )
