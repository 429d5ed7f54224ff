"""`prenoise vllm-omni-verify`: the real MiniMax-H3 pipeline, plugin off vs on, field by field.

Each arm runs upstream's `MiniMaxH3Pipeline.forward` on the stand-in components
(`standins.build_pipeline`) for the same request, from the same global RNG state. Probes wrapped
outermost around `_build_denoise_inputs`, `_initial_noise` and the condition-noise function
record, per output, what the pipeline computed:
- `initial_video_noise`, `initial_audio_noise`: what `_initial_noise` returned;
- `visual_condition_noise`: with the plugin on, the tensor prenoise prepared (when it did);
  otherwise upstream's own function evaluated at the same arguments on clean rows of `-0.0`
  with `noise_aug=0.0`, which returns its draw exactly (`-0.0·0 + 1·noise == noise`, -0.0 kept);
- `denoise.*`: everything `_build_denoise_inputs` returned, walked whole and copied when it
  returned (dicts, lists/tuples, dataclasses, named tuples, the branch and any other object's
  attributes, tensors, numbers, dtypes, devices, None, strings): one field per value, named by
  its dotted path (`denoise.branch.static_kwargs.packed_seq_params.cu_seqlens_q`); a value the
  walk cannot compare faithfully is listed in `uncompared` and fails the verdict;
- `decoded.video`, `decoded.audio`: what `forward` returned (all outputs, decoded).
- `audio_condition_noise` (only when upstream's audio-condition mix draws, i.e. its `noise_aug`
  is not 1): upstream's audio-condition function evaluated the same way;
Fields of output i ≥ 1 are prefixed `output{i}.`.

Noise streams (`PRENOISE_VLLM_OMNI_NOISE_STREAM`, `--noise-stream`): both arms use the setting.
The plugin-on arm is prenoise with it; the plugin-off arm is upstream's `forward` run whole inside
`prenoise.noise.stream_mode.draws_in_stream(stream)`, so every CPU-generator normal draw anywhere in
it is drawn in the stream, independently of which functions prenoise wraps. The recomputed
condition-noise fields are drawn in the same stream. `native`: no mode anywhere.

The verdict (`VerifyResult.verified`) needs more than equal fields: the plugin-on arm must have
run the overlapped path. Every noise tensor the pipeline consumed for the prepared outputs (the
first; all of them with `PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=1`) must have been drawn on a
worker thread and taken by the pipeline; otherwise `not_prepared_reasons` says why not (plugin
disabled, a MiniMax-H3 path off on this vllm-omni's changed code, naming the function, request
not eligible, a prediction mismatch, a draw not made ahead) — and, under a named stream, every
draw it made serially must have been drawn in that stream (counted by `streams.run_serial`).
`vllm-omni-verify` also requires prenoise itself to have drawn something (`prenoise_required`:
a noise tensor prepared and handed over, or under a named stream upstream's serial draws drawn in
the stream): a request whose noise upstream drew all ahead, natively, proves nothing of prenoise.
"""

from __future__ import annotations

import contextlib
import copy
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.integrations.vllm_omni import plugin, support
from prenoise.integrations.vllm_omni.arm_probes import (
    AUDIO_CONDITION,
    NOISE_FIELDS,
    ArmProbes,
    ArmResult,
    field_prefix,
)
from prenoise.integrations.vllm_omni.h3_request import H3Request
from prenoise.integrations.vllm_omni.request import observe_draws, record_name
from prenoise.integrations.vllm_omni.settings import (
    ENABLE_ENV,
    PluginSettings,
    SettingsError,
)
from prenoise.integrations.vllm_omni.standins import StandInHooks, build_pipeline
from prenoise.noise.stream_mode import draws_in_stream
from prenoise.noise.streams import NATIVE
from prenoise.verify import ComparisonReport, compare, nest_dotted
from prenoise.verify.rng_guard import snapshot_global_rng

