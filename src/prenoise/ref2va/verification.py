"""`prenoise verify` for Ref2VA: both arms on one request, every prepared field compared bitwise."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from prenoise.observe.attribution import Timing, WindowAttribution
from prenoise.observe.metrics import RequestMetrics, derive_metrics
from prenoise.observe.tracing import Tracer
from prenoise.ref2va.pipeline import PreparedOutput, Ref2VAPipeline
from prenoise.ref2va.request_plan import Ref2VARequestPlan
from prenoise.verify import FieldReport, TensorInfo, compare, nest_dotted
from prenoise.verify.rng_guard import snapshot_global_rng

__all__ = ["VerifyResult", "prepared_fields", "verify_recipe", "verify_timing"]

NOISE_FIELDS = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")
INPUT_FIELDS = (
    "video_rows",
    "audio_rows",
    "condition_rows",
    "audio_condition_rows",
    "text",
    "text_mask",
)


def prepared_fields(outputs: list[PreparedOutput]) -> dict[str, torch.Tensor | None]:
    """Named fields of prepared outputs: the contract's noise fields as drawn, then every denoise
    input (`denoise.*`). Output i ≥ 1 is prefixed `output{i}.`."""
    fields: dict[str, torch.Tensor | None] = {}
    for out in outputs:
        prefix = "" if out.index == 0 else f"output{out.index}."
        if out.noise is None:
            raise ValueError("verification needs outputs prepared with keep_noise=True")
        for name in NOISE_FIELDS:
            fields[prefix + name] = getattr(out.noise, name)
        for name in INPUT_FIELDS:
            fields[f"{prefix}denoise.{name}"] = getattr(out.inputs, name)
    return fields


@dataclass
class VerifyResult:
    """The verdict, its JSON form and each arm's timings."""

    equal: bool
    rng_state_unchanged: bool
    fields: dict[str, FieldReport]
    used_prepared_noise: bool
    prediction_events: list[str]
    timings: dict[str, RequestMetrics] | None = None
    """Each arm's metrics (`serial`, `overlapped`) from the verified run itself: one run per
    arm, serial first, so the window carries run-to-run variation (`attribution` says how much)."""

    @property
    def attribution(self) -> WindowAttribution | None:
        """What the two runs' timing difference can be credited to (None without timings)."""
        if self.timings is None:
            return None
        serial, overlapped = self.timings["serial"], self.timings["overlapped"]
        return WindowAttribution.from_arms(
            serial.noise_critical_s,
            overlapped.noise_critical_s,
            serial.prep_window_s,
            overlapped.prep_window_s,
        )

    def to_json(self) -> dict[str, Any]:
        """`{"equal", "rng_state_unchanged", "fields": {NAME: {...}}, ...}` (serial digests)."""
        out: dict[str, Any] = {
            "equal": self.equal,
            "rng_state_unchanged": self.rng_state_unchanged,
            "used_prepared_noise": self.used_prepared_noise,
            "prediction_events": self.prediction_events,
            "fields": {},
        }
        attribution = self.attribution
        if self.timings is not None and attribution is not None:
            out["timings"] = {
                "runs_per_arm": 1,
                **{arm: asdict(metrics) for arm, metrics in self.timings.items()},
                "noise_moved_s": attribution.noise_moved_s,
                "window_saved_s": attribution.window_saved_s,
                "encoder_drift": attribution.drift,
            }
        for name, report in self.fields.items():
            entry: dict[str, Any] = {"equal": report.equal, "differences": report.differences}
            if isinstance(report.a, TensorInfo):
                info = report.a
                entry.update(
                    sha256=info.sha256,
                    shape=info.shape,
                    dtype=info.dtype,
                    device=info.device,
                    stride=info.stride,
                )
            out["fields"][name] = entry
        return out

    def summary(self) -> str:
        """One line for the terminal."""
        n = len(self.fields)
        bad = [name for name, f in self.fields.items() if not f.equal]
        verdict = "bitwise equal" if not bad else f"DIFFERENT ({', '.join(bad)})"
        rng = "unchanged" if self.rng_state_unchanged else "CHANGED"
        return f"{verdict}: {n - len(bad)}/{n} fields; global RNG {rng}"


def verify_recipe(
    pipeline: Ref2VAPipeline,
    plan: Ref2VARequestPlan,
    *,
    on_stage: Callable[[str], None] | None = None,
) -> VerifyResult:
    """Prepare every output of the planned request with both arms and compare all fields bitwise.

    Both arms receive `plan` itself: the same geometry, seeds and streams, resolved once.

    `on_stage` hears each stage's name as it starts. `equal` is True only when every field is
    bitwise equal (values, shape, dtype, device,
    strides, storage offset) and the global RNG state is unchanged by both arms.
    """
    stage = on_stage or (lambda _name: None)
    before = snapshot_global_rng()
    tracers = {"serial": Tracer(), "overlapped": Tracer()}
    stage("prepare: serial arm")
    serial, _ = pipeline.prepare_outputs(plan, "serial", keep_noise=True, tracer=tracers["serial"])
    stage("prepare: overlapped arm")
    overlapped, events = pipeline.prepare_outputs(
        plan, "overlapped", keep_noise=True, tracer=tracers["overlapped"]
    )
    thread = threading.get_ident()
    timings = {arm: derive_metrics(t.spans, thread) for arm, t in tracers.items()}
    rng_unchanged = not before.differences(snapshot_global_rng())
    stage("compare")
    report = compare(nest_dotted(prepared_fields(serial)), nest_dotted(prepared_fields(overlapped)))
    return VerifyResult(
        equal=report.equal and rng_unchanged,
        rng_state_unchanged=rng_unchanged,
        fields=report.fields,
        used_prepared_noise=overlapped[0].used_prepared_noise,
        prediction_events=[f"{e.name}: predicted {e.predicted}, actual {e.actual}" for e in events],
        timings=timings,
    )


def verify_timing(result: VerifyResult) -> Timing | None:
    """The verified runs' own timing (one run per arm, serial first); None without timings."""
    if result.timings is None or result.attribution is None:
        return None
    serial, overlapped = result.timings["serial"], result.timings["overlapped"]
    return Timing(
        "the verified runs, one per arm",
        (serial.noise_critical_s, overlapped.noise_critical_s),
        (serial.prep_window_s, overlapped.prep_window_s),
        result.attribution,
    )
