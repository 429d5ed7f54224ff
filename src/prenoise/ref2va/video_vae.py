"""Video VAE: 24 latent channels, 16x spatial compression, ``17k + 5`` frames -> ``5k + 2``.

Frames are processed one temporal group at a time (the first 5 frames -> 2 latent frames, every
following 17 frames -> 5 latent frames, an image -> 1 latent frame), so encode and decode stream:
a 15 s 1344x768 reference is never held as one float tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from prenoise.guards.heap import release_free_heap
from prenoise.ref2va import geometry
from prenoise.ref2va.initialization import build_on_meta, materialize_
from prenoise.ref2va.video_processor import VideoProcessor

IMAGE, FIRST, GROUP = "image", "first", "group"
_GROUP_FRAMES = {IMAGE: 1, FIRST: geometry.FIRST_GROUP_FRAMES, GROUP: geometry.GROUP_FRAMES}
_GROUP_LATENTS = {IMAGE: 1, FIRST: 2, GROUP: 5}


class VideoVAEConfig(BaseModel):
    """Sizes of the video VAE."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hidden: int = Field(default=64, ge=4)
    """Width of the encoder's and decoder's hidden layers."""
    latent_channels: Literal[24] = 24
    """Latent channels (fixed by the Ref2VA contract)."""
    spatial_factor: Literal[16] = 16
    """Pixels per latent cell along each side (fixed)."""