__all__ = [
    "AUDIO_CONDITION",
    "NOISE_FIELDS",
    "NOTHING_OF_PRENOISE",
    "ArmResult",
    "H3Request",
    "VerifyResult",
    "run_arm",
    "run_forward",
    "verify_request",
]


def _install_state(plugin_on: bool) -> None:
    """Install or uninstall prenoise; raise if that did not take (an arm must be what it says).

    `install` does nothing over another plugin's patch, and `uninstall` nothing under one: the
    two arms would then run the same code, and any comparison of them would prove nothing.
    """
    (plugin.install if plugin_on else plugin.uninstall)()
    if plugin.is_installed() != plugin_on:
        action = "installed in" if plugin_on else "uninstalled from"
        raise RuntimeError(
            f"prenoise could not be {action} MiniMax-H3: another plugin patched it (see the "
            "warning logged by prenoise.vllm_omni); the plugin-on and plugin-off arms would run "
            "the same code"
        )


def run_forward(request: H3Request, *, plugin_on: bool, hooks: StandInHooks | None = None) -> Any:
    """`forward` once, nothing recorded (for release and failure tests); returns its output."""
    was_installed = plugin.is_installed()
    _install_state(plugin_on)
    try:
        return build_pipeline(hooks, request.task).forward(request.forward_request())
    finally:
        (plugin.install if was_installed else plugin.uninstall)()


def run_arm(request: H3Request, *, plugin_on: bool, hooks: StandInHooks | None = None) -> ArmResult:
    """Run `forward` once with prenoise installed (`plugin_on`) or not; restores the previous
    installation state afterwards. Both arms draw in the environment's noise stream
    (`PRENOISE_VLLM_OMNI_NOISE_STREAM`); plugin off: the whole `forward` inside
    `draws_in_stream`."""
    stream = noise_stream_setting()
    was_installed = plugin.is_installed()
    _install_state(plugin_on)
    try:
        pipe = build_pipeline(hooks, request.task)
        forward_request = request.forward_request()
        whole = contextlib.nullcontext() if plugin_on else _whole_forward_in_stream(stream)
        with ArmProbes(stream) as probes, observe_draws(probes.on_prepared):
            rng_before = snapshot_global_rng()
            with whole:
                output = pipe.forward(forward_request)
            rng_after = snapshot_global_rng()
        return probes.result(output, rng_before, rng_after)
    finally:
        (plugin.install if was_installed else plugin.uninstall)()


@contextlib.contextmanager
def _whole_forward_in_stream(stream: str) -> Iterator[None]:
    """Every CPU-generator normal draw of upstream's `forward` in `stream`, on its thread and on
    the worker threads the pipeline module starts (0.32.0rc1 draws a Ref2VA first output on a
    `ThreadPoolExecutor` of its own; a torch function mode is per thread): independent of which
    functions prenoise wraps. `native`: nothing entered."""
    if stream == NATIVE:
        yield
        return
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    executor = getattr(upstream, "ThreadPoolExecutor", None)
    with contextlib.ExitStack() as stack:
        if executor is not None:

            class InStream(executor):  # type: ignore[misc, valid-type]
                def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                    def drawn_in_stream() -> Any:
                        with draws_in_stream(stream):
                            return fn(*args, **kwargs)

                    return super().submit(drawn_in_stream)

            stack.enter_context(_module_global(upstream, "ThreadPoolExecutor", InStream))
        stack.enter_context(draws_in_stream(stream))
        yield


@contextlib.contextmanager
def _module_global(module: Any, name: str, value: Any) -> Iterator[None]:
    previous = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, previous)


