"""Benchmark the named noise streams against torch's CPU normal draws on this machine.

Every arm fills the same preallocated float32 buffer (no page faults), each repetition runs the
arms in alternating order, and the table reports medians. Each stream arm is checked against
the golden self-check first (and the x86 arms against each other, bit for bit). torch's default
(scalar libm) path is timed in a subprocess with ``ATEN_CPU_CAPABILITY=default``.
Usage: ``python benchmarks/bench_streams.py [--reps N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from prenoise.noise import kernel
from prenoise.noise import streams as noise_streams
from prenoise.noise.streams import _fill_f32, _Impl

SHAPE = (1, 48, 31, 44, 80)  # 5.2M values: a Ref2VA-sized video latent


def _median_ms(arms: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in arms}
    for rep in range(reps):
        for name in list(arms) if rep % 2 == 0 else list(reversed(arms)):
            start = time.perf_counter()
            arms[name]()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def _torch_only(reps: int) -> None:
    buf, g = torch.empty(SHAPE), torch.Generator().manual_seed(0)
    buf64 = torch.empty(SHAPE, dtype=torch.float64)
    arms = {
        "f32": lambda: buf.normal_(generator=g),
        "f64": lambda: buf64.normal_(generator=g),
    }
    result = _median_ms(arms, reps)
    json.dump({"capability": torch.backends.cpu.get_cpu_capability(), **result}, sys.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_only:
        _torch_only(args.reps)
        return
    ext = kernel._ext
    assert ext is not None, "the C kernel is not built"
    for stream in noise_streams.NON_NATIVE_STREAMS:
        assert noise_streams.stream_status(stream).usable, stream
    x86 = noise_streams._implementation("x86")
    portable = _Impl("portable-c", int(ext.BACKEND_PORTABLE))
    libm = _Impl("scalar-libm", int(ext.BACKEND_SCALAR))
    buf, g = torch.empty(SHAPE), torch.Generator().manual_seed(0)
    check_a, check_b = torch.empty(SHAPE), torch.empty(SHAPE)
    _fill_f32(check_a, torch.Generator().manual_seed(3), x86, 2)
    _fill_f32(check_b, torch.Generator().manual_seed(3), portable, 2)
    assert torch.equal(check_a.view(torch.int32), check_b.view(torch.int32))
    buf64 = torch.empty(SHAPE, dtype=torch.float64)
    arms: dict[str, Callable[[], object]] = {
        "torch normal_ (local: x86 stream)": lambda: buf.normal_(generator=g),
        "native kernel 1T (today)": lambda: kernel.fill_normal_(buf, g, threads=1),
        "native kernel 2T (today)": lambda: kernel.fill_normal_(buf, g, threads=2),
    }
    for impl, label in ((x86, f"x86 stream, {x86.name}"), (portable, "x86 stream, portable C")):
        for t in (1, 2):
            arms[f"{label} {t}T"] = lambda impl=impl, t=t: _fill_f32(buf, g, impl, t)
    for t in (1, 2):
        arms[f"libm stream, scalar-libm {t}T"] = lambda t=t: _fill_f32(buf, g, libm, t)
    arms["float64: torch normal_"] = lambda: buf64.normal_(generator=g)
    arms["float64: x86/libm stream (C, 1T)"] = lambda: noise_streams.fill_(buf64, g, "x86")
    ours = _median_ms(arms, args.reps)
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    out = subprocess.run(
        [sys.executable, __file__, "--torch-only", "--reps", str(args.reps)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    default = json.loads(out)
    n = math.prod(SHAPE)
    print(
        f"{n / 1e6:.2f}M values {SHAPE}, medians of {args.reps}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}"
    )
    print("| arm | ms | ns/value |\n| --- | ---: | ---: |")
    rows = dict(ours)
    rows[f"torch normal_, ATEN_CPU_CAPABILITY=default (libm stream, {default['capability']})"] = (
        default["f32"]
    )
    rows["float64: torch normal_, ATEN_CPU_CAPABILITY=default"] = default["f64"]
    for name, ms in rows.items():
        print(f"| {name} | {ms:.1f} | {1e6 * ms / n:.2f} |")


if __name__ == "__main__":
    main()
