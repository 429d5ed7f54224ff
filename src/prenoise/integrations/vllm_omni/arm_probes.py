"""What one arm of `vllm-omni-verify` computed: `ArmProbes` records it, `ArmResult` holds it.

`ArmProbes` wraps, outermost and only while entered, upstream's `_build_denoise_inputs`,
`_initial_noise` and its two condition-noise functions, and records per output seed and pass
(the k-th `_initial_noise` of an output: a continuation window, or 0.31's refine pass) what the
pipeline consumed: the noise fields (`NOISE_FIELDS`, plus `AUDIO_CONDITION` when upstream's
audio mix draws), everything `_build_denoise_inputs` returned (walked by `ComparableCopy`),
the thread each noise tensor was drawn on, and how many draws were made serially. The
condition noise is recomputed with upstream's own function on clean rows of -0.0 (tau 0), in
the arm's noise stream. `verification` compares two arms.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from prenoise.guards.live_code import observing
from prenoise.integrations.vllm_omni import plugin
from prenoise.integrations.vllm_omni.comparable import ComparableCopy
from prenoise.integrations.vllm_omni.request import DrawRecord, current_request, record_name
from prenoise.integrations.vllm_omni.settings import PluginSettings
from prenoise.noise.stream_mode import draws_in_stream
from prenoise.noise.streams import NATIVE

__all__ = ["AUDIO_CONDITION", "NOISE_FIELDS", "ArmProbes", "ArmResult", "field_prefix"]

NOISE_FIELDS = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")
AUDIO_CONDITION = "audio_condition_noise"


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
    uncompared: list[str] = field(default_factory=list)
    """`path: why` of each value `_build_denoise_inputs` returned that cannot be compared."""
    preparation_opened: bool = False
    """True if the plugin's `forward` wrapper opened a request preparation (plugin on)."""
    settings: PluginSettings | None = None
    """The settings the plugin's request preparation ran with (None: it opened none)."""
    consumed: list[tuple[str, int, int]] = field(default_factory=list)
    """`(noise field, seed, pass)` for each noise the pipeline consumed, in order (the condition
    noise only when upstream's mix needs a draw, i.e. `noise_aug` is not 1)."""
    forward_thread: str = ""
    """The thread `forward` ran on (prepared noise must have been drawn on another)."""
    plugin_enabled: bool = True
    """`PRENOISE_VLLM_OMNI` as the arm ran (False: the plugin's wrappers passed through)."""
    noise_stream: str = NATIVE
    """The noise stream the arm drew in (the plugin's setting; the whole `forward` when off)."""
    serial_draws: int = 0
    """Draws the pipeline made serially, on the request thread (not taken from prenoise)."""
    serial_streamed: int = 0
    """Of those, the draws prenoise drew in the named noise stream (`streams.run_serial`)."""
    guided: set[int] = field(default_factory=set)
    """Output seeds whose condition noise used the `guided` recipe (0.32.0rc1's timeline-guided
    requests: upstream draws those rows serially)."""
    upstream_ahead: set[tuple[str, int]] = field(default_factory=set)
    """`(noise field, seed)` upstream's own code drew ahead on its worker thread (0.32.0rc1's
    Ref2VA first output), counted in `serial_draws` too (drawn by upstream's code)."""

    @property
    def rng_unchanged(self) -> bool:
        return not self.rng_before.differences(self.rng_after)

    @property
    def output_seeds(self) -> list[int]:
        """The output seeds in the order the pipeline drew for them."""
        return list(dict.fromkeys(seed for _, seed, _ in self.consumed))


def field_prefix(index: int, window: int = 0) -> str:
    """Field-name prefix of output `index`'s pass `window` (none for the first output's first
    pass): `output1.`, `pass1.`, `output1.pass2.`."""
    output = "" if index == 0 else f"output{index}."
    return output if window == 0 else f"{output}pass{window}."


def _plugin_enabled() -> bool:
    """What the plugin's `forward` wrapper reads (an unknown value fails the arm there)."""
    try:
        return PluginSettings.from_env().enabled
    except ValueError:
        return True


