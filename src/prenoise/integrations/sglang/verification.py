"""`prenoise sglang-verify`'s proof: one MiniMax-H3 request through SGLang's real stages with
the plugin off, then on, in one process, and everything compared bit for bit.

Compared (`compare_fields`: shape, dtype, device, strides and the bytes, so NaN payloads and
-0.0 count): every tensor the Denoising stage receives (the latents, every tensor in
`batch.extra`, the denoise state's ints), every input the DiT receives at each step, the stage's
outputs, what `minimax_h3_imgvid_cond_noise_aug_rows` returns, for a rollout request the
trajectory and log-probs and the rollout generator's final state, the request generator's final
state, and the global RNG state after each arm (each arm starts from the same one).

Equal fields prove nothing if the plugin-on arm drew everything itself, so the result is also
"not verified" unless the plugin prepared what it should have (`prepared_problems`): the plugin
off drew nothing ahead; on, the initial video and audio noise was drawn on prenoise's worker and
the very tensors reached the Denoising stage, the visual-condition noise (fl2va, ref2va) was
served, and a stochastic rollout's per-step noise was served by the look-ahead, every draw.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from prenoise.integrations.sglang import harness, live, plugin, support
from prenoise.integrations.sglang.h3_rollout import expected_draws
from prenoise.verify.bits import same_bits, tensor_sha256

__all__ = [
    "ROLLOUTS",
    "TASKS",
    "Arm",
    "FieldResult",
    "RequestRefused",
    "VerifyRequest",
    "VerifyResult",
    "compare_fields",
    "plugin_setting",
    "prepared_problems",
    "verify_request",
]

TASKS = ("t2va", "fl2va", "ref2va")
"""The request kinds `sglang-verify` runs (fl2va: a first and a last keyframe; ref2va: one
300x200 image reference, resized by upstream to 3072x2048)."""

ROLLOUTS = ("sde", "cps", "ode")
"""Upstream's rollout update types (a rollout request is t2va only, as upstream's)."""

_WORKER_PREFIX = "prenoise-sglang"
_CONDITION_NOISE = "minimax_h3_imgvid_cond_noise_aug_rows"


class RequestRefused(ValueError):
    """Upstream's own validation refused the request (its message, unchanged)."""


@dataclass(frozen=True)
class VerifyRequest:
    """The one request both arms run."""

    task: str = "t2va"
    rollout: str | None = None
    seconds: float = 4.0
    short_edge: int = 64
    seed: int = 42
    steps: int = harness.STEPS

    def to_json(self) -> dict[str, object]:
        """As a JSON object."""
        return dict(self.__dict__)


@dataclass
class Arm:
    """What one arm saw: the captured fields, what the plugin prepared and served, its time."""

    fields: dict[str, torch.Tensor]
    served_ptrs: list[int]
    draws: list[tuple[str, int, str, int]]
    serves: list[tuple[str, bool]]
    loops: list[Any]
    expected_rollout_draws: int | None
    seconds: float


@dataclass(frozen=True)
class FieldResult:
    """One compared field: equal or what differs, and the plugin-off arm's description."""

    name: str
    equal: bool
    shape: tuple[int, ...]
    dtype: str
    sha256: str
    differences: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """As a JSON object."""
        return {
            "equal": self.equal,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "sha256": self.sha256,
            "differences": list(self.differences),
        }


@dataclass
class VerifyResult:
    """Both arms compared: the fields, and whether the plugin-on arm really prepared ahead."""

    request: VerifyRequest
    fields: list[FieldResult]
    not_prepared: list[str]
    prepared: dict[str, object]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def differing(self) -> list[FieldResult]:
        """The fields that differ."""
        return [f for f in self.fields if not f.equal]

    @property
    def verified(self) -> bool:
        """Every field equal (and there are fields), and the plugin-on arm prepared ahead."""
        return bool(self.fields) and not self.differing and not self.not_prepared

    def summary(self) -> str:
        """One line: the verdict and why."""
        what = f"{len(self.fields)} fields"
        if self.verified:
            return (
                f"VERIFIED: plugin off vs on, {what} bitwise equal (global RNG included); the "
                "plugin-on arm served prepared noise"
            )
        reasons = [f"{len(self.differing)} of {what} differ"] if self.differing else []
        reasons += ["no field compared"] if not self.fields else []
        reasons += [f"not prepared ahead: {why}" for why in self.not_prepared]
        return "NOT VERIFIED: " + "; ".join(reasons)

    def to_json(self) -> dict[str, object]:
        """As a JSON object: the verdict, the request, what was prepared, every field."""
        return {
            "verified": self.verified,
            "summary": self.summary(),
            "request": self.request.to_json(),
            "prepared": self.prepared,
            "not_prepared_reasons": self.not_prepared,
            "seconds": self.seconds,
            "fields": {f.name: f.to_json() for f in self.fields},
        }


