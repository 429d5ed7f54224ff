"""`prenoise bench`: alternating serial/overlapped pairs of one Ref2VA request, same process.

Models are loaded once. After `warmup` requests, `pairs` pairs run with the order inside each pair
alternating (serial→overlapped, then overlapped→serial, …), so drift on a noisy machine cannot
favour one arm. Each request records spans on every thread; metrics come from
`prenoise.observe.metrics.derive_metrics`, and per-pair deltas (overlapped − serial) are reported
next to the medians.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from prenoise.observe.attribution import Timing, WindowAttribution
from prenoise.observe.metrics import RequestMetrics, derive_metrics, peak_rss_bytes, reset_peak_rss
from prenoise.observe.tracing import Span, Tracer, chrome_trace
from prenoise.ref2va.pipeline import Arm, Ref2VAPipeline
from prenoise.ref2va.request_plan import Ref2VARequestPlan

__all__ = [
    "BenchConfig",
    "BenchResult",
    "RequestRun",
    "bench_timing",
    "run_bench",
    "summarize",
]

METRICS = (
    "prep_window_s",
    "noise_critical_s",
    "noise_worker_s",
    "overlap_s",
    "encode_s",
    "mix_s",
    "peak_rss_bytes",
)


@dataclass(frozen=True)
class BenchConfig:
    """How many requests to run and what to time."""

    pairs: int = 5
    warmup: int = 2
    full: bool = False
    encoder_threads: int | None = None


@dataclass
class RequestRun:
    """One timed request: its arm, metrics and spans."""

    arm: Arm
    pair: int
    metrics: RequestMetrics
    spans: list[Span] = field(repr=False)


@dataclass
class BenchResult:
    """All timed runs plus the JSON-ready summary."""

    runs: list[RequestRun]
    summary: dict[str, Any]

    def last_spans(self) -> dict[str, list[Span]]:
        """Spans of the last timed request of each arm."""
        last: dict[str, list[Span]] = {}
        for run in self.runs:
            last[run.arm] = run.spans
        return {arm: last[arm] for arm in ("serial", "overlapped") if arm in last}

    @property
    def median_pair(self) -> int:
        """The pair whose window difference (overlapped − serial) is the median one (the lower
        middle of an even count): the pair the PNG timeline and the traces show."""
        deltas = self.summary["delta"]["prep_window_s"]["per_pair"]
        pairs = sorted({r.pair for r in self.runs if self._complete(r.pair)})
        ranked = sorted(range(len(pairs)), key=lambda i: (deltas[i], i))
        return pairs[ranked[(len(ranked) - 1) // 2]]

    def pair_spans(self, pair: int) -> dict[str, list[Span]]:
        """Spans of both arms of `pair`, serial first."""
        arms = {r.arm: r.spans for r in self.runs if r.pair == pair}
        return {arm: arms[arm] for arm in ("serial", "overlapped") if arm in arms}

    def _complete(self, pair: int) -> bool:
        return len({r.arm for r in self.runs if r.pair == pair}) == 2

    def chrome_traces(self) -> dict[str, dict[str, Any]]:
        """Chrome/Perfetto trace JSON of each arm of the median pair (`median_pair`)."""
        return {
            arm: chrome_trace(spans, process_name=f"prenoise bench ({arm})")
            for arm, spans in self.pair_spans(self.median_pair).items()
        }


def _one_request(
    pipeline: Ref2VAPipeline, plan: Ref2VARequestPlan, arm: Arm, full: bool, out_dir: Path
) -> tuple[RequestMetrics, list[Span]]:
    tracer = Tracer()
    reset_peak_rss()
    if full:
        pipeline.generate(plan, out_dir / f"{arm}.mp4", arm, tracer=tracer)
    else:
        _, prepared, _ = pipeline.prepare(plan, arm, tracer=tracer)
        del prepared
    spans = tracer.spans
    metrics = derive_metrics(spans, threading.get_ident(), peak_rss_bytes=peak_rss_bytes())
    return metrics, spans


def run_bench(
    pipeline: Ref2VAPipeline,
    plan: Ref2VARequestPlan,
    config: BenchConfig,
    *,
    on_request: Callable[[str], None] | None = None,
) -> BenchResult:
    """Run the warm-up and the alternating pairs of the planned request (every run receives
    `plan` itself: planned and checked once, outside the timed runs); see the module
    docstring."""
    notify = on_request or (lambda _label: None)
    previous_threads = torch.get_num_threads()
    if config.encoder_threads is not None:
        torch.set_num_threads(config.encoder_threads)
    runs: list[RequestRun] = []
    try:
        with tempfile.TemporaryDirectory(prefix="prenoise-bench-") as tmp:
            out_dir = Path(tmp)
            for i in range(config.warmup):
                arm: Arm = "serial" if i % 2 == 0 else "overlapped"
                notify(f"warm-up {i + 1}/{config.warmup} ({arm})")
                _one_request(pipeline, plan, arm, config.full, out_dir)
            for pair in range(config.pairs):
                order: tuple[Arm, Arm] = (
                    ("serial", "overlapped") if pair % 2 == 0 else ("overlapped", "serial")
                )
                for arm in order:
                    notify(f"pair {pair + 1}/{config.pairs} ({arm})")
                    metrics, spans = _one_request(pipeline, plan, arm, config.full, out_dir)
                    runs.append(RequestRun(arm, pair, metrics, spans))
        threads = {
            "torch_intra_op_threads": torch.get_num_threads(),
            "encoder_threads_flag": config.encoder_threads,
            "preparation_workers": 1,
            "cpu_count": os.cpu_count(),
        }
    finally:
        torch.set_num_threads(previous_threads)
    return BenchResult(runs, summarize(runs, plan, config, threads))


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def machine_info() -> dict[str, Any]:
    """Processor, cores, torch build and the CPU capability torch dispatches to."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                cpu,
            )
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def summarize(
    runs: list[RequestRun], plan: Ref2VARequestPlan, config: BenchConfig, threads: dict[str, Any]
) -> dict[str, Any]:
    """The JSON summary: per-arm stats, per-pair deltas (overlapped − serial), machine, threads."""
    by_arm: dict[str, dict[str, Any]] = {}
    for arm in ("serial", "overlapped"):
        arm_runs = [asdict(r.metrics) for r in runs if r.arm == arm]
        by_arm[arm] = {m: _stats([float(r[m]) for r in arm_runs]) for m in METRICS if arm_runs}
    deltas: dict[str, Any] = {}
    pairs = sorted({r.pair for r in runs})
    for metric in METRICS:
        per_pair = []
        for pair in pairs:
            arms = {r.arm: asdict(r.metrics)[metric] for r in runs if r.pair == pair}
            if len(arms) == 2:
                per_pair.append(float(arms["overlapped"]) - float(arms["serial"]))
        if per_pair:
            deltas[metric] = {"median": statistics.median(per_pair), "per_pair": per_pair}
    recipe, geo = plan.recipe, plan.geometry
    attribution = _attribution(deltas)
    return {
        "recipe": recipe.name,
        "pairs": len(pairs),
        "warmup": config.warmup,
        "timed": "full request" if config.full else "preparation (to denoise-ready inputs)",
        "request": {
            "frames": geo.frames,
            "width": geo.width,
            "height": geo.height,
            "latent": [geo.T, geo.h, geo.w],
            "audio_t": geo.audio_t,
            "references": [r.kind for r in recipe.references],
            "seed": recipe.seed,
        },
        "serial": by_arm["serial"],
        "overlapped": by_arm["overlapped"],
        "delta": deltas,
        "attribution": attribution,
        "machine": machine_info(),
        "threads": threads,
    }


