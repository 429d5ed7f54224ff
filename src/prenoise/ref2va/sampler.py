"""Flow-matching Euler sampler with separate video and audio sigma shifts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from prenoise.ref2va.transformer import VelocityFn


class SamplingCancelled(RuntimeError):
    """Raised by a step callback to stop sampling; the sampler lets it propagate."""


@dataclass(frozen=True)
class StepInfo:
    """What a step callback sees after step ``step`` (1-based) of ``total``."""

    step: int
    total: int
    sigma_video: float
    sigma_audio: float
    next_sigma_video: float
    next_sigma_audio: float


StepCallback = Callable[[StepInfo], None]
"""Called after every step; raise :class:`SamplingCancelled` to cancel."""


def shift_sigmas(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """Shifted schedule ``shift * s / (1 + (shift - 1) * s)`` (float32)."""
    if shift <= 0:
        raise ValueError(f"shift must be positive, got {shift}")
    s = sigmas.to(torch.float32)
    return shift * s / (1.0 + (shift - 1.0) * s)


def sigma_schedule(steps: int, shift: float) -> torch.Tensor:
    """``steps + 1`` sigmas from 1 to 0 (linear, then shifted), float32 on the CPU."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    return shift_sigmas(torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float32), shift)


@dataclass(frozen=True)
class FlowEulerSampler:
    """Euler integration of ``dx/dsigma = v`` from sigma 1 (noise) to 0 (data)."""

    steps: int
    shift_video: float = 1.0
    shift_audio: float = 1.0

    def schedules(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(video_sigmas, audio_sigmas)``, each of length ``steps + 1``."""
        return sigma_schedule(self.steps, self.shift_video), sigma_schedule(
            self.steps, self.shift_audio
        )

    def sample(
        self,
        velocity: VelocityFn,
        video: torch.Tensor,
        audio: torch.Tensor,
        callback: StepCallback | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Integrate from the noise rows ``video`` and ``audio``; returns the final rows.

        The inputs are not modified (every update is out of place) and no reference to them is
        kept past the first step, so a caller that hands them over without keeping its own
        reference frees the initial noise after step 1. ``velocity`` gets the current rows and
        0-dim float32 sigmas on the rows' device.
        """
        # A context manager, not @torch.no_grad(): a decorator's *args would pin the inputs.
        with torch.no_grad():
            sig_v, sig_a = self.schedules()
            x_v, x_a = video, audio
            del video, audio
            for i in range(self.steps):
                s_v, s_a = sig_v[i].to(x_v.device), sig_a[i].to(x_a.device)
                v_v, v_a = velocity(x_v, x_a, s_v, s_a)
                x_v = x_v + (sig_v[i + 1] - sig_v[i]).to(x_v.device) * v_v.to(x_v.dtype)
                x_a = x_a + (sig_a[i + 1] - sig_a[i]).to(x_a.device) * v_a.to(x_a.dtype)
                if callback is not None:
                    callback(
                        StepInfo(
                            step=i + 1,
                            total=self.steps,
                            sigma_video=float(sig_v[i]),
                            sigma_audio=float(sig_a[i]),
                            next_sigma_video=float(sig_v[i + 1]),
                            next_sigma_audio=float(sig_a[i + 1]),
                        )
                    )
            return x_v, x_a