@dataclass
class VerifyResult:
    """Plugin off vs on: the comparison, both arms' geometry and threads, and the verdict.

    `equal`: every field bitwise equal (and each value comparable), the global RNG unchanged.
    `prepared`: the plugin-on arm ran the overlapped path (see `not_prepared_reasons`).
    `verified`: both — the only state in which the overlapped path is shown equal to the serial.
    """

    report: ComparisonReport
    off: ArmResult
    on: ArmResult
    upstream_overlap: bool = False
    """The arms are upstream's own serial path (`off`) and its own overlap (`on`), plugin off in
    both (`upstream_overlap.verify_upstream_overlap`): `prepared` then means upstream drew the
    first output ahead in `on` and nothing ahead in `off`."""
    prenoise_required: bool = False
    """`prepared` also needs prenoise itself to have drawn and handed over at least one noise
    tensor (`vllm-omni-verify`): a request whose noise upstream's own code drew all ahead
    (0.32.0rc1: a Ref2VA request's single output) tests nothing of prenoise's preparation."""

    @classmethod
    def of(cls, off: ArmResult, on: ArmResult, *, upstream_overlap: bool = False) -> VerifyResult:
        """Compare two arms' fields (the serial reference first)."""
        report = compare(nest_dotted(off.fields), nest_dotted(on.fields))
        return cls(report, off, on, upstream_overlap)

    @property
    def rng_state_unchanged(self) -> bool:
        return self.off.rng_unchanged and self.on.rng_unchanged

    @property
    def uncompared(self) -> list[str]:
        """Values either arm returned that the comparison could not cover (`arm: path: why`)."""
        off, on = (
            ("upstream_serial", "upstream_overlapped")
            if self.upstream_overlap  # plugin off in both arms
            else ("plugin_off", "plugin_on")
        )
        return [f"{off}: {u}" for u in self.off.uncompared] + [
            f"{on}: {u}" for u in self.on.uncompared
        ]

    @property
    def equal(self) -> bool:
        return (
            self.report.equal
            and self.rng_state_unchanged
            and bool(self.report.fields)
            and not self.uncompared
        )

    @property
    def not_prepared_reasons(self) -> list[str]:
        """Why the overlapped arm did not run the overlapped path; empty if it did."""
        if self.upstream_overlap:
            return _upstream_not_ahead(self.off, self.on)
        reasons = _not_prepared_reasons(self.on)
        if self.prenoise_required and not reasons and not self._prenoise_drew():
            reasons.append(NOTHING_OF_PRENOISE)
        return reasons

    def _prenoise_drew(self) -> bool:
        """prenoise handed over a noise tensor it prepared, or (under a named stream) drew
        upstream's own serial draws in the stream — both are prenoise's work a run proves."""
        streamed = self.on.noise_stream != NATIVE and self.on.serial_streamed > 0
        return streamed or any(r.used for r in self.on.records)

    @property
    def prepared(self) -> bool:
        return not self.not_prepared_reasons

    @property
    def verified(self) -> bool:
        return self.equal and self.prepared

    def summary(self) -> str:
        """One line: the verdict, then the comparison, the RNG and the preparation."""
        parts = [self.report.summary()]
        parts.append("global RNG unchanged" if self.rng_state_unchanged else "GLOBAL RNG CHANGED")
        if self.uncompared:
            more = f" (+{len(self.uncompared) - 3} more)" if len(self.uncompared) > 3 else ""
            parts.append(f"NOT COMPARED: {'; '.join(self.uncompared[:3])}{more}")
        reasons = self.not_prepared_reasons
        arm = "upstream's overlapped arm" if self.upstream_overlap else "plugin arm"
        if reasons:
            parts.append(f"{arm.upper()} NOT PREPARED AHEAD: {'; '.join(reasons)}")
        else:
            parts.append(f"{arm} prepared ahead: {_prepared_count(self.on)}")
        verdict = "verified" if self.verified else "NOT VERIFIED"
        return f"{verdict}: {'; '.join(parts)}"

    def to_json(self) -> dict[str, Any]:
        """The `prenoise verify` schema, plus the verdict, `geometry` and per-arm threads."""
        fields = {}
        for path, entry in self.report.fields.items():
            a = entry.a if not isinstance(entry.a, str) else None
            fields[path] = {
                "equal": entry.equal,
                "differences": entry.differences,
                "sha256": getattr(a, "sha256", ""),
                "shape": getattr(a, "shape", None),
                "plugin_on_sha256": getattr(entry.b, "sha256", ""),
                "value": entry.a if isinstance(entry.a, str) else None,
                "plugin_on_value": entry.b if isinstance(entry.b, str) else None,
            }
        return {
            "verified": self.verified,
            "equal": self.equal,
            "prepared": self.prepared,
            "not_prepared_reasons": self.not_prepared_reasons,
            "uncompared": self.uncompared,
            "rng_state_unchanged": self.rng_state_unchanged,
            "summary": self.summary(),
            "fields": fields,
            "geometry": self.off.geometry,
            "noise_stream": self.on.noise_stream,
            "arms": {
                "plugin_off": {
                    "drawn_on": self.off.drawn_on,
                    "noise_stream": self.off.noise_stream,
                },
                "plugin_on": {
                    "drawn_on": self.on.drawn_on,
                    "prediction_events": [str(e) for e in self.on.prediction_events],
                    "not_prepared_because": self.on.skipped,
                    "noise_stream": self.on.noise_stream,
                    "serial_draws": self.on.serial_draws,
                    "serial_draws_in_stream": self.on.serial_streamed,
                },
            },
        }