class VideoVAE(nn.Module):
    """Deterministic (mean) video VAE over uint8 RGB frames ``[n, H, W, 3]``."""

    def __init__(self, config: VideoVAEConfig) -> None:
        """Create the layers (use :meth:`build` for initialised weights)."""
        super().__init__()
        self.config = config
        self.processor = VideoProcessor(config.spatial_factor)
        pix = 3 * config.spatial_factor**2
        hid, lat = config.hidden, config.latent_channels
        self.patch_in = nn.Linear(pix, hid)
        self.mix_in = nn.Linear(hid, hid)
        self.to_latent = nn.Linear(hid, lat)
        self.from_latent = nn.Linear(lat, hid)
        self.mix_out = nn.Linear(hid, hid)
        self.patch_out = nn.Linear(hid, pix)
        self.down = nn.ParameterDict(
            {
                k: nn.Parameter(torch.empty(_GROUP_LATENTS[k], _GROUP_FRAMES[k]))
                for k in _GROUP_FRAMES
            }
        )
        self.up = nn.ParameterDict(
            {
                k: nn.Parameter(torch.empty(_GROUP_FRAMES[k], _GROUP_LATENTS[k]))
                for k in _GROUP_FRAMES
            }
        )

    @classmethod
    def build(
        cls, config: VideoVAEConfig, seed: int = 0, device: torch.device | str = "cpu"
    ) -> VideoVAE:
        """Build with deterministic weights from ``seed`` (the global RNG is untouched)."""
        return materialize_(build_on_meta(lambda: cls(config)), seed, device)

    @property
    def device(self) -> torch.device:
        """Device of the weights."""
        return self.patch_in.weight.device

    # ---- shapes -------------------------------------------------------------------------------

    def predict_video_latent_shape(
        self, num_frames: int, height: int, width: int
    ) -> tuple[int, int, int]:
        """Latent ``(t, h, w)`` that encoding ``num_frames`` frames at ``height x width`` gives.

        Calls the same processor methods as the encode path (one source of truth).
        """
        return self.processor.predict_latent_shape(num_frames, height, width)

    # ---- one temporal group -------------------------------------------------------------------

    def _space_to_depth(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 ``[n, H, W, 3]`` -> float ``[n, h, w, 3*f*f]`` in [-1, 1] on the VAE device."""
        f = self.config.spatial_factor
        n, height, width, _ = frames.shape
        x = frames.view(n, height // f, f, width // f, f, 3).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(n, height // f, width // f, f * f * 3).to(self.device, non_blocking=True)
        return x.to(torch.float32).mul_(1.0 / 127.5).sub_(1.0)

    def encode_group(self, frames: torch.Tensor, kind: str) -> torch.Tensor:
        """Encode one temporal group of uint8 frames to latents ``[C, t_group, h, w]``."""
        if frames.shape[0] != _GROUP_FRAMES[kind]:
            raise ValueError(f"{kind} group needs {_GROUP_FRAMES[kind]} frames, got {len(frames)}")
        x = F.silu(self.patch_in(self._space_to_depth(frames.contiguous())))
        x = x + F.silu(self.mix_in(x))
        y = torch.einsum("kn,nhwc->khwc", self.down[kind], x)
        return self.to_latent(y).permute(3, 0, 1, 2).contiguous()

    def decode_group(self, latents: torch.Tensor, kind: str) -> torch.Tensor:
        """Decode latents ``[C, t_group, h, w]`` of one group to uint8 frames ``[n, H, W, 3]``."""
        f = self.config.spatial_factor
        _, _, h, w = latents.shape
        y = F.silu(self.from_latent(latents.to(self.device).permute(1, 2, 3, 0)))
        x = torch.einsum("nk,khwc->nhwc", self.up[kind], y)
        x = x + F.silu(self.mix_out(x))
        p = torch.tanh_(self.patch_out(x)).add_(1.0).mul_(127.5).round_().clamp_(0, 255)
        n = p.shape[0]
        q = p.to(torch.uint8).view(n, h, w, f, f, 3).permute(0, 1, 3, 2, 4, 5)
        return q.reshape(n, h * f, w * f, 3)

    # ---- streaming encode ---------------------------------------------------------------------

    @torch.no_grad()
    def encode_stream(
        self, chunks: Iterable[torch.Tensor], height: int | None = None, width: int | None = None
    ) -> torch.Tensor:
        """Encode uint8 frame chunks ``[n, H', W', 3]`` to latents ``[1, C, t, h, w]``.

        Chunks may have any length; frames are re-buffered into temporal groups, so the result
        is bit-identical however the frames are chunked. Frames are resized (cover + crop) to the
        aligned ``height x width`` (default: the first chunk's size). After the last chunk the
        processor pads the tail by repeating the last frame; a single frame encodes as an image.
        """
        proc = self.processor
        pending: list[torch.Tensor] = []
        buffered = 0
        total = 0
        kind = FIRST
        out: list[torch.Tensor] = []
        target: tuple[int, int] | None = None
        last: torch.Tensor | None = None
        for raw in chunks:
            chunk = raw.unsqueeze(0) if raw.dim() == 3 else raw
            if chunk.shape[0] == 0:
                continue
            if target is None:
                target = proc.aligned_size(
                    height if height is not None else int(chunk.shape[1]),
                    width if width is not None else int(chunk.shape[2]),
                )
            chunk = proc.prepare_chunk(chunk, *target)
            total += chunk.shape[0]
            last = chunk[-1:]
            pending.append(chunk)
            buffered += chunk.shape[0]
            while buffered >= _GROUP_FRAMES[kind]:
                group, pending, buffered = _take(pending, _GROUP_FRAMES[kind])
                out.append(self.encode_group(group, kind))
                del group
                release_free_heap()  # what the group's activations left in the heap
                kind = GROUP
        if total == 0 or last is None:
            raise ValueError("cannot encode a video with zero frames")
        padded = proc.padded_frame_count(total)
        if padded == 1 and total == 1:
            return self.encode_group(pending[0], IMAGE).unsqueeze(0)
        extra = padded - total
        if extra < 0:
            raise ValueError(f"processor padded {total} frames down to {padded}")
        if extra:
            base = torch.cat(pending, dim=0) if pending else last
            grown = proc.pad_frames(base, base.shape[0] + extra)
            pending = [grown if pending else grown[1:]]
            buffered = int(pending[0].shape[0])
        while buffered >= _GROUP_FRAMES[kind]:
            group, pending, buffered = _take(pending, _GROUP_FRAMES[kind])
            out.append(self.encode_group(group, kind))
            kind = GROUP
        if buffered or not out:
            raise ValueError(
                f"{total} frames padded to {padded} do not fill whole temporal groups (5 + 17k)"
            )
        return torch.cat(out, dim=1).unsqueeze(0)

    def encode_video(
        self, frames: torch.Tensor, height: int | None = None, width: int | None = None
    ) -> torch.Tensor:
        """Encode all frames ``[n, H, W, 3]`` at once (same bits as any chunking)."""
        return self.encode_stream([frames], height, width)

    def encode_image(
        self, image: torch.Tensor, height: int | None = None, width: int | None = None
    ) -> torch.Tensor:
        """Encode one uint8 image ``[H, W, 3]`` to latents ``[1, C, 1, h, w]``."""
        if image.dim() != 3:
            raise ValueError(f"an image must be [H, W, 3], got {tuple(image.shape)}")
        return self.encode_stream([image.unsqueeze(0)], height, width)

    # ---- streaming decode ---------------------------------------------------------------------

    @torch.no_grad()
    def decode_stream(self, latents: torch.Tensor) -> Iterator[torch.Tensor]:
        """Decode latents ``[1, C, t, h, w]`` group by group, yielding uint8 ``[n, H, W, 3]``."""
        if latents.dim() != 5 or latents.shape[0] != 1:
            raise ValueError(f"latents must be [1, C, t, h, w], got {tuple(latents.shape)}")
        t = latents.shape[2]
        if t == 1:
            yield self._decoded(latents[0], IMAGE)
            return
        if t < 2 or (t - 2) % 5:
            raise ValueError(f"latent length {t} is neither 1 nor 5k + 2")
        yield self._decoded(latents[0, :, :2], FIRST)
        for start in range(2, t, 5):
            yield self._decoded(latents[0, :, start : start + 5], GROUP)

    def _decoded(self, latents: torch.Tensor, kind: str) -> torch.Tensor:
        """`decode_group`, then the heap's free pages handed back (`guards.heap`): what a group's
        activations leave in the heap must not add up over a long video."""
        frames = self.decode_group(latents, kind)
        release_free_heap()
        return frames

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Decode all latents to uint8 frames ``[F, H, W, 3]`` (``F = 17k + 5`` or 1)."""
        return torch.cat(list(self.decode_stream(latents)), dim=0)


def _take(pending: list[torch.Tensor], count: int) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """Split the first ``count`` frames off a list of chunks."""
    taken: list[torch.Tensor] = []
    need = count
    rest = list(pending)
    while need:
        head = rest.pop(0)
        if head.shape[0] <= need:
            taken.append(head)
            need -= head.shape[0]
        else:
            taken.append(head[:need])
            rest.insert(0, head[need:])
            need = 0
    group = taken[0] if len(taken) == 1 else torch.cat(taken, dim=0)
    return group, rest, sum(int(r.shape[0]) for r in rest)
