"""A Ref2VA request on every rank of a job: shared preparation, sequence-parallel denoising.

`DistributedRef2VA.prepare` runs the same preparation on every rank from rank 0's broadcast plan
(`ResolvedRequest.plan`: geometry, predicted shapes and streams resolved once, on rank 0). With
`host_shared_noise` the ranks of a host split the draw streams (started before encoding, so the
draws overlap it) and map one shared copy; otherwise every rank draws everything itself with the
pipeline's own arm. Either way every rank's prepared fields are bitwise equal to a single-process
serial preparation (`prenoise.distributed.verification` proves it). A failure on any rank fails the
request on every rank with the original text; a dead or hung rank fails the others after
`timeout_s`.

`denoise` gives each rank a contiguous shard of the video and audio rows (only that shard goes to
the device) and runs the sampler with `SequenceParallelTransformer`; the result is gathered on
every rank. With `parallel.text_encoder_tp = k > 1` the text encoder is sharded in place over
groups of `k` consecutive ranks (`tensor_parallel`); otherwise it runs replicated on every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from prenoise.distributed.group import DistContext
from prenoise.distributed.host_noise import HostSharedNoise
from prenoise.distributed.request import ResolvedRequest
from prenoise.distributed.sequence_parallel import (
    SequenceParallelTransformer,
    gather_rows,
    shard_rows,
)
from prenoise.distributed.status import StatusBoard
from prenoise.distributed.tensor_parallel import TensorParallelTextEncoder, shard_text_encoder
from prenoise.observe.tracing import NULL_TRACER, Category, Tracer
from prenoise.ref2va.config import ParallelConfig
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.pipeline import (
    Arm,
    PreparedOutput,
    Ref2VAPipeline,
    output_path,
    stage_seconds,
)
from prenoise.ref2va.request_plan import Ref2VARequestPlan
from prenoise.ref2va.sampler import FlowEulerSampler, StepCallback

__all__ = ["DistributedPrepared", "DistributedRef2VA"]


@dataclass
class DistributedPrepared:
    """Every output of a request, prepared on this rank (host memory, identical on all ranks)."""

    request: ResolvedRequest
    outputs: list[PreparedOutput]
    host_shared: bool
    fallbacks: list[str] = field(default_factory=list)


class DistributedRef2VA:
    """One rank's share of a Ref2VA job (see the module docstring)."""

    def __init__(self, ctx: DistContext, models: Ref2VAModels, parallel: ParallelConfig) -> None:
        self.ctx = ctx
        self.models = models
        self.parallel = parallel
        self.pipeline = Ref2VAPipeline(models, device="cpu")  # host preparation
        self.text_tp: TensorParallelTextEncoder | None = None  # shards models.text_encoder
        if parallel.text_encoder_tp > 1:  # collective; validates tp | world, heads, d_ff
            self.text_tp = shard_text_encoder(
                models.text_encoder,
                parallel.text_encoder_tp,
                ctx.rank,
                ctx.world_size,
                parallel.timeout_s,
            )
        self._attempts = 0

    def _board(self, request: ResolvedRequest) -> tuple[StatusBoard, str]:
        """A fresh status board (and its key) for one preparation of `request`.

        Every rank calls `prepare` in the same order, so the per-runner counter names the same
        attempt on every rank without communication; repeated preparations never see old keys.
        """
        self._attempts += 1
        key = f"{request.request_id}-{self._attempts}"
        board = StatusBoard(self.ctx.store, f"prenoise/{key}", self.ctx.world_size, self.ctx.rank)
        return board, key

    # -- preparation ---------------------------------------------------------------------------
    def prepare(
        self,
        request: ResolvedRequest,
        arm: Arm = "overlapped",
        *,
        keep_noise: bool = False,
        tracer: Tracer = NULL_TRACER,
        host_shared: bool | None = None,
    ) -> DistributedPrepared:
        """Prepare every output of `request` on this rank; all ranks return identical fields.

        Ends with a status barrier: returns only when every rank prepared successfully.
        """
        shared = self.parallel.host_shared_noise if host_shared is None else host_shared
        plan = request.plan
        board, attempt = self._board(request)
        provider: HostSharedNoise | None = None
        try:
            if shared:
                provider = HostSharedNoise(
                    board,
                    self.ctx.host_ranks,
                    self.ctx.rank,
                    attempt,
                    self.parallel.timeout_s,
                    tracer,
                )
                if arm == "overlapped":  # draws overlap encoding, from the broadcast prediction
                    provider.start(plan.outputs[0])
                pipeline = Ref2VAPipeline(self.models, device="cpu", noise_source=provider)
                outputs, _ = pipeline.prepare_outputs(
                    plan, "serial", keep_noise=keep_noise, tracer=tracer
                )
                outputs[0].used_prepared_noise = plan.outputs[0].seed in provider.started_ahead
            else:
                outputs, _ = self.pipeline.prepare_outputs(
                    plan, arm, keep_noise=keep_noise, tracer=tracer
                )
        except BaseException as exc:
            board.post_error("preparation", exc)
            raise
        finally:
            if provider is not None:
                provider.close()
        board.post_ok("prepared")
        board.wait("prepared", range(self.ctx.world_size), self.parallel.timeout_s)
        fallbacks = provider.fallbacks if provider is not None else []
        return DistributedPrepared(request, outputs, shared, fallbacks)

    # -- denoising -----------------------------------------------------------------------------
    def denoise(
        self,
        plan: Ref2VARequestPlan,
        prepared: PreparedOutput,
        *,
        callback: StepCallback | None = None,
        tracer: Tracer = NULL_TRACER,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequence-parallel sampling; returns the full final rows (CPU) on every rank.

        Takes ownership of `prepared.inputs`: only this rank's shard of the noise (and of the
        condition rows) is moved to the device, and the host references are dropped.
        """
        ctx, inputs = self.ctx, prepared.inputs
        world = ctx.world_size if self.parallel.sequence_parallel else 1
        rank = ctx.rank if world > 1 else 0
        group = None  # the default group: gloo on CPU, nccl on CUDA
        device = ctx.device
        video = inputs.release_video_rows()
        audio = inputs.release_audio_rows()
        v_spec = shard_rows(video.shape[0], rank, world)
        a_spec = shard_rows(audio.shape[0], rank, world)
        video_shard = video[v_spec.start : v_spec.stop].to(device)
        audio_shard = audio[a_spec.start : a_spec.stop].to(device)
        del video, audio

        def shard_of(rows: torch.Tensor | None) -> torch.Tensor | None:
            if rows is None:
                return None
            spec = shard_rows(rows.shape[0], rank, world)
            return rows[spec.start : spec.stop].to(device)

        model = self.models.transformer
        sp = SequenceParallelTransformer(model, world, group)
        summary = sp.summarize_conditions(
            shard_of(inputs.condition_rows), shard_of(inputs.audio_condition_rows)
        )
        inputs.condition_rows = inputs.audio_condition_rows = None
        mask = inputs.text_mask
        velocity = sp.velocity_fn(inputs.text.to(device), summary, mask)
        recipe = plan.recipe
        sampler = FlowEulerSampler(recipe.steps, recipe.shift_video, recipe.shift_audio)
        with tracer.span("denoise", Category.DENOISE, steps=recipe.steps, ranks=world):
            v_out, a_out = sampler.sample(velocity, video_shard, audio_shard, callback=callback)
        with tracer.span("gather", Category.DENOISE):
            v_full = gather_rows(v_out, v_spec, world, group).cpu()
            a_full = gather_rows(a_out, a_spec, world, group).cpu()
        return v_full, a_full

    def generate(
        self,
        request: ResolvedRequest,
        out: Path,
        arm: Arm = "overlapped",
        *,
        on_stage: Callable[[str], None] | None = None,
        callback: StepCallback | None = None,
        tracer: Tracer | None = None,
    ) -> tuple[list[Path], dict[str, float]]:
        """Prepare, denoise every output in parallel, then decode and write on rank 0 only.

        Returns the written paths (empty on other ranks) and this rank's stage seconds.
        """
        tracer = tracer or Tracer()
        stage = on_stage or (lambda _name: None)
        plan = request.plan
        stage("prepare")
        prepared = self.prepare(request, arm, tracer=tracer)
        paths: list[Path] = []
        outputs, prepared.outputs = prepared.outputs, []
        for index in range(len(outputs)):
            stage(f"denoise output {index}")
            output = outputs.pop(0)  # hand the inputs over: the host noise dies with them
            video, audio = self.denoise(plan, output, callback=callback, tracer=tracer)
            del output
            if self.ctx.rank == 0:
                stage(f"decode output {index}")
                paths.append(
                    self.pipeline.decode_and_write(
                        plan, video, audio, output_path(out, index), tracer=tracer
                    )
                )
        return paths, stage_seconds(tracer)
