"""The Ref2VA pipeline: two preparation arms behind one call, then denoise, decode, write MP4.

Every method takes the request's `Ref2VARequestPlan` (`plan_request`: geometry, budget, predicted
condition shapes and every output's streams, resolved and checked once) and computes none of it.

- `serial`: encode the prompt and references, then draw the noise (the original pipeline).
- `overlapped`: submit the first output's planned draws to a request-owned `PreparationExecutor`
  before encoding starts (the plan predicted each visual condition's latent shape with the very
  VAE methods the encoder uses), and confirm each predicted shape against the encoded one before
  the prepared noise is consumed.

Both arms give bitwise-identical denoise inputs (`prenoise verify` proves it). Continuation
requests, external conditioning and outputs after the first always draw serially. Consumed host
noise is released before the denoising loop: only the denoise inputs reference it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.guards.heap import release_free_heap
from prenoise.observe.tracing import NULL_TRACER, Category, Tracer
from prenoise.preparation.draws import run_stream
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.mixing import mix_conditions
from prenoise.preparation.prediction import MismatchPolicy, PredictionEvent
from prenoise.ref2va.audio_vae import latents_from_rows
from prenoise.ref2va.conditioning import Conditioning, ExternalConditioning, encode_conditioning
from prenoise.ref2va.config import Recipe
from prenoise.ref2va.geometry import LATENT_CHANNELS, unpatchify
from prenoise.ref2va.media import write_mp4
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.noise import NoiseFields, OutputDraws
from prenoise.ref2va.request_plan import Ref2VARequestPlan
from prenoise.ref2va.sampler import FlowEulerSampler, StepCallback
from prenoise.ref2va.transformer import VelocityFn

__all__ = [
    "Arm",
    "DenoiseInputs",
    "GenerationResult",
    "PreparedOutput",
    "Ref2VAPipeline",
    "output_path",
]

Arm = Literal["serial", "overlapped"]
ARMS: tuple[Arm, ...] = ("serial", "overlapped")

NoiseSource = Callable[[OutputDraws, Tracer], NoiseFields]
"""`(draws, tracer) -> NoiseFields`: the output's planned streams for its encoded visual shapes
(`OutputDraws.for_conditions`, all in the recipe's noise stream); replaces the serial draw and
must equal `run_stream` of each of those streams bit for bit. The streams are handed over on
every call, so no source can draw another seed, shape or noise stream by leaving one out."""


@dataclass
class DenoiseInputs:
    """Everything the denoising loop of one output receives (on the pipeline's device)."""

    video_rows: torch.Tensor
    audio_rows: torch.Tensor
    condition_rows: torch.Tensor | None
    audio_condition_rows: torch.Tensor | None
    text: torch.Tensor
    text_mask: torch.Tensor | None

    def release_video_rows(self) -> torch.Tensor:
        """Hand over the initial video rows; this object keeps an empty placeholder."""
        rows, self.video_rows = self.video_rows, _RELEASED
        return rows

    def release_audio_rows(self) -> torch.Tensor:
        """Hand over the initial audio rows; this object keeps an empty placeholder."""
        rows, self.audio_rows = self.audio_rows, _RELEASED
        return rows


_RELEASED = torch.empty(0)


@dataclass
class PreparedOutput:
    """One output ready to denoise. `noise` is kept only when asked (verification)."""

    index: int
    seed: int
    inputs: DenoiseInputs
    used_prepared_noise: bool
    noise: NoiseFields | None = None


@dataclass
class GenerationResult:
    """Paths written, per-stage seconds and prediction events of one request."""

    paths: list[Path]
    stage_seconds: dict[str, float]
    prediction_events: list[PredictionEvent] = field(default_factory=list)


def output_path(out: Path, index: int) -> Path:
    """`out` for the first output, `out` with `-{index}` before the suffix for the others."""
    return out if index == 0 else out.with_name(f"{out.stem}-{index}{out.suffix}")


class Ref2VAPipeline:
    """Runs Ref2VA requests with the models loaded once (`models` on `device`).

    `mismatch_policy` decides what happens when a predicted condition shape differs from the
    encoded one: FALLBACK (default) discards the prepared noise, draws serially and records the
    event; RAISE fails the request. The result is identical to the serial arm either way.
    """

    def __init__(
        self,
        models: Ref2VAModels,
        *,
        device: torch.device | str = "cpu",
        mismatch_policy: MismatchPolicy = MismatchPolicy.FALLBACK,
        noise_source: NoiseSource | None = None,
    ) -> None:
        self.models = models
        self.device = torch.device(device)
        self.mismatch_policy = mismatch_policy
        self.noise_source = noise_source  # must equal the serial draw bit-for-bit

    # -- preparation ---------------------------------------------------------------------------
    def prepare(
        self,
        plan: Ref2VARequestPlan,
        arm: Arm = "overlapped",
        *,
        continuation: torch.Tensor | None = None,
        external: ExternalConditioning | None = None,
        keep_noise: bool = False,
        tracer: Tracer = NULL_TRACER,
        cancel: CancelEvent | None = None,
    ) -> tuple[Conditioning, PreparedOutput, list[PredictionEvent]]:
        """Prepare the first output: encode (or adopt) the conditioning, draw and mix the noise.

        Returns the shared conditioning, the first output's denoise inputs and any prediction
        events. The overlapped arm is used only for a fresh request with local encoding.
        `plan` was checked when it was made (`plan_request`: memory budget, media caps); local
        encoding needs a plan that checked its references (`ValueError` otherwise). Media decode
        and draws stop at their next cancel point once `cancel` is set (`Cancelled`).
        """
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}; choose one of {ARMS}")
        if external is None and not plan.references_checked:
            raise ValueError(
                "this plan did not check its references (plan_request(..., references=False)): "
                "pass the external conditioning, or plan the request with its references"
            )
        recipe, first = plan.recipe, plan.outputs[0]
        with tracer.span("prepare", Category.REQUEST, arm=arm):
            if arm == "overlapped" and continuation is None and external is None:
                conditioning, noise, events = self._prepare_overlapped(plan, tracer, cancel)
                used = True
            else:
                if external is not None:
                    conditioning = Conditioning.from_external(external, continuation)
                else:
                    conditioning = encode_conditioning(
                        self.models,
                        recipe,
                        plan.geometry,
                        continuation=continuation,
                        tracer=tracer,
                        cancel=cancel,
                    )
                noise = self._draw_serial(first, conditioning, tracer, cancel)
                events, used = [], False
            inputs = self._build_inputs(recipe, conditioning, noise, tracer)
            prepared = PreparedOutput(0, first.seed, inputs, used)
            if keep_noise:
                prepared.noise = noise
            del noise  # the host noise now lives only in `inputs` (and `prepared.noise` if kept)
        release_free_heap()  # what encoding left in the heap (`guards.heap`)
        return conditioning, prepared, events

    def prepare_next(
        self,
        plan: Ref2VARequestPlan,
        conditioning: Conditioning,
        index: int,
        *,
        noise: NoiseFields | None = None,
        keep_noise: bool = False,
        tracer: Tracer = NULL_TRACER,
        cancel: CancelEvent | None = None,
    ) -> PreparedOutput:
        """Prepare output `index` ≥ 1 (`plan.outputs[index]`: seed + index) from the shared
        conditioning.

        Draws serially unless `noise` (this output's `draw_output_noise`, drawn elsewhere, e.g.
        while the previous output denoised) is handed over; the inputs are identical either way.
        """
        draws = plan.outputs[index]
        used_prepared = noise is not None
        if noise is None:
            noise = self.draw_output_noise(plan, conditioning, index, tracer=tracer, cancel=cancel)
        inputs = self._build_inputs(plan.recipe, conditioning, noise, tracer)
        prepared = PreparedOutput(
            index, draws.seed, inputs, used_prepared, noise if keep_noise else None
        )
        del noise
        return prepared

    def draw_output_noise(
        self,
        plan: Ref2VARequestPlan,
        conditioning: Conditioning,
        index: int,
        *,
        tracer: Tracer = NULL_TRACER,
        cancel: CancelEvent | None = None,
    ) -> NoiseFields:
        """The contract's draws for output `index` (`plan.outputs[index]`), on the calling
        thread."""
        return self._draw_serial(plan.outputs[index], conditioning, tracer, cancel)

    def prepare_outputs(
        self,
        plan: Ref2VARequestPlan,
        arm: Arm = "overlapped",
        *,
        keep_noise: bool = False,
        tracer: Tracer = NULL_TRACER,
    ) -> tuple[list[PreparedOutput], list[PredictionEvent]]:
        """Prepare every output of the request (`prepare`, then `prepare_next` for i ≥ 1)."""
        conditioning, first, events = self.prepare(plan, arm, keep_noise=keep_noise, tracer=tracer)
        outputs = [first]
        outputs += [
            self.prepare_next(plan, conditioning, i, keep_noise=keep_noise, tracer=tracer)
            for i in range(1, len(plan.outputs))
        ]
        return outputs, events

    def _draw_serial(
        self,
        planned: OutputDraws,
        conditioning: Conditioning,
        tracer: Tracer,
        cancel: CancelEvent | None = None,
    ) -> NoiseFields:
        draws = planned.for_conditions(conditioning.visual_shapes)
        if self.noise_source is not None:
            return self.noise_source(draws, tracer)
        with tracer.span("draw:initial_video_noise", Category.NOISE):
            video_noise = run_stream(draws.video, cancel=cancel)["initial_video_noise"]
        with tracer.span("draw:initial_audio_noise", Category.NOISE):
            audio_noise = run_stream(draws.audio, cancel=cancel)["initial_audio_noise"]
        with tracer.span("draw:visual_condition_noise", Category.NOISE):
            cond_noise = _concat(
                [
                    tensor
                    for stream in draws.conditions
                    for tensor in run_stream(stream, cancel=cancel).values()
                ]
            )
        return NoiseFields(video_noise, audio_noise, cond_noise)

    def _prepare_overlapped(
        self, plan: Ref2VARequestPlan, tracer: Tracer, cancel: CancelEvent | None
    ) -> tuple[Conditioning, NoiseFields, list[PredictionEvent]]:
        planned = plan.outputs[0]
        predicted = planned.condition_shapes
        video, audio = planned.video, planned.audio
        with PreparationExecutor(name="ref2va-prep", tracer=tracer, cancel=cancel) as prep:
            # Each stream draws from a fresh generator made inside its job (`Stream.generator`),
            # never the global RNG: what this thread draws while encoding cannot reorder it.
            # The draws poll the executor's event: set by `cancel`, or when the block exits early.
            stop = prep.cancel_event
            cond_jobs = [
                prep.submit(stream.name, partial(run_stream, stream, cancel=stop), predicted=shape)
                for stream, shape in zip(planned.conditions, predicted, strict=True)
            ]
            video_job = prep.submit(video.name, partial(run_stream, video, cancel=stop))
            audio_job = prep.submit(audio.name, partial(run_stream, audio, cancel=stop))

            conditioning = encode_conditioning(
                self.models, plan.recipe, plan.geometry, tracer=tracer, cancel=cancel
            )

            actual = conditioning.visual_shapes
            if len(actual) != len(predicted):
                raise RuntimeError(
                    f"predicted {len(predicted)} visual conditions, encoded {len(actual)}"
                )
            with tracer.span("take:noise", Category.NOISE):
                # the planned streams where the prediction held, rebuilt for the encoded shapes
                # where it did not (drawn only if `take` finds a mismatch)
                fallback = planned.for_conditions(actual).conditions
                parts = [
                    prep.take(
                        job,
                        actual=shape,
                        policy=self.mismatch_policy,
                        recompute=partial(run_stream, stream, cancel=cancel),
                    )[job.name]
                    for job, shape, stream in zip(cond_jobs, actual, fallback, strict=True)
                ]
                cond_noise = _concat(parts)
                del parts
                video_noise = prep.take(video_job)[video.name]
                audio_noise = prep.take(audio_job)[audio.name]
            events = list(prep.prediction_events)
        return conditioning, NoiseFields(video_noise, audio_noise, cond_noise), events

    def _build_inputs(
        self, recipe: Recipe, conditioning: Conditioning, noise: NoiseFields, tracer: Tracer
    ) -> DenoiseInputs:
        device = self.device
        cond_rows = audio_cond_rows = None
        visual_rows = conditioning.visual_rows()
        if visual_rows:
            with tracer.span("mix:visual", Category.MIX):
                cond_rows = mix_conditions(
                    [r.to(device) for r in visual_rows],
                    _require(noise.visual_condition_noise),
                    [recipe.tau_visual] * len(visual_rows),
                )
        audio_rows = conditioning.audio_rows()
        if audio_rows:
            with tracer.span("mix:audio", Category.MIX):
                audio_cond_rows = mix_conditions(
                    [r.to(device) for r in audio_rows],
                    _no_audio_condition_noise,
                    [recipe.tau_audio] * len(audio_rows),
                )
        with tracer.span("inputs", Category.INPUTS):
            return DenoiseInputs(
                video_rows=noise.initial_video_noise.to(device),
                audio_rows=noise.initial_audio_noise.to(device),
                condition_rows=cond_rows,
                audio_condition_rows=audio_cond_rows,
                text=conditioning.text.to(device),
                text_mask=None
                if conditioning.text_mask is None
                else conditioning.text_mask.to(device),
            )

    # -- denoise, decode, write ------------------------------------------------------------------
    def denoise(
        self,
        plan: Ref2VARequestPlan,
        prepared: PreparedOutput,
        *,
        callback: StepCallback | None = None,
        tracer: Tracer = NULL_TRACER,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the sampler; takes ownership of `prepared.inputs` (cleared to free the noise)."""
        recipe = plan.recipe
        inputs = prepared.inputs
        transformer = self.models.transformer
        summary = transformer.summarize_conditions(
            inputs.condition_rows, inputs.audio_condition_rows
        )
        velocity = _first_call_traced(
            transformer.velocity_fn(inputs.text, summary, inputs.text_mask), tracer
        )
        sampler = FlowEulerSampler(recipe.steps, recipe.shift_video, recipe.shift_audio)
        with tracer.span("denoise", Category.DENOISE, steps=recipe.steps):
            # Hand the noise rows over without keeping a reference here: the sampler's first
            # update replaces them, so the initial noise dies after step 1.
            video, audio = sampler.sample(
                velocity,
                inputs.release_video_rows(),
                inputs.release_audio_rows(),
                callback=callback,
            )
        release_free_heap()  # what the steps' activations left in the heap (`guards.heap`)
        return video, audio

    def decode_and_write(
        self,
        plan: Ref2VARequestPlan,
        video_rows: torch.Tensor,
        audio_rows: torch.Tensor,
        path: Path,
        *,
        tracer: Tracer = NULL_TRACER,
    ) -> Path:
        """Decode the final rows (at `plan.geometry`) and write an MP4 (H.264 + AAC) atomically."""
        geo = plan.geometry
        models = self.models
        with tracer.span("decode", Category.DECODE):
            latents = unpatchify(
                video_rows.float().cpu(), (1, LATENT_CHANNELS, geo.T, geo.h, geo.w)
            )
            waveform = models.audio_vae.decode(latents_from_rows(audio_rows.float()))
            path.parent.mkdir(parents=True, exist_ok=True)
            return write_mp4(
                path,
                models.video_vae.decode_stream(latents),
                waveform.cpu(),
                sample_rate=models.audio_vae.sample_rate,
            )

    def generate(
        self,
        plan: Ref2VARequestPlan,
        out: Path,
        arm: Arm = "overlapped",
        *,
        continuation: torch.Tensor | None = None,
        external: ExternalConditioning | None = None,
        on_stage: Callable[[str], None] | None = None,
        callback: StepCallback | None = None,
        tracer: Tracer | None = None,
        prepare_next_output: bool = False,
        cancel: CancelEvent | None = None,
    ) -> GenerationResult:
        """Run a whole request: prepare, then denoise, decode and write every output.

        With `prepare_next_output`, output i+1's noise is drawn on a worker while output i
        denoises (off by default; the outputs are bitwise the same either way). `cancel`
        stops preparation (media decode, draws) at its next cancel point.
        """
        tracer = tracer or Tracer()
        stage = on_stage or (lambda _name: None)
        paths: list[Path] = []
        outputs = len(plan.outputs)
        stage("prepare")
        conditioning, prepared, events = self.prepare(
            plan, arm, continuation=continuation, external=external, tracer=tracer, cancel=cancel
        )
        with PreparationExecutor(name="ref2va-next-output", tracer=tracer, cancel=cancel) as ahead:
            for index in range(outputs):
                if index > 0:
                    stage(f"prepare output {index}")
                    noise = ahead.take(f"output{index}") if prepare_next_output else None
                    prepared = self.prepare_next(
                        plan, conditioning, index, noise=noise, tracer=tracer, cancel=cancel
                    )
                    del noise
                if prepare_next_output and index + 1 < outputs:
                    ahead.submit(
                        f"output{index + 1}",
                        partial(
                            self.draw_output_noise,
                            plan,
                            conditioning,
                            index + 1,
                            tracer=tracer,
                            cancel=ahead.cancel_event,
                        ),
                    )
                stage(f"denoise output {index}")
                video, audio = self.denoise(plan, prepared, callback=callback, tracer=tracer)
                del prepared
                stage(f"decode output {index}")
                path = output_path(out, index)
                paths.append(self.decode_and_write(plan, video, audio, path, tracer=tracer))
        return GenerationResult(paths, stage_seconds(tracer), events)


def stage_seconds(tracer: Tracer) -> dict[str, float]:
    """Seconds per stage on the calling thread, in first-seen order.

    Spans named `kind:detail` (e.g. `wait:initial_video_noise`) are summed under `kind`.
    """
    ident = threading.get_ident()
    totals: dict[str, float] = {}
    for span in tracer.spans:
        if span.thread_id == ident:
            key = span.name.split(":", 1)[0]
            totals[key] = totals.get(key, 0.0) + span.duration_s
    return totals


def _first_call_traced(velocity: VelocityFn, tracer: Tracer) -> VelocityFn:
    """`velocity` with its first call recorded as a `first_transformer_call` span."""
    calls = 0

    def traced(
        video: torch.Tensor, audio: torch.Tensor, s_v: torch.Tensor, s_a: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal calls
        calls += 1
        if calls > 1:
            return velocity(video, audio, s_v, s_a)
        with tracer.span("first_transformer_call", Category.DENOISE):
            return velocity(video, audio, s_v, s_a)

    return traced


def _concat(parts: list[torch.Tensor]) -> torch.Tensor | None:
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _require(noise: torch.Tensor | None) -> torch.Tensor:
    if noise is None:
        raise RuntimeError("visual conditions present but no visual-condition noise was drawn")
    return noise


def _no_audio_condition_noise() -> torch.Tensor:
    raise ValueError(
        "tau_audio must be 1.0: the Ref2VA contract defines no noise for audio conditions"
    )