def _attribution(deltas: dict[str, Any]) -> dict[str, Any]:
    """What each pair's and the median window difference can be credited to: the noise moved
    off the request thread, and flags for encoder drift / timing noise (`WindowAttribution`)."""

    def entry(noise_delta: float, window_delta: float) -> dict[str, Any]:
        a = WindowAttribution(-noise_delta, -window_delta)
        return {
            "noise_moved_s": a.noise_moved_s,
            "window_saved_s": a.window_saved_s,
            "encoder_drift": a.drift,
            "timing_noise": a.noisy,
            "said": a.sentence(),
        }

    noise, window = deltas["noise_critical_s"], deltas["prep_window_s"]
    return {
        "median": entry(noise["median"], window["median"]),
        "per_pair": [
            entry(n, w) for n, w in zip(noise["per_pair"], window["per_pair"], strict=True)
        ],
    }


def bench_timing(summary: dict[str, Any]) -> Timing:
    """Medians of the summary's pairs: each arm's noise on the request thread and window, and
    the attribution of the median per-pair differences (`WindowAttribution`)."""
    serial, overlapped, delta = summary["serial"], summary["overlapped"], summary["delta"]

    def medians(metric: str) -> tuple[float, float]:
        return (float(serial[metric]["median"]), float(overlapped[metric]["median"]))

    pairs = summary["pairs"]
    return Timing(
        f"medians of {pairs} alternating pair{'s' if pairs != 1 else ''}",
        medians("noise_critical_s"),
        medians("prep_window_s"),
        WindowAttribution(
            -float(delta["noise_critical_s"]["median"]),
            -float(delta["prep_window_s"]["median"]),
        ),
    )
