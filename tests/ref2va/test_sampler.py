"""Flow-matching Euler sampler: shifted schedules, integration, callbacks, cancellation."""

from __future__ import annotations

import pytest
import torch

from prenoise.ref2va import FlowEulerSampler, SamplingCancelled, StepInfo, sigma_schedule


def test_shifted_schedule() -> None:
    sig = sigma_schedule(4, 3.0)
    s = torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0])
    assert torch.equal(sig, 3.0 * s / (1.0 + 2.0 * s))
    assert sig[0] == 1.0 and sig[-1] == 0.0
    assert torch.equal(sigma_schedule(3, 1.0), torch.linspace(1, 0, 4))


def test_constant_velocity_reaches_data() -> None:
    video, audio = torch.ones(6, 96), torch.full((4, 32), 2.0)

    def velocity(
        v: torch.Tensor, a: torch.Tensor, sv: torch.Tensor, sa: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full_like(v, 0.5), torch.full_like(a, -1.0)

    infos: list[StepInfo] = []
    out_v, out_a = FlowEulerSampler(5, 12.0, 3.0).sample(velocity, video, audio, infos.append)
    torch.testing.assert_close(out_v, torch.full_like(video, 0.5))
    torch.testing.assert_close(out_a, torch.full_like(audio, 3.0))
    assert [i.step for i in infos] == [1, 2, 3, 4, 5]
    assert infos[0].sigma_video == 1.0 and infos[-1].next_sigma_audio == 0.0
    assert torch.equal(video, torch.ones(6, 96))


def test_callback_can_cancel() -> None:
    def velocity(
        v: torch.Tensor, a: torch.Tensor, sv: torch.Tensor, sa: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return v, a

    def stop(info: StepInfo) -> None:
        if info.step == 2:
            raise SamplingCancelled("stop")

    with pytest.raises(SamplingCancelled):
        FlowEulerSampler(10).sample(velocity, torch.ones(2, 96), torch.ones(2, 32), stop)
