"""`prenoise vllm-omni-verify`: the real MiniMax-H3 pipeline, plugin off vs on, field by field.

Each arm runs upstream's `MiniMaxH3Pipeline.forward` on the stand-in components
(`standins.build_pipeline`) for the same request, from the same global RNG state. Probes wrapped
outermost around `_build_denoise_inputs`, `_initial_noise` and the condition-noise function
record, per output, what the pipeline computed:
- `initial_video_noise`, `initial_audio_noise`: what `_initial_noise` returned;
- `visual_condition_noise`: with the plugin on, the tensor prenoise prepared (when it did);
  otherwise upstream's own function evaluated at the same arguments on clean rows of `-0.0`
  with `noise_aug=0.0`, which returns its draw exactly (`-0.0·0 + 1·noise == noise`, -0.0 kept);
- `denoise.*`: every tensor `_build_denoise_inputs` returned (the branch's tensors included);
- `decoded.video`, `decoded.audio`: what `forward` returned (all outputs, decoded).
Fields of output i ≥ 1 are prefixed `output{i}.`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from prenoise.integrations.vllm_omni import plugin
from prenoise.integrations.vllm_omni.request import DrawRecord, current_request, observe_draws
from prenoise.integrations.vllm_omni.standins import StandInHooks, build_pipeline
from prenoise.rng_guard import snapshot_global_rng
from prenoise.verify import ComparisonReport, compare, nest_dotted

__all__ = [
    "ArmResult",
    "H3Request",
    "VerifyResult",
    "run_arm",
    "run_forward",
    "verify_request",
]

NOISE_FIELDS = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")


@dataclass(frozen=True)
class H3Request:
    """One Ref2VA request to the H3 pipeline (references are image or video file paths)."""

    references: tuple[Path, ...]
    seed: int = 42
    duration: float = 4.0
    width: int = 256
    height: int = 256
    outputs: int = 1
    steps: int = 2
    prompt: str = "a red fox runs through fresh snow"

    def forward_request(self) -> Any:
        """The `DiffusionRequestBatch`-like object `forward` reads (one prompt)."""
        from vllm_omni.inputs.data import OmniDiffusionSamplingParams

        images = [str(p) for p in self.references if p.suffix.lower() not in _VIDEO_SUFFIXES]
        videos = [str(p) for p in self.references if p.suffix.lower() in _VIDEO_SUFFIXES]
        media: dict[str, Any] = {}
        if images:
            media["image"] = images if len(images) > 1 else images[0]
        if videos:
            media["video"] = videos if len(videos) > 1 else videos[0]
        sampling = OmniDiffusionSamplingParams(
            seed=self.seed,
            num_outputs_per_prompt=self.outputs,
            num_inference_steps=self.steps,
            height=self.height,
            width=self.width,
            extra_args={"task": "ref2va", "duration": self.duration},
        )
        prompt = {"prompt": self.prompt, "multi_modal_data": media}
        return SimpleNamespace(prompts=[prompt], sampling_params=sampling)


_VIDEO_SUFFIXES = {".mp4", ".mov"}


@dataclass
class ArmResult:
    """What one arm's pipeline computed, and where its noise was drawn."""

    fields: dict[str, Any]
    drawn_on: dict[str, str]
    geometry: dict[str, Any]
    output: Any
    rng_before: Any
    rng_after: Any
    prediction_events: list[Any] = field(default_factory=list)
    records: list[DrawRecord] = field(default_factory=list)
    skipped: str | None = None

    @property
    def rng_unchanged(self) -> bool:
        return not self.rng_before.differences(self.rng_after)


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
        return build_pipeline(hooks).forward(request.forward_request())
    finally:
        (plugin.install if was_installed else plugin.uninstall)()


def run_arm(request: H3Request, *, plugin_on: bool, hooks: StandInHooks | None = None) -> ArmResult:
    """Run `forward` once with prenoise installed (`plugin_on`) or not; restores the previous
    installation state afterwards."""
    was_installed = plugin.is_installed()
    _install_state(plugin_on)
    try:
        pipe = build_pipeline(hooks)
        with _Probes() as probes, observe_draws(probes.on_prepared):
            rng_before = snapshot_global_rng()
            output = pipe.forward(request.forward_request())
            rng_after = snapshot_global_rng()
        return probes.result(output, rng_before, rng_after)
    finally:
        (plugin.install if was_installed else plugin.uninstall)()


