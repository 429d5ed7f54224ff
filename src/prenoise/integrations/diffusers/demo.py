"""`prenoise demo diffusers`: `enable(pipe)` on a tiny pipeline, checked bitwise and timed.

No checkpoint: the pipeline is built here from small configs with seeded random weights
(`tiny.py`), offline (`HF_HUB_OFFLINE=1` is set; nothing is read or downloaded). In one process:

1. the plain call `pipe(...)` of the pipeline as diffusers built it;
2. `enable(pipe)`, one untimed `pipe(...)` (a class's first call also checks its live code),
   then the call an enabled pipe's `pipe(...)` runs, with its `CallReport`
   (`overlapped_call_with_report`): every planned draw must have been prepared ahead on the
   worker and served (`served n/n`), else the demo fails;
3. `pairs` timed pairs, alternating which arm goes first: `pipe(...)` before `enable` (the
   plain arm: `disable(pipe)`) and after it (the enabled arm). Every enabled output is compared
   too.

Each call gets a fresh `torch.Generator("cpu").manual_seed(seed)`; every output tensor and the
generator's final state of each enabled call are compared with the plain arm's by
`prenoise.verify.compare`, and the global RNG state must be unchanged by all of it
(`DiffusersDemoResult.equal`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.verify import ComparisonReport, compare
from prenoise.verify.rng_guard import snapshot_global_rng

__all__ = ["DEMOS", "DiffusersDemoResult", "run_diffusers_demo"]


@dataclass(frozen=True)
class _Demo:
    """One tiny pipeline: its description, builder, call arguments and output tensors."""

    title: str
    build: Callable[[], Any]
    call_kwargs: Callable[[int], dict[str, Any]]
    outputs: Callable[[Any], dict[str, torch.Tensor]]


def _classic_outputs(output: Any) -> dict[str, torch.Tensor]:
    return {"frames": output.frames}


def _state_outputs(state: Any) -> dict[str, torch.Tensor]:
    return {name: state.get(name) for name in ("videos", "audio")}


def _demos() -> dict[str, _Demo]:
    from prenoise.integrations.diffusers import tiny

    return {
        "classic": _Demo(
            "WanPipeline (Wan 2.1 text-to-video), tiny random weights",
            tiny.wan,
            tiny.wan_call_kwargs,
            _classic_outputs,
        ),
        "modular": _Demo(
            "LTX2ModularPipeline (LTX-2 text-to-video + audio), tiny random weights",
            tiny.ltx2_modular,
            tiny.ltx2_modular_call_kwargs,
            _state_outputs,
        ),
    }


DEMOS = ("classic", "modular")
"""The demos `run_diffusers_demo` runs: a classic pipeline and a modular one."""


@dataclass
class DiffusersDemoResult:
    """The checked call's report, the bitwise comparison, and the timed pairs (seconds)."""

    pipeline: str
    report: Any
    """The `CallReport` of the checked enabled call."""
    comparison: ComparisonReport
    rng_state_unchanged: bool
    plain_s: list[float]
    enabled_s: list[float]

    @property
    def prepared(self) -> bool:
        """Every planned draw of the checked call was prepared ahead and served."""
        r = self.report
        return bool(r.overlapped and r.planned and r.served == len(r.planned) and not r.left_plan)

    @property
    def equal(self) -> bool:
        """Every output and generator state bitwise equal, and the global RNG unchanged."""
        return self.comparison.equal and self.rng_state_unchanged

    @property
    def verified(self) -> bool:
        """Equal, and prenoise's own preparation ran (equal alone proves nothing of it)."""
        return self.equal and self.prepared

    def served_line(self) -> str:
        """`served 1/1 prepared draws (noise), wait 0.1 ms` or why nothing was prepared."""
        r = self.report
        if not r.overlapped:
            return f"NOT PREPARED AHEAD: the plain call ran ({r.reason})"
        labels = ", ".join(r.planned)
        text = f"served {r.served}/{len(r.planned)} prepared draws ({labels})"
        if r.left_plan:
            text += f"; NOT ALL PREPARED AHEAD: {r.left_plan}"
        return (
            f"{text}; prenoise on the request thread: set-up {r.setup_s * 1e3:.1f} ms, "
            f"wait {r.wait_s * 1e3:.1f} ms, teardown {r.teardown_s * 1e3:.1f} ms"
        )

    def summary(self) -> str:
        """The verdict line: the comparison's summary and whether the global RNG changed."""
        rng = "unchanged" if self.rng_state_unchanged else "CHANGED"
        return f"{self.comparison.summary()}; global RNG {rng}"


