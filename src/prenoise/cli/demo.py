"""A self-contained demonstration of the core: prepare noise during a stand-in encode, verify it.

Runs the same request twice in one process: `serial` (encode, then draw) and `overlapped` (draws
submitted to a `PreparationExecutor` before the encode, taken after it), then proves with
`compare` that every prepared tensor and every mixed input is bitwise equal and that the global
RNG state is untouched (`DemoResult.equal` is False otherwise; `prenoise demo` then exits 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from prenoise.noise.layouts import Patchify
from prenoise.preparation.draws import Draw, NoisePlan, Stream, run_stream
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.mixing import mix_conditions
from prenoise.verify import ComparisonReport, compare
from prenoise.verify.rng_guard import snapshot_global_rng

__all__ = ["DemoResult", "demo_plan", "run_demo"]

CHANNELS = 24
TAU = 0.999


def demo_plan(seed: int, *, t: int, h: int, w: int, audio_t: int, cond_t: int) -> NoisePlan:
    """A Ref2VA-shaped plan: video rows, audio rows and one video-reference condition."""
    full_t = max(t + 1, cond_t)
    return NoisePlan(
        (
            Stream("video", seed, (Draw("video", (1, CHANNELS, t, h, w), layout=Patchify()),)),
            Stream("audio", seed, (Draw("audio", (2 * audio_t, 32)),)),
            Stream(
                "condition",
                seed,
                (
                    Draw(
                        "condition",
                        (1, CHANNELS, full_t, h, w),
                        keep=(1, CHANNELS, cond_t),
                        layout=Patchify(),
                    ),
                ),
            ),
        )
    )


def _stand_in_encode(seconds: float, rows: int) -> torch.Tensor:
    """Busy matmul work on the request thread standing in for the text/media encoders."""
    local = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 96, generator=local) / 10
    clean = torch.randn(rows, 96, generator=local)
    deadline = time.perf_counter() + seconds
    out = clean
    while time.perf_counter() < deadline:
        out = torch.tanh(clean @ weight)
    return out


@dataclass
class DemoResult:
    """Per-arm timings (seconds), the bitwise comparison of the two arms and the RNG check."""

    serial_s: dict[str, float]
    overlapped_s: dict[str, float]
    report: ComparisonReport
    numel: int
    rng_state_unchanged: bool = True

    @property
    def equal(self) -> bool:
        """Every field bitwise equal and the global RNG state unchanged by both arms."""
        return self.report.equal and self.rng_state_unchanged

    def summary(self) -> str:
        """One line: the comparison's summary and whether the global RNG changed."""
        rng = "unchanged" if self.rng_state_unchanged else "CHANGED"
        return f"{self.report.summary()}; global RNG {rng}"


def _arm(
    plan: NoisePlan, encode: Callable[[], torch.Tensor], overlapped: bool
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    start = time.perf_counter()
    if overlapped:
        with PreparationExecutor() as prep:
            handles = [prep.submit(s.name, partial(run_stream, s)) for s in plan.streams]
            clean = encode()
            encoded = time.perf_counter()
            noise: dict[str, torch.Tensor] = {}
            for handle in handles:
                noise.update(prep.take(handle))
    else:
        clean = encode()
        encoded = time.perf_counter()
        noise = {}
        for stream in plan.streams:
            noise.update(run_stream(stream))
    ready = time.perf_counter()
    anchor = mix_conditions([clean], noise["condition"], [TAU])
    inputs = {**noise, "condition_anchor": anchor}
    timings = {
        "encode": encoded - start,
        "noise_on_request_thread": ready - encoded,
        "prep_window": time.perf_counter() - start,
    }
    return inputs, timings


def run_demo(seed: int = 42, encode_seconds: float = 0.6) -> DemoResult:
    """Run both arms on a 124-frame 1344×768-latent-sized request and compare them."""
    t, h, w = 37, 48, 84
    plan = demo_plan(seed, t=t, h=h, w=w, audio_t=207, cond_t=t)
    cond_rows = t * (h // 2) * (w // 2)

    def encode() -> torch.Tensor:
        return _stand_in_encode(encode_seconds, cond_rows)

    before = snapshot_global_rng()
    _arm(plan, encode, overlapped=False)  # warm-up: allocator, thread pool, kernels
    serial, serial_s = _arm(plan, encode, overlapped=False)
    overlapped, overlapped_s = _arm(plan, encode, overlapped=True)
    rng_unchanged = not before.differences(snapshot_global_rng())
    report = compare(serial, overlapped)
    return DemoResult(serial_s, overlapped_s, report, plan.numel, rng_unchanged)