@dataclass
class VerifyResult:
    """Plugin off vs on: the comparison, both arms' geometry and threads."""

    report: ComparisonReport
    off: ArmResult
    on: ArmResult

    @property
    def rng_state_unchanged(self) -> bool:
        return self.off.rng_unchanged and self.on.rng_unchanged

    @property
    def equal(self) -> bool:
        return self.report.equal and self.rng_state_unchanged and bool(self.report.fields)

    def summary(self) -> str:
        rng = "global RNG unchanged" if self.rng_state_unchanged else "GLOBAL RNG CHANGED"
        return f"{self.report.summary()}; {rng}"

    def to_json(self) -> dict[str, Any]:
        """The `prenoise verify` schema, plus `geometry` and per-arm `drawn_on` threads."""
        fields = {}
        for path, entry in self.report.fields.items():
            a = entry.a if not isinstance(entry.a, str) else None
            fields[path] = {
                "equal": entry.equal,
                "differences": entry.differences,
                "sha256": getattr(a, "sha256", ""),
                "shape": getattr(a, "shape", None),
                "plugin_on_sha256": getattr(entry.b, "sha256", ""),
            }
        return {
            "equal": self.equal,
            "rng_state_unchanged": self.rng_state_unchanged,
            "summary": self.summary(),
            "fields": fields,
            "geometry": self.off.geometry,
            "arms": {
                "plugin_off": {"drawn_on": self.off.drawn_on},
                "plugin_on": {
                    "drawn_on": self.on.drawn_on,
                    "prediction_events": [str(e) for e in self.on.prediction_events],
                    "not_prepared_because": self.on.skipped,
                },
            },
        }


def verify_request(request: H3Request) -> VerifyResult:
    """Both arms in this process from the same global RNG state; every field compared."""
    state = torch.get_rng_state()
    off = run_arm(request, plugin_on=False)
    torch.set_rng_state(state)
    on = run_arm(request, plugin_on=True)
    report = compare(nest_dotted(off.fields), nest_dotted(on.fields))
    return VerifyResult(report, off, on)


# -- probes -------------------------------------------------------------------------------------