def _generator_state(kwargs: dict[str, Any]) -> torch.Tensor:
    state: torch.Tensor = kwargs["generator"].get_state()
    return state


def _no_progress_bars(pipe: Any) -> None:
    """Turn off the denoising loop's tqdm bar: the classic pipeline's, and each block's of a
    modular one (diffusers sets only the top-level blocks' own)."""
    pipe.set_progress_bar_config(disable=True)
    blocks = [getattr(pipe, "_blocks", None)]  # `blocks` is a deep copy
    while blocks:
        block = blocks.pop()
        if block is None:
            continue
        if hasattr(block, "set_progress_bar_config"):
            block.set_progress_bar_config(disable=True)
        blocks.extend(getattr(block, "sub_blocks", {}).values())


def _call(pipe: Any, demo: _Demo, seed: int) -> tuple[dict[str, Any], float]:
    """`pipe(...)` once: its output tensors and the generator's final state, and its time."""
    kwargs = demo.call_kwargs(seed)
    start = time.perf_counter()
    output = pipe(**kwargs)
    seconds = time.perf_counter() - start
    return {**demo.outputs(output), "generator_state": _generator_state(kwargs)}, seconds


def run_diffusers_demo(
    modular: bool = False,
    seed: int = 0,
    pairs: int = 3,
    stage: Callable[[str], None] | None = None,
) -> DiffusersDemoResult:
    """Build the tiny pipeline (`modular`: the modular one), run the plain call, the checked
    enabled call and `pairs` timed pairs, and compare every enabled call with the plain one.
    `stage` (the command's progress) is called with each phase's name as it starts."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here reads the hub: make sure nothing tries
    say = stage or (lambda name: None)
    say("importing diffusers and transformers")
    from prenoise.integrations.diffusers import (
        disable,
        enable,
        original_class,
        overlapped_call_with_report,
    )

    demo = _demos()["modular" if modular else "classic"]
    before = snapshot_global_rng()
    say(f"building {demo.title}")
    pipe = demo.build()
    _no_progress_bars(pipe)  # the demo's own lines say where it is
    say("the plain call (diffusers' own code)")
    plain, _ = _call(pipe, demo, seed)  # also the warm-up of the plain path
    say("enable(pipe), then the call it runs, with its CallReport")
    enable(pipe)  # checks the installed diffusers code against the reviewed digests, once
    first, _ = _call(pipe, demo, seed)  # the warm-up: a class's first call checks its live code
    kwargs = demo.call_kwargs(seed)
    output, report = overlapped_call_with_report(pipe, **kwargs)
    # each field its own tensors: compare also checks which fields share storage
    plains = {"first": plain, "checked": {k: v.clone() for k, v in plain.items()}}
    enabled = {
        "first": first,
        "checked": {**demo.outputs(output), "generator_state": _generator_state(kwargs)},
    }
    plain_s: list[float] = []
    enabled_s: list[float] = []
    for i in range(pairs):
        say(f"timed pair {i + 1}/{pairs}: pipe(...) before and after enable(pipe)")
        for arm in ("plain", "enabled") if i % 2 == 0 else ("enabled", "plain"):
            (disable if arm == "plain" else enable)(pipe)
            fields, seconds = _call(pipe, demo, seed)
            (plains if arm == "plain" else enabled)[f"pair{i + 1}"] = fields
            (plain_s if arm == "plain" else enabled_s).append(seconds)
    disable(pipe)
    rng_unchanged = not before.differences(snapshot_global_rng())
    say("comparing every output, bitwise")
    comparison = compare(plains, enabled)
    name = original_class(pipe).__name__
    return DiffusersDemoResult(name, report, comparison, rng_unchanged, plain_s, enabled_s)


def median(values: list[float]) -> float:
    """The median of `values` (0.0 for none)."""
    return statistics.median(values) if values else 0.0
