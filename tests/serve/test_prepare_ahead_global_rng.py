"""Serve's prepare-ahead never shares a generator with the executor thread, the global RNG included.

The next job is prepared (encoded, its noise drawn on the pipeline's own worker from fresh
generators) while the executor thread denoises the running one. Here the denoiser draws from the
global RNG heavily (dropout on its output, discarded `torch.randn` calls) while the next job's
preparation worker is inside a draw (forced by `rng_contention.Handshake`): both MP4s are
byte-identical to serial `Ref2VAPipeline.generate` runs, and the global RNG ends where they leave
it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from waits import before, deadline

pytest.importorskip("prometheus_client")  # the scheduler's metrics (the `serve` extra)

import torch

from prenoise.observe.tracing import NULL_TRACER, Tracer
from prenoise.preparation import draws as draws_module
from prenoise.ref2va.config import Recipe
from prenoise.ref2va.pipeline import PreparedOutput, Ref2VAPipeline
from prenoise.ref2va.request_plan import Ref2VARequestPlan, plan_request
from prenoise.serve.jobs import TERMINAL, Job, JobState, JobStore
from prenoise.serve.metrics import ServeMetrics, kernel_backend
from prenoise.serve.scheduler import Scheduler
from rng_contention import Handshake, dropout_on_global_rng

GLOBAL_SEED = 4321
SEEDS = (5, 6)  # the running job, the job prepared ahead


class DenoiserOnGlobalRNG(Ref2VAPipeline):
    """Its denoising draws the global RNG: the final rows pass a train-mode dropout."""

    handshake: Handshake

    def denoise(
        self,
        plan: Ref2VARequestPlan,
        prepared: PreparedOutput,
        *,
        callback: Any = None,
        tracer: Tracer = NULL_TRACER,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        def denoise_with_dropout() -> tuple[torch.Tensor, torch.Tensor]:
            video, audio = Ref2VAPipeline.denoise(
                self, plan, prepared, callback=callback, tracer=tracer
            )
            return dropout_on_global_rng(video), dropout_on_global_rng(audio)

        return self.handshake.request_side(denoise_with_dropout)


def _drawing_seed(seed: int) -> Any:
    def matches(draw: Any, generator: torch.Generator, **kwargs: Any) -> bool:
        return generator.initial_seed() == seed

    return matches


def _wait_until_finished(jobs: list[Job]) -> None:
    at = deadline()
    while any(job.state not in TERMINAL for job in jobs):
        assert before(at), [job.state for job in jobs]
        time.sleep(0.02)


def test_prepare_ahead_while_the_denoiser_draws_the_global_rng_changes_no_byte(
    recipe: Recipe, pipeline: Ref2VAPipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handshake = Handshake("ref2va-prep")
    parked = handshake.wrap(draws_module.run_draw, matches=_drawing_seed(SEEDS[1]))
    monkeypatch.setattr(draws_module, "run_draw", parked)
    hostile = DenoiserOnGlobalRNG(pipeline.models, device=pipeline.device)
    hostile.handshake = handshake
    plans = [plan_request(recipe.model_copy(update={"seed": seed})) for seed in SEEDS]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(GLOBAL_SEED)
        untouched = torch.get_rng_state()
        expected = [
            hostile.generate(p, tmp_path / f"serial-{p.recipe.seed}.mp4").paths[0].read_bytes()
            for p in plans
        ]
        after_serial = torch.get_rng_state()

        torch.manual_seed(GLOBAL_SEED)
        handshake.arm()
        scheduler = Scheduler(
            hostile, JobStore(), ServeMetrics(kernel_backend()), tmp_path / "out", prepare_ahead=1
        )
        jobs = [Job(plan=p) for p in plans]
        scheduler.start()
        try:
            for job in jobs:
                scheduler.submit(job)
            _wait_until_finished(jobs)
        finally:
            scheduler.stop()
        after_served = torch.get_rng_state()

    assert [job.state for job in jobs] == [JobState.DONE, JobState.DONE], [j.error for j in jobs]
    assert jobs[1].prepared_ahead == "ready"
    assert handshake.met  # job 2's draw ran while job 1's denoiser drew the global RNG
    assert [job.paths[0].read_bytes() for job in jobs] == expected
    assert torch.equal(after_served, after_serial)
    assert not torch.equal(after_serial, untouched)  # the denoiser really drew from it