NOTHING_OF_PRENOISE = (
    "prenoise drew none of this request's noise (upstream's own code drew it ahead, or the "
    "request draws none), so nothing of prenoise's preparation was tested; pick a request kind "
    "prenoise prepares: --kind fl2va, t2va, continuation or guided, or --outputs 2 with "
    "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=1"
)
"""The reason a `prenoise_required` verdict fails when prenoise prepared nothing."""


def noise_stream_setting() -> str:
    """The environment's `PRENOISE_VLLM_OMNI_NOISE_STREAM` (what the plugin-on arm reads);
    `native` where the settings are invalid (the plugin-on arm's wrapper reports that)."""
    try:
        return PluginSettings.from_env().noise_stream
    except SettingsError:
        return NATIVE


def verify_request(
    request: H3Request,
    *,
    hooks: StandInHooks | None = None,
    stage: Callable[[str], None] | None = None,
) -> VerifyResult:
    """Both arms in this process from the same global RNG state; every field compared.

    `hooks` (tests): the stand-in components' hooks, one instance for each arm (copied).
    `stage` (the command's progress): called with each phase's name as it starts.

    A request upstream refuses fails in the plugin-off arm with upstream's own error. The same
    error from the plugin-on arm alone is not the request's fault: it is re-raised as a
    `RuntimeError` (an internal error), never reported as bad input.
    """
    say = stage or (lambda name: None)
    state = torch.get_rng_state()
    say("MiniMax-H3's forward, plugin off (upstream's code)")
    off = run_arm(request, plugin_on=False, hooks=copy.copy(hooks))
    torch.set_rng_state(state)
    say("MiniMax-H3's forward, plugin on (prenoise)")
    try:
        on = run_arm(request, plugin_on=True, hooks=copy.copy(hooks))
    except Exception as error:
        if _looks_like_bad_input(error):
            raise RuntimeError(
                f"the plugin-on arm failed on a request the plugin-off arm ran: "
                f"{type(error).__name__}: {error}"
            ) from error
        raise
    say("comparing every field, bitwise")
    return VerifyResult.of(off, on)


def _looks_like_bad_input(error: BaseException) -> bool:
    """Errors the command reports as bad input (upstream refusing the request or its media)."""
    from vllm_omni.errors import OmniClientError

    return isinstance(error, OmniClientError | subprocess.CalledProcessError)


# -- the verdict: did the plugin-on arm prepare ahead? ------------------------------------------