class _Probes(contextlib.AbstractContextManager["_Probes"]):
    """Outermost wrappers that record what the pipeline computed (and restore on exit)."""

    def __init__(self) -> None:
        self.per_seed: dict[int, dict[str, Any]] = {}
        self.drawn_on: dict[int, dict[str, str]] = {}
        self.prepared: dict[tuple[str, int], torch.Tensor] = {}
        self.condition_calls: dict[int, dict[str, Any]] = {}
        self.geometry: dict[str, Any] = {}
        self.seeds: list[int] = []
        self.request_state: Any = None
        self._stack = contextlib.ExitStack()

    def on_prepared(self, name: str, seed: int, tensor: torch.Tensor) -> None:
        self.prepared[(name, seed)] = tensor

    def __enter__(self) -> _Probes:
        from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

        cls = upstream.MiniMaxH3Pipeline
        build, initial = cls._build_denoise_inputs, cls._initial_noise
        condition = upstream.minimax_h3_imgvid_cond_noise_aug_rows
        probes = self

        def build_probe(pipe: Any, **kwargs: Any) -> dict[str, Any]:
            inputs = build(pipe, **kwargs)
            probes.per_seed.setdefault(int(kwargs["seed"]), {})["denoise"] = _tensors(inputs)
            return inputs

        def initial_probe(pipe: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            probes.request_state = probes.request_state or current_request()
            video, audio = initial(pipe, **kwargs)
            seed = int(kwargs["seed"])
            probes.seeds.append(seed)
            entry = probes.per_seed.setdefault(seed, {})
            entry["initial_video_noise"], entry["initial_audio_noise"] = video, audio
            thread = threading.current_thread().name
            probes.drawn_on.setdefault(seed, {}).update(
                initial_video_noise=thread, initial_audio_noise=thread
            )
            if not probes.geometry:
                probes.geometry.update({k: int(v) for k, v in kwargs.items() if k != "seed"})
            return video, audio

        def condition_probe(clean_rows: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            seed = int(kwargs["seed"])
            probes.condition_calls[seed] = {"clean_rows": clean_rows, **kwargs}
            probes.drawn_on.setdefault(seed, {})["visual_condition_noise"] = (
                threading.current_thread().name
            )
            probes.geometry.setdefault(
                "condition_shapes", [list(map(int, s)) for s in kwargs["condition_shapes"]]
            )
            return condition(clean_rows, **kwargs)

        self._stack.enter_context(_patched(cls, "_build_denoise_inputs", build_probe))
        self._stack.enter_context(_patched(cls, "_initial_noise", initial_probe))
        self._stack.enter_context(
            _patched(upstream, "minimax_h3_imgvid_cond_noise_aug_rows", condition_probe)
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def result(self, output: Any, rng_before: Any, rng_after: Any) -> ArmResult:
        from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

        state = self.request_state
        records = dict(state.records) if state is not None else {}
        fields: dict[str, Any] = {}
        drawn_on: dict[str, str] = {}
        for index, seed in enumerate(dict.fromkeys(self.seeds)):
            prefix = "" if index == 0 else f"output{index}."
            entry = self.per_seed.get(seed, {})
            threads = self.drawn_on.get(seed, {})
            for name in NOISE_FIELDS:
                record = records.get(f"{name}@{seed}")
                used = record is not None and record.used
                if name == "visual_condition_noise":
                    tensor = self.prepared.get((name, seed)) if used else None
                    if tensor is None and seed in self.condition_calls:
                        tensor = _upstream_condition_draw(upstream, self.condition_calls[seed])
                    if tensor is None:
                        continue
                else:
                    tensor = entry.get(name)
                fields[prefix + name] = tensor
                drawn_on[prefix + name] = record.thread if used and record else threads[name]
            for key, value in entry.get("denoise", {}).items():
                fields[f"{prefix}denoise.{key}"] = value
        video, audio = output.output  # what forward returned: every output, decoded
        fields["decoded.video"], fields["decoded.audio"] = video, audio
        return ArmResult(
            fields=fields,
            drawn_on=drawn_on,
            geometry=dict(self.geometry),
            output=output,
            rng_before=rng_before,
            rng_after=rng_after,
            prediction_events=list(state.prediction_events) if state is not None else [],
            records=list(records.values()),
            skipped=state.skipped if state is not None else None,
        )


def _upstream_condition_draw(upstream: Any, call: dict[str, Any]) -> torch.Tensor:
    """Upstream's condition draw at `call`'s arguments: its mix on clean rows of -0.0, tau 0."""
    original = plugin.original("minimax_h3_imgvid_cond_noise_aug_rows")
    clean = torch.full_like(call["clean_rows"], -0.0, dtype=torch.float32)
    kwargs = {k: v for k, v in call.items() if k not in ("clean_rows", "noise_aug")}
    return original(clean, noise_aug=0.0, **kwargs)


def _tensors(inputs: dict[str, Any]) -> dict[str, Any]:
    """Every tensor (and plain value) `_build_denoise_inputs` returned, the branch flattened."""
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if key == "branch":
            for name, item in sorted(vars(value).items()):
                if isinstance(item, torch.Tensor | int | float | str | type(None)):
                    out[f"branch.{name}"] = item
                elif isinstance(item, dict):
                    for sub, sub_item in sorted(item.items()):
                        if isinstance(sub_item, torch.Tensor):
                            out[f"branch.{name}.{sub}"] = sub_item
        elif isinstance(value, torch.Tensor | int | float | str | list | type(None)):
            out[key] = value
    return out


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    previous = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, previous)


def references_for(paths: Sequence[str | Path]) -> tuple[Path, ...]:
    """Resolve and check reference paths (a clear error before any pipeline work)."""
    resolved = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            raise FileNotFoundError(f"reference {raw}: is a directory, not a media file")
        if not path.is_file():
            raise FileNotFoundError(f"reference {raw}: no such file")
        resolved.append(path.resolve())
    return tuple(resolved)
