"""Host-side preparation of video frames for the video VAE: resize, align and pad.

The :class:`VideoProcessor` is the single source of truth for alignment and padding: both the
VAE's encode path and its shape prediction call these very methods.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from prenoise.ref2va import geometry


class VideoProcessor:
    """Resize (cover + centre crop), floor sizes to 32 and pad frame counts to ``17k + 5``.

    Frames are uint8 tensors ``[n, H, W, 3]`` (RGB, channels last), as decoders produce them.
    A single frame is an image: it is never padded and encodes to one latent frame.
    """

    def __init__(self, spatial_factor: int = geometry.SPATIAL_FACTOR) -> None:
        """Create a processor for a VAE with the given spatial compression."""
        self.spatial_factor = spatial_factor

    def aligned_size(self, height: int, width: int) -> tuple[int, int]:
        """Target ``(height, width)`` floored to multiples of 32."""
        out_w, out_h = geometry.floor_size(width, height)
        return out_h, out_w

    def padded_frame_count(self, num_frames: int) -> int:
        """Frames after host padding: 1 for an image, else aligned up to ``17k + 5``."""
        if num_frames < 1:
            raise ValueError(f"cannot encode {num_frames} frames")
        if num_frames == 1:
            return 1
        return geometry.align_frames_17k5(num_frames)

    def latent_frame_count(self, padded_frames: int) -> int:
        """Latent frames of a padded count: 1 for an image, else the ``17k+5 -> 5k+2`` rule."""
        if padded_frames == 1:
            return 1
        return geometry.latent_frames(padded_frames)

    def latent_size(self, height: int, width: int) -> tuple[int, int]:
        """Latent ``(h, w)`` of an aligned frame size."""
        return height // self.spatial_factor, width // self.spatial_factor

    def pad_frames(self, frames: torch.Tensor, num_frames: int) -> torch.Tensor:
        """Pad ``frames`` up to ``num_frames`` by repeating the last frame."""
        missing = num_frames - frames.shape[0]
        if missing < 0:
            raise ValueError(f"cannot pad {frames.shape[0]} frames down to {num_frames}")
        if missing == 0:
            return frames
        tail = frames[-1:].expand(missing, *frames.shape[1:])
        return torch.cat([frames, tail], dim=0)

    def resize_frames(self, frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Cover-scale, then centre-crop uint8 frames ``[n, h, w, 3]`` to ``height x width``."""
        if frames.dim() != 4 or frames.shape[-1] != 3 or frames.dtype != torch.uint8:
            raise ValueError(
                f"frames must be uint8 [n, H, W, 3], got {frames.dtype} {tuple(frames.shape)}"
            )
        src_h, src_w = int(frames.shape[1]), int(frames.shape[2])
        if (src_h, src_w) == (height, width):
            return frames
        scaled_w, scaled_h, left, top = geometry.cover_crop_box(src_w, src_h, width, height)
        x = frames.permute(0, 3, 1, 2).float()
        x = F.interpolate(x, size=(scaled_h, scaled_w), mode="bilinear", antialias=True)
        x = x[:, :, top : top + height, left : left + width]
        return x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()

    def prepare_chunk(self, frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Validate a chunk and bring it to the aligned ``height x width``."""
        if frames.dim() == 3:
            frames = frames.unsqueeze(0)
        return self.resize_frames(frames, height, width)

    def predict_latent_shape(
        self, num_frames: int, height: int, width: int
    ) -> tuple[int, int, int]:
        """Latent ``(t, h, w)`` of ``num_frames`` frames targeted at ``height x width``."""
        aligned_h, aligned_w = self.aligned_size(height, width)
        t = self.latent_frame_count(self.padded_frame_count(num_frames))
        h, w = self.latent_size(aligned_h, aligned_w)
        return t, h, w
