"""Request-thread cost of the default-generator check of the diffusers integration.

Every call that reaches `plan_call` passes its `generator=` argument through `call_generators`,
which now refuses a device's default generator (`is_default_generator`). This times, per call:
the check alone on a private and on the default CPU generator; `call_generators` on one private
generator and on a list of 8, against the same function without the check (the code before
it); and a refused call (`Unpredictable` raised and caught). `timeit`, best and median of
`--repeat` runs of `--number` calls each.

    .venv/bin/python benchmarks/bench_generator_check.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import timeit
from collections.abc import Callable

import torch

from prenoise.integrations.diffusers.plan import (
    Unpredictable,
    call_generators,
    is_default_generator,
)


def call_generators_without_the_check(generator: object) -> tuple[torch.Generator, ...]:
    """`call_generators` as it was before the default-generator check (the baseline)."""
    if generator is None:
        raise Unpredictable("generator is None", "generator-none")
    gens = tuple(generator) if isinstance(generator, list | tuple) else (generator,)
    if not gens:
        raise Unpredictable("empty generator list", "generator-empty")
    for g in gens:
        if not isinstance(g, torch.Generator):
            raise Unpredictable(f"generator of type {type(g).__name__}", "generator-type")
        if g.device.type != "cpu":
            raise Unpredictable(f"generator on {g.device}", "generator-device")
    return gens


def refused(generator: object) -> None:
    with contextlib.suppress(Unpredictable):
        call_generators(generator)


def per_call_us(work: Callable[[], object], number: int, repeat: int) -> tuple[float, float]:
    """(best, median) microseconds per call."""
    runs = [t / number * 1e6 for t in timeit.repeat(work, number=number, repeat=repeat)]
    return min(runs), statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--number", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    private = torch.Generator("cpu").manual_seed(0)
    eight = [torch.Generator("cpu").manual_seed(i) for i in range(8)]
    cases: list[tuple[str, Callable[[], object]]] = [
        ("is_default_generator(private)", lambda: is_default_generator(private)),
        ("is_default_generator(default)", lambda: is_default_generator(torch.default_generator)),
        ("call_generators(private), old", lambda: call_generators_without_the_check(private)),
        ("call_generators(private), new", lambda: call_generators(private)),
        ("call_generators(8 private), old", lambda: call_generators_without_the_check(eight)),
        ("call_generators(8 private), new", lambda: call_generators(eight)),
        ("call_generators(default), refused", lambda: refused(torch.default_generator)),
    ]
    print(f"torch {torch.__version__}; {args.repeat} runs of {args.number} calls")
    for name, work in cases:
        best, median = per_call_us(work, args.number, args.repeat)
        print(f"{name:36s} best {best:7.3f} us  median {median:7.3f} us")


if __name__ == "__main__":
    main()