def _not_prepared_reasons(arm: ArmResult) -> list[str]:
    """For each noise the pipeline consumed in the prepared outputs: drawn ahead on a worker and
    taken by the pipeline, or the reason it was not (the whole request's, if it has one)."""
    if not arm.preparation_opened:
        if not arm.plugin_enabled:
            return [f"plugin disabled by {ENABLE_ENV}=0: its forward wrapper ran upstream's code"]
        off = _h3_paths_off()
        if off:  # the code changed: named, with why nothing was prepared
            return off
        return ["the plugin's forward wrapper opened no request preparation"]
    if arm.skipped is not None:
        return _h3_paths_off() or [f"request not eligible: {arm.skipped}"]
    seeds = arm.output_seeds
    if not seeds:
        return ["the pipeline drew no noise"]
    reasons = []
    if arm.noise_stream != NATIVE and arm.serial_streamed != arm.serial_draws:
        reasons.append(
            f"{arm.serial_draws} draws made serially but {arm.serial_streamed} drawn in noise "
            f"stream {arm.noise_stream!r}"
        )
    prepare_all = arm.settings is not None and arm.settings.prepare_next_output
    in_scope = set(seeds if prepare_all else seeds[:1])
    records = {record.name: record for record in arm.records}
    reasons += [f"prediction mismatch: {event}" for event in arm.prediction_events]
    for name, seed, window in arm.consumed:
        if seed not in in_scope or (window and not prepare_all):
            continue  # later continuation windows: prepared with the next-output setting
        label = field_prefix(seeds.index(seed), window) + name
        record = records.get(record_name(name, seed, window))
        if record is None and (name, seed) in arm.upstream_ahead:
            continue  # drawn ahead by upstream's own code, on its worker (0.32.0rc1)
        if record is None:
            reasons.append(f"{label}: not drawn ahead (upstream's serial code drew it)")
        elif not record.used:
            reasons.append(
                f"{label}: drawn ahead but not used (the pipeline's arguments differed from "
                "the prediction; upstream's serial code drew it)"
            )
        elif record.thread == arm.forward_thread:
            reasons.append(f"{label}: drawn on the request's own thread {record.thread!r}")
    return reasons


def _h3_paths_off() -> list[str]:
    """Why the MiniMax-H3 paths prepare nothing on this vllm-omni (each path that is off, by the
    first function that is not the reviewed code); empty where both run."""
    code = support.current()
    # the streams path off turns everything of MiniMax-H3 off: one reason, not two alike
    paths = [path for path in support.H3_PATHS if path in code.problems][:1]
    return [
        f"{path} off on this vllm-omni, so prenoise prepared nothing (upstream's code ran "
        f"untouched): {code.problems[path]}"
        for path in paths
    ]


def _upstream_not_ahead(serial: ArmResult, overlapped: ArmResult) -> list[str]:
    """Upstream's own overlap: the first output's noise drawn ahead on upstream's worker in the
    overlapped arm (a timeline-guided request's condition rows excepted: upstream draws them
    serially), nothing ahead in the serial arm, and prenoise in neither."""
    reasons = []
    if serial.upstream_ahead:
        reasons.append(f"the serial arm drew ahead: {sorted(serial.upstream_ahead)}")
    for arm, name in ((serial, "serial"), (overlapped, "overlapped")):
        if arm.preparation_opened or arm.records:
            reasons.append(f"prenoise ran in the {name} arm")
    seeds = overlapped.output_seeds
    if not seeds:
        return [*reasons, "the pipeline drew no noise"]
    for name, seed, window in overlapped.consumed:
        # (a timeline-guided request's condition rows upstream draws serially by design)
        guided = name == "visual_condition_noise" and seed in overlapped.guided
        ahead = (name, seed) in overlapped.upstream_ahead or guided
        if seed == seeds[0] and window == 0 and not ahead:
            reasons.append(f"{name}: drawn serially by upstream (not ahead)")
    return reasons


def _prepared_count(arm: ArmResult) -> str:
    taken = [r for r in arm.records if r.used]
    threads = sorted({r.thread for r in taken})
    line = f"{len(taken)} noise tensors drawn on {', '.join(threads)} and used by the pipeline"
    if not taken:
        line = "no noise tensor drawn by prenoise"
    if arm.upstream_ahead:
        line += f", {len(arm.upstream_ahead)} drawn ahead by upstream's own code"
    return line
