"""Benchmark prenoise.noise.kernel against torch's CPU normal draws (float32, same process).

Each repetition runs every arm once, in alternating order, and the table reports medians, so
drifting machine load hits all arms alike. Every arm's output is also checked bit for bit
against torch before timing. Usage: ``python benchmarks/bench_kernel.py [--reps N]``; run it
again under ``THP_MEM_ALLOC_ENABLE=1`` to give torch's own allocations 2 MiB pages as well.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable

import torch

from prenoise.noise import kernel

SHAPES = {"5.2M (1,48,31,44,80)": (1, 48, 31, 44, 80), "17.6M (1,48,91,48,84)": (1, 48, 91, 48, 84)}
DEPENDENT = ((1, 24, 38, 48, 84), (1, 24, 1))


def _median_ms(arms: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in arms}
    for rep in range(reps):
        order = list(arms) if rep % 2 == 0 else list(reversed(arms))
        for name in order:
            start = time.perf_counter()
            arms[name]()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def _check(shape: tuple[int, ...]) -> None:
    a, b = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for threads in (1, 2):
        x = torch.randn(shape, generator=a)
        y = kernel.randn(shape, generator=b, threads=threads)
        assert torch.equal(x.view(torch.int32), y.view(torch.int32))
        assert torch.equal(a.get_state(), b.get_state())


def _draw_arms(
    shape: tuple[int, ...], g: torch.Generator, buf: torch.Tensor
) -> dict[str, Callable[[], object]]:
    return {
        "torch.randn": lambda: torch.randn(shape, generator=g),
        "kernel.randn 1T": lambda: kernel.randn(shape, generator=g, threads=1),
        "kernel.randn 2T": lambda: kernel.randn(shape, generator=g, threads=2),
        # what kernel.randn costs without the huge-page advice of kernel.empty
        "4k fill 1T": lambda: kernel.fill_normal_(torch.empty(shape), g, threads=1),
        "4k fill 2T": lambda: kernel.fill_normal_(torch.empty(shape), g, threads=2),
        "out.normal_": lambda: buf.normal_(generator=g),
        "fill_normal_ 1T": lambda: kernel.fill_normal_(buf, g, threads=1),
        "fill_normal_ 2T": lambda: kernel.fill_normal_(buf, g, threads=2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(1)
    status = kernel.backend_status()
    print(f"backend: {status.name} ({status.reason}); torch {torch.__version__}")
    thp = os.environ.get("THP_MEM_ALLOC_ENABLE", "unset")
    print(f"torch allocations: THP_MEM_ALLOC_ENABLE={thp}")
    rows = []
    for label, shape in SHAPES.items():
        _check(shape)
        arms = _draw_arms(shape, torch.Generator().manual_seed(0), torch.empty(shape))
        ms = _median_ms(arms, args.reps)
        rows.append(
            (f"randn {label}", ms["torch.randn"], ms["kernel.randn 1T"], ms["kernel.randn 2T"])
        )
        rows.append(
            (
                f"randn {label} into torch.empty",
                ms["torch.randn"],
                ms["4k fill 1T"],
                ms["4k fill 2T"],
            )
        )
        rows.append(
            (f"fill {label}", ms["out.normal_"], ms["fill_normal_ 1T"], ms["fill_normal_ 2T"])
        )
    shape, keep = DEPENDENT
    a, b = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    ref = torch.randn(shape, generator=a)[tuple(slice(0, k) for k in keep)].contiguous()
    assert torch.equal(ref, kernel.randn_keep_prefix(shape, keep, generator=b))
    assert torch.equal(a.get_state(), b.get_state())
    g = torch.Generator().manual_seed(0)
    sl = tuple(slice(0, k) for k in keep)
    ms = _median_ms(
        {
            "slice": lambda: torch.randn(shape, generator=g)[sl].contiguous(),
            "keep": lambda: kernel.randn_keep_prefix(shape, keep, generator=g),
        },
        args.reps,
    )
    kept = math.prod(keep) * math.prod(shape[len(keep) :])
    rows.append((f"dependent {shape} keep {keep} ({kept} kept)", ms["slice"], ms["keep"], None))
    print("\n| case | torch ms | kernel 1 thread ms (speed-up) | kernel 2 threads ms (speed-up) |")
    print("| --- | --- | --- | --- |")
    for name, base, one, two in rows:
        two_s = "—" if two is None else f"{two:.2f} ({base / two:.1f}×)"
        print(f"| {name} | {base:.2f} | {one:.2f} ({base / one:.1f}×) | {two_s} |")


if __name__ == "__main__":
    main()
