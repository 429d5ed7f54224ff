"""Per-step sampler noise on the request thread: plain `pipe(...)` vs `overlapped_call`.

A CogVideoX-5B-sized request: 49 frames at 480x720 → latents (1, 13, 16, 60, 90) (1.1M values)
in bfloat16 (the 5B checkpoint's dtype), `CogVideoXDPMScheduler`, 50 steps, CFG on (guidance 6),
a CPU generator, `output_type="latent"`. The scheduler draws the whole latent 98 times (one draw
on the first and on the last step, two on the others).

How the accelerator is simulated: the transformer is a stand-in whose forward sleeps
`--step-ms` (default 100 ms) and returns zeros of the latents' shape. A sleeping thread holds no
CPU and releases the GIL, as a host thread blocked on an accelerator's step does; the CPU draws
(and, on a real host, their host-to-device copies) come after it, serially, in the plain call.
The text encoder is the tiny offline T5 of the test pipelines, in bfloat16.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_step_noise.py --pairs 3

Measured per call, arms alternating in one process (plain/overlapped, then overlapped/plain):
- per-step noise left on the request thread: plain, the time inside the scheduler module's
  `randn_tensor`; overlapped, the time inside `StepLookahead.serve` (its first, plain draw,
  the waits for prepared draws, the generator state check and set, the device move);
- the whole call's wall time;
- each pair is checked bitwise equal (latents and the generator's final state).
Then the per-step draw's own cost per noise stream (`noise_streams.randn`) and of `torch.randn`,
each the median of 7 draws.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

_TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(_TESTS / "integrations"), str(_TESTS)]  # the tiny offline pipelines

from bench_diffusers import timed_attr  # noqa: E402 (after the path set-up it relies on)

SHAPE = (1, 13, 16, 60, 90)


class SleepingTransformer(torch.nn.Module):
    """Stands for the accelerator's transformer step: sleeps, returns zeros (see module doc)."""

    def __init__(self, config: Any, step_s: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = config
        self.step_s = step_s
        self.anchor = torch.nn.Parameter(torch.zeros(1, dtype=dtype), requires_grad=False)

    @property
    def device(self) -> torch.device:
        return self.anchor.device

    @property
    def dtype(self) -> torch.dtype:
        return self.anchor.dtype

    def cache_context(self, name: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[Any]:
        time.sleep(self.step_s)
        return (torch.zeros_like(hidden_states),)


def build(step_s: float, dtype: torch.dtype) -> Any:
    import diffusers_tiny
    from diffusers.configuration_utils import FrozenDict

    pipe = diffusers_tiny.cogvideox()
    config = dict(pipe.transformer.config)
    config.update(
        in_channels=16,
        out_channels=16,
        sample_frames=49,
        sample_height=60,
        sample_width=90,
        patch_size_t=None,
        use_rotary_positional_embeddings=False,
    )
    stand_in = SleepingTransformer(FrozenDict(config), step_s, dtype)
    object.__setattr__(pipe, "transformer", stand_in)  # not registered: never saved or moved
    pipe.text_encoder.to(dtype)
    return pipe


def run_plain(pipe: Any, kwargs: dict[str, Any], seed: int) -> dict[str, Any]:
    import diffusers.schedulers.scheduling_dpm_cogvideox as dpm

    spent: list[float] = []
    generator = torch.Generator("cpu").manual_seed(seed)
    with timed_attr(dpm, "randn_tensor", spent):
        start = time.perf_counter()
        out = pipe(generator=generator, **kwargs).frames
        wall = time.perf_counter() - start
    return {
        "out": out,
        "state": generator.get_state(),
        "noise_s": sum(spent),
        "draws": len(spent),
        "wall_s": wall,
    }


def run_overlapped(pipe: Any, kwargs: dict[str, Any], seed: int) -> dict[str, Any]:
    from prenoise.integrations.diffusers import overlapped_call_with_report
    from prenoise.integrations.diffusers.step_noise import StepLookahead

    spent: list[float] = []
    generator = torch.Generator("cpu").manual_seed(seed)
    with timed_attr(StepLookahead, "serve", spent):
        start = time.perf_counter()
        output, report = overlapped_call_with_report(pipe, generator=generator, **kwargs)
        wall = time.perf_counter() - start
    assert report.step_left is None and report.step_unused == 0, report
    return {
        "out": output.frames,
        "state": generator.get_state(),
        "noise_s": sum(spent),
        "draws": len(spent),
        "wall_s": wall,
        "step_served": report.step_served,
    }


def stream_costs(dtype: torch.dtype, repeats: int = 7) -> dict[str, float]:
    from prenoise.noise import streams as noise_streams

    def native_torch(*, generator: torch.Generator) -> None:
        torch.randn(SHAPE, generator=generator, dtype=dtype)

    draws: dict[str, Callable[..., Any]] = {
        stream: partial(noise_streams.randn, SHAPE, stream=stream, dtype=dtype)
        for stream in (noise_streams.NATIVE, "x86", "libm")
    }
    draws["torch.randn"] = native_torch
    costs = {}
    for name, draw in draws.items():
        times = []
        for i in range(repeats):
            generator = torch.Generator("cpu").manual_seed(i)
            start = time.perf_counter()
            draw(generator=generator)
            times.append(time.perf_counter() - start)
        costs[name] = statistics.median(times)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--step-ms", type=float, default=100.0)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.pairs < 1 or args.steps < 2 or args.step_ms < 0:
        parser.error("--pairs >= 1, --steps >= 2, --step-ms >= 0")
    dtype = getattr(torch, args.dtype)
    pipe = build(args.step_ms / 1000, dtype)
    kwargs = {
        "prompt": "a cat",
        "negative_prompt": "bad",
        "num_frames": 49,
        "height": 480,
        "width": 720,
        "num_inference_steps": args.steps,
        "guidance_scale": 6.0,
        "max_sequence_length": 16,
        "output_type": "latent",
    }
    run_overlapped(pipe, {**kwargs, "num_inference_steps": 2}, 0)  # warm-up (imports, threads)
    rows: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        order = (run_plain, run_overlapped) if pair % 2 == 0 else (run_overlapped, run_plain)
        results = {fn.__name__: fn(pipe, kwargs, 100 + pair) for fn in order}
        plain, ahead = results["run_plain"], results["run_overlapped"]
        equal = torch.equal(plain["out"].view(torch.uint8), ahead["out"].view(torch.uint8))
        assert equal and torch.equal(plain["state"], ahead["state"]), "not bitwise equal"
        rows.append(
            {
                "plain_noise_s": plain["noise_s"],
                "plain_draws": plain["draws"],
                "prenoise_noise_s": ahead["noise_s"],
                "prenoise_step_served": ahead["step_served"],
                "plain_wall_s": plain["wall_s"],
                "prenoise_wall_s": ahead["wall_s"],
            }
        )
        print(json.dumps(rows[-1]))

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    summary = {
        "shape": list(SHAPE),
        "dtype": args.dtype,
        "steps": args.steps,
        "step_ms": args.step_ms,
        "pairs": args.pairs,
        "threads": torch.get_num_threads(),
        "median_plain_noise_s": median("plain_noise_s"),
        "median_prenoise_noise_s": median("prenoise_noise_s"),
        "noise_left_ratio": median("prenoise_noise_s") / median("plain_noise_s"),
        "median_plain_wall_s": median("plain_wall_s"),
        "median_prenoise_wall_s": median("prenoise_wall_s"),
        "draw_cost_s_per_stream": stream_costs(dtype),
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