class ArmProbes(contextlib.AbstractContextManager["ArmProbes"]):
    """Outermost wrappers that record what the pipeline computed (and restore on exit).

    `stream`: the arm's noise stream, in which the condition-noise fields are recomputed.
    """

    def __init__(self, stream: str = NATIVE) -> None:
        self.stream = stream
        self.serial_draws = 0
        # keyed by (output seed, pass): `_initial_noise` calls so far for the seed, less one
        self.passes: dict[int, int] = {}
        self.audio_calls: dict[tuple[int, int], dict[str, Any]] = {}
        self.per_seed: dict[tuple[int, int], dict[str, Any]] = {}
        self.uncompared: dict[tuple[int, int], list[str]] = {}
        self.drawn_on: dict[tuple[int, int], dict[str, str]] = {}
        self.prepared: dict[tuple[str, int, int], torch.Tensor] = {}
        self.condition_calls: dict[tuple[int, int], dict[str, Any]] = {}
        self.consumed: list[tuple[str, int, int]] = []
        self.geometry: dict[str, Any] = {}
        self.seeds: list[int] = []
        self.upstream_ahead: set[tuple[str, int]] = set()
        self.guided: set[int] = set()
        self.request_state: Any = None
        self.forward_thread = threading.current_thread().name
        self.plugin_enabled = _plugin_enabled()
        self._stack = contextlib.ExitStack()

    def on_prepared(self, name: str, seed: int, tensor: torch.Tensor) -> None:
        field_name, _, window = name.partition("#")  # `record_name`'s window suffix
        self.prepared[(field_name, seed, int(window or 0))] = tensor

    def at(self, seed: int) -> tuple[int, int]:
        """The key of the pass of output `seed` running now."""
        return seed, max(0, self.passes.get(seed, 0) - 1)

    def __enter__(self) -> ArmProbes:
        from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

        cls = upstream.MiniMaxH3Pipeline
        build, initial = cls._build_denoise_inputs, cls._initial_noise
        condition = upstream.minimax_h3_imgvid_cond_noise_aug_rows
        audio_condition = upstream.minimax_h3_audio_cond_noise_aug_rows
        ahead_condition = getattr(upstream, "minimax_h3_imgvid_cond_noise_rows", None)
        probes = self

        def used(name: str, at: tuple[int, int]) -> bool:
            state = current_request()
            record = state.records.get(record_name(name, *at)) if state is not None else None
            return record is not None and record.used

        def build_probe(pipe: Any, **kwargs: Any) -> dict[str, Any]:
            # (on the request's thread: 0.32.0rc1 may draw every `_initial_noise` on its own)
            probes.request_state = probes.request_state or current_request()
            inputs = build(pipe, **kwargs)
            at = probes.at(int(kwargs["seed"]))
            walk = ComparableCopy()
            probes.per_seed.setdefault(at, {})["denoise"] = walk.fields(inputs, "denoise")
            probes.uncompared[at] = walk.uncompared
            return inputs

        def initial_probe(pipe: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            probes.request_state = probes.request_state or current_request()
            video, audio = initial(pipe, **kwargs)
            seed = int(kwargs["seed"])
            probes.passes[seed] = probes.passes.get(seed, 0) + 1
            at = probes.at(seed)
            names = ("initial_video_noise", "initial_audio_noise")
            probes.serial_draws += sum(not used(name, at) for name in names)
            if threading.current_thread().name != probes.forward_thread:
                probes.upstream_ahead.update((name, seed) for name in names if not used(name, at))
            probes.seeds.append(seed)
            probes.consumed += [(name, *at) for name in names]
            entry = probes.per_seed.setdefault(at, {})
            entry["initial_video_noise"], entry["initial_audio_noise"] = video, audio
            thread = threading.current_thread().name
            probes.drawn_on.setdefault(at, {}).update(
                initial_video_noise=thread, initial_audio_noise=thread
            )
            if not probes.geometry:
                probes.geometry.update({k: int(v) for k, v in kwargs.items() if k != "seed"})
            return video, audio

        def condition_probe(clean_rows: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            seed = int(kwargs["seed"])
            at = probes.at(seed)
            probes.condition_calls[at] = {"clean_rows": clean_rows, **kwargs}
            ahead = kwargs.get("precomputed_noise_rows") is not None  # upstream's own draw
            if kwargs.get("guided") is True:
                probes.guided.add(seed)
            if _draws_condition_noise(kwargs.get("noise_aug")):
                probes.consumed.append(("visual_condition_noise", *at))
            threads = probes.drawn_on.setdefault(at, {})
            if not ahead:
                threads["visual_condition_noise"] = threading.current_thread().name
            probes.geometry.setdefault(
                "condition_shapes", [list(map(int, s)) for s in kwargs["condition_shapes"]]
            )
            rows = condition(clean_rows, **kwargs)
            if (
                _draws_condition_noise(kwargs.get("noise_aug"))
                and not ahead
                and not used(NOISE_FIELDS[2], at)
            ):
                probes.serial_draws += len(kwargs["condition_shapes"])
            return rows

        def ahead_condition_probe(**kwargs: Any) -> torch.Tensor:
            assert ahead_condition is not None
            rows = ahead_condition(**kwargs)
            seed = int(kwargs["seed"])
            probes.serial_draws += len(kwargs["condition_shapes"])
            probes.upstream_ahead.add(("visual_condition_noise", seed))
            thread = threading.current_thread().name
            probes.drawn_on.setdefault(probes.at(seed), {})["visual_condition_noise"] = thread
            return rows

        def audio_condition_probe(clean_rows: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            rows = audio_condition(clean_rows, **kwargs)
            if _draws_condition_noise(kwargs.get("noise_aug")):  # never prepared ahead
                at = probes.at(int(kwargs["seed"]))
                probes.audio_calls[at] = {"clean_rows": clean_rows, **kwargs}
                probes.serial_draws += len(kwargs["condition_audio_t"])
            return rows

        self._stack.enter_context(_patched(cls, "_build_denoise_inputs", build_probe))
        self._stack.enter_context(_patched(cls, "_initial_noise", initial_probe))
        self._stack.enter_context(
            _patched(upstream, "minimax_h3_imgvid_cond_noise_aug_rows", condition_probe)
        )
        self._stack.enter_context(
            _patched(upstream, "minimax_h3_audio_cond_noise_aug_rows", audio_condition_probe)
        )
        if ahead_condition is not None:  # 0.32.0rc1: upstream's own draw ahead
            self._stack.enter_context(
                _patched(upstream, "minimax_h3_imgvid_cond_noise_rows", ahead_condition_probe)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def result(self, output: Any, rng_before: Any, rng_after: Any) -> ArmResult:
        state = self.request_state
        records = dict(state.records) if state is not None else {}
        fields: dict[str, Any] = {}
        drawn_on: dict[str, str] = {}
        uncompared: list[str] = []
        passes = [
            (index, (seed, window))
            for index, seed in enumerate(dict.fromkeys(self.seeds))
            for window in range(max(1, self.passes.get(seed, 0)))
        ]
        for index, at in passes:
            prefix = field_prefix(index, at[1])
            entry = self.per_seed.get(at, {})
            threads = self.drawn_on.get(at, {})
            for name in NOISE_FIELDS:
                record = records.get(record_name(name, *at))
                used = record is not None and record.used
                if name == "visual_condition_noise":
                    tensor = self.prepared.get((name, *at)) if used else None
                    if tensor is None and at in self.condition_calls:
                        with draws_in_stream(self.stream):
                            tensor = _upstream_condition_draw(self.condition_calls[at])
                    if tensor is None:
                        continue
                else:
                    tensor = entry.get(name)
                fields[prefix + name] = tensor
                drawn_on[prefix + name] = record.thread if used and record else threads[name]
            if at in self.audio_calls:
                with draws_in_stream(self.stream):
                    fields[prefix + AUDIO_CONDITION] = _upstream_condition_draw(
                        self.audio_calls[at], "minimax_h3_audio_cond_noise_aug_rows"
                    )
            for key, value in entry.get("denoise", {}).items():
                fields[prefix + key] = value
            uncompared += [prefix + u for u in self.uncompared.get(at, [])]
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
            uncompared=uncompared,
            preparation_opened=state is not None,
            settings=state.settings if state is not None else None,
            consumed=list(self.consumed),
            forward_thread=self.forward_thread,
            plugin_enabled=self.plugin_enabled,
            noise_stream=self.stream,
            serial_draws=self.serial_draws,
            serial_streamed=state.serial_streamed if state is not None else 0,
            upstream_ahead=set(self.upstream_ahead),
            guided=set(self.guided),
        )


def _draws_condition_noise(noise_aug: Any) -> bool:
    """Whether upstream's condition mix draws noise at `noise_aug` (it returns the clean rows
    untouched at 1)."""
    try:
        return float(noise_aug) != 1.0
    except (TypeError, ValueError):
        return True  # upstream raises on it; the preparation verdict must not pass it silently


def _upstream_condition_draw(
    call: dict[str, Any], name: str = "minimax_h3_imgvid_cond_noise_aug_rows"
) -> torch.Tensor:
    """Upstream's condition draw at `call`'s arguments: its mix on clean rows of -0.0, tau 0
    (`name`: the visual- or the audio-condition function)."""
    original = plugin.original(name)
    clean = torch.full_like(call["clean_rows"], -0.0, dtype=torch.float32)
    kwargs = {k: v for k, v in call.items() if k not in ("clean_rows", "noise_aug")}
    return original(clean, noise_aug=0.0, **kwargs)


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """`owner.name` set to the probe `value`, which calls what was there (`live_code.observing`:
    the live check looks through it)."""
    previous = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    try:
        with observing(value, previous):
            yield
    finally:
        setattr(owner, name, previous)