def compare_fields(off: dict[str, torch.Tensor], on: dict[str, torch.Tensor]) -> list[FieldResult]:
    """Every field of either arm: equal when both have it with the same shape, dtype, device,
    strides and bytes (`prenoise.verify.bits.same_bits`: NaN-aware)."""
    results = []
    for name in sorted(set(off) | set(on)):
        a, b = off.get(name), on.get(name)
        ref = a if a is not None else b
        assert ref is not None
        differences: list[str] = []
        if a is None or b is None:
            differences.append("only in the plugin-" + ("on" if a is None else "off") + " arm")
        else:
            for what, x, y in (
                ("shape", tuple(a.shape), tuple(b.shape)),
                ("dtype", a.dtype, b.dtype),
                ("device", a.device, b.device),
                ("strides", a.stride(), b.stride()),
            ):
                if x != y:
                    differences.append(f"{what} {x} vs {y}")
            if not differences and not same_bits(a, b):
                differences.append(_count_differing(a, b))
        results.append(
            FieldResult(
                name,
                not differences,
                tuple(ref.shape),
                str(ref.dtype).removeprefix("torch."),
                tensor_sha256(ref),
                tuple(differences),
            )
        )
    return results


def _count_differing(a: torch.Tensor, b: torch.Tensor) -> str:
    x = a.detach().cpu().contiguous().reshape(-1)
    y = b.detach().cpu().contiguous().reshape(-1)
    if x.element_size() in (1, 2, 4, 8) and x.numel():
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        n = int((x.view(view[x.element_size()]) != y.view(view[y.element_size()])).sum())
        return f"bits differ in {n} of {x.numel()} elements"
    return "bits differ"


def prepared_problems(request: VerifyRequest, off: Arm, on: Arm) -> list[str]:
    """Why the plugin-on arm did not really prepare ahead (empty: it did); see module doc."""
    problems = []
    if off.draws or off.serves or any(loop.served for loop in off.loops):
        problems.append("the plugin-off arm prepared draws: the arms are not off vs on")
    initial = [d for d in on.draws if d[0].startswith("initial_")]
    labels = [d[0] for d in initial]
    if labels != ["initial_video_noise", "initial_audio_noise"]:
        problems.append(f"initial noise: prepared {labels or 'nothing'}, not video then audio")
    elif ("initial", True) not in on.serves:
        problems.append("initial noise: prepared but not served (upstream drew it)")
    elif on.served_ptrs != [ptr for *_, ptr in initial]:
        problems.append("initial noise: the Denoising stage did not receive the prepared tensors")
    main = threading.current_thread().name
    if any(not d[2].startswith(_WORKER_PREFIX) or d[2] == main for d in on.draws):
        problems.append("a prepared draw ran off prenoise's worker thread")
    if request.task != "t2va":
        conditions = [d for d in on.draws if d[0].startswith("visual_condition_noise")]
        if not conditions:
            problems.append("visual-condition noise: nothing prepared")
        elif ("conditions", True) not in on.serves:
            problems.append("visual-condition noise: prepared but not served (upstream drew it)")
    if request.rollout is not None:
        problems += _rollout_problems(request, on)
    return problems


def _rollout_problems(request: VerifyRequest, on: Arm) -> list[str]:
    """The loop's contract (`h3_rollout`): every draw answered and served by the look-ahead,
    the first one too (prepared when the loop opens, from the seeded generator's state)."""
    expected = on.expected_rollout_draws
    if expected is None:
        return ["rollout noise: the number of draws could not be told"]
    if request.rollout != "ode" and expected == 0:
        return [f"rollout noise: a {request.rollout} rollout drew nothing"]
    if expected == 0:
        return []
    if len(on.loops) != 1:
        return [f"rollout noise: {len(on.loops)} rollout loops, not one"]
    (loop,) = on.loops
    problems = []
    if loop.drawn != expected:
        problems.append(f"rollout noise: {loop.drawn} of {expected} draws answered by the loop")
    if loop.served != expected or not loop.first_ahead or loop.left is not None:
        why = f" ({loop.left or loop.first_prepared or 'the first draw was not served'})"
        problems.append(f"rollout noise: {loop.served} of the {expected} draws served{why}")
    return problems


def _prepared(request: VerifyRequest, on: Arm) -> dict[str, object]:
    return {
        "draws": [{"label": d[0], "seed": d[1], "thread": d[2]} for d in on.draws],
        "serves": [{"what": what, "served": served} for what, served in on.serves],
        "rollout": None
        if request.rollout is None
        else {
            "expected_draws": on.expected_rollout_draws,
            "answered": sum(loop.drawn for loop in on.loops),
            "served": sum(loop.served for loop in on.loops),
            "loops": len(on.loops),
        },
    }


@contextlib.contextmanager
def plugin_setting(value: str) -> Iterator[None]:
    """`PRENOISE_SGLANG=value` while the block runs (read per call by the plugin's hooks)."""
    previous = os.environ.get(plugin.ENABLE_ENV)
    os.environ[plugin.ENABLE_ENV] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(plugin.ENABLE_ENV, None)
        else:
            os.environ[plugin.ENABLE_ENV] = previous


@contextlib.contextmanager
def _condition_rows() -> Iterator[list[torch.Tensor]]:
    """What `minimax_h3_imgvid_cond_noise_aug_rows` (the hooked one) returns while open."""
    module = importlib.import_module(f"{harness.H3_MODULE}.condition_noise")
    hooked = getattr(module, _CONDITION_NOISE)
    returned: list[torch.Tensor] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = hooked(*args, **kwargs)
        returned.append(out.detach().clone())
        return out

    setattr(module, _CONDITION_NOISE, spy)
    try:
        with live.observing(spy, hooked):  # prenoise's own observer: still the reviewed code
            yield returned
    finally:
        setattr(module, _CONDITION_NOISE, hooked)


def _conditions(task: str, files: dict[str, str]) -> tuple[list[dict[str, Any]] | None, str]:
    if task == "fl2va":
        return [
            {"type": "image", "uri": files["kf_first"], "role": "keyframe", "frame_index": 0},
            {"type": "image", "uri": files["kf_last"], "role": "keyframe", "frame_index": -1},
        ], "auto"
    if task == "ref2va":
        return [{"type": "image", "uri": files["ref_wide"], "role": "reference"}], "16:9"
    return None, "16:9"


def make(h3: Any, request: VerifyRequest, files: dict[str, str]) -> Any:
    """The request (upstream's validation raises `ValueError` for one it refuses)."""
    conditions, aspect = _conditions(request.task, files)
    rollout: dict[str, Any] = {}
    if request.rollout is not None:
        rollout = {"rollout": True, "rollout_sde_type": request.rollout}
    return harness.make_request(
        h3,
        request.seed,
        request.short_edge,
        request.seconds,
        task=request.task,
        conditions=conditions,
        aspect_ratio=aspect,
        steps=request.steps,
        **rollout,
    )


def _arm(
    h3: Any, request: VerifyRequest, files: dict[str, str], setting: str, start: torch.Tensor
) -> Arm:
    encode = harness.encode_visual(h3, {}) if request.task != "t2va" else None
    expected: list[int | None] = []

    def before_latents(batch: Any) -> None:
        if encode is not None:
            encode(batch)

    began = time.perf_counter()
    with (
        plugin_setting(setting),
        harness.recorded_draws() as draws,
        harness.recorded_serves() as serves,
        harness.recorded_loops() as loops,
        _condition_rows() as rows,
    ):
        req = make(h3, request, files)
        torch.set_rng_state(start)
        captured = harness.capture(h3, req, before_latents=before_latents)
        if request.rollout is not None:
            expected.append(expected_draws(req)[0])
    seconds = time.perf_counter() - began
    fields = dict(captured.fields)
    for i, t in enumerate(rows):
        fields[f"cond_noise_aug_rows[{i}]"] = t
    fields["global_rng.final_state"] = torch.get_rng_state()
    return Arm(
        fields,
        captured.served_ptrs,
        list(draws),
        list(serves),
        list(loops),
        expected[0] if expected else None,
        seconds,
    )


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _sde(request: VerifyRequest) -> bool:
    return request.rollout == "sde"


def verify_request(
    h3: Any,
    request: VerifyRequest,
    on_phase: Callable[[str], None] = lambda _phase: None,
) -> VerifyResult:
    """Run `request` with the plugin off, then on (same global RNG state at each start), and
    compare; `h3` is `harness.load_h3()`'s namespace. A request upstream's validation refuses
    raises `RequestRefused` before either arm runs."""
    with tempfile.TemporaryDirectory(prefix="prenoise-sglang-verify-") as scratch:
        files = harness.synthetic_images(Path(scratch))
        try:
            make(h3, request, files)  # upstream's own validation, before any arm
        except ValueError as error:
            raise RequestRefused(f"upstream refuses the request: {error}") from None
        start = torch.get_rng_state()
        on_phase("plugin off: upstream's stages, upstream's draws")
        try:
            off = _arm(h3, request, files, "0", start)
        except Exception as error:  # upstream alone fails: nothing to compare against
            torch.set_rng_state(start)
            raise RequestRefused(
                f"upstream fails this request itself, with the plugin off ({_one_line(error)}); "
                "nothing to compare"
                + (" (an H3 sde rollout's step 0 is NaN upstream: try cps)" * _sde(request))
            ) from None
        on_phase("plugin on: the same request, noise prepared by prenoise")
        try:
            on = _arm(h3, request, files, "1", start)
        except Exception as error:  # prenoise changed what happens: not verified
            torch.set_rng_state(start)
            why = f"the plugin-on arm raised {_one_line(error)}; the plugin-off arm did not"
            return VerifyResult(request, [], [why], {"serves": [], "rollout": None})
    torch.set_rng_state(start)
    on_phase(f"comparing {len(set(off.fields) | set(on.fields))} fields bit for bit")
    problems = prepared_problems(request, off, on)
    if not support.current().runs(support.H3_INITIAL_PATH):
        problems.insert(0, support.current().problems.get(support.H3_INITIAL_PATH, "off"))
    return VerifyResult(
        request,
        compare_fields(off.fields, on.fields),
        problems,
        _prepared(request, on),
        {"plugin_off": round(off.seconds, 3), "plugin_on": round(on.seconds, 3)},
    )
