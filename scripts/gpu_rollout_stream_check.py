"""Check a device generator's rollout noise in the named streams on a device, bit for bit.

    python scripts/gpu_rollout_stream_check.py --device cuda --json rollout-stream.json
    python scripts/gpu_rollout_stream_check.py --device cpu --json rollout-stream.json --rows 1008

SGLang 0.5.23 draws MiniMax-H3's rollout noise at every stochastic step from the loop's
`torch.Generator(device=<the GPU>)`, seeded with the request seed. Under
`PRENOISE_SGLANG_NOISE_STREAM=x86|libm`, `prenoise.integrations.sglang.h3_rollout` draws it
instead from a private CPU generator seeded with that generator's `initial_seed()`, one step ahead
on a worker thread, and copies it to the device once per step; the device generator is never
drawn from. Without a GPU the test suite can only simulate the device generator; this script runs
the same code with a real one. SGLang itself is not needed: upstream's update is stood in for by
a function making upstream's one call (`torch.randn(sample.shape, generator=generator,
device=sample.device, dtype=torch.float32)`), and the loop's draw count (upstream's
`_effective_sde_type` per step) is fixed at `--steps`.

Checked for each named stream, over `--steps` steps of rows `[--rows, 96]` float32:
- every step's noise is a float32 tensor on `--device`, bitwise equal to the stream's draw from a
  CPU generator seeded with the same seed, continuing from step to step, copied to the device;
- the device generator's state is what it was (never drawn from; on `--device cpu` the generator
  is itself a CPU generator and is consumed as the reference's is: its end state is compared);
- every step was served from a draw prepared ahead, and each prepared draw ran on the rollout
  worker thread (`prenoise-sglang-rollout...`), never on the calling thread.
And for the native stream with a device generator (not on `--device cpu`): upstream's draw
untouched (bitwise equal to the same calls on a generator seeded the same way), nothing served.

Exit status: 0 when every check holds, 1 when one does not, 2 when the device cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from prenoise.integrations.sglang import h3_rollout
from prenoise.integrations.sglang.h3_initial import DENOISE_STATE_KEY
from prenoise.noise.stream_mode import StreamDrawMode
from prenoise.noise.streams import NATIVE
from prenoise.preparation.lookahead import StepLookahead

SEED = 1234
STREAMS = ("x86", "libm")
#: The H3 video target rows at 1344x768 for 5 s: 37 latent frames x 1008 rows.
SEED_ROWS = 37 * 1008


def upstream_update(
    video_target: torch.Tensor,
    velocity: torch.Tensor,
    *,
    batch: Any,
    generator: torch.Generator,
    loop_step_index: int,
    noise_buffer: Any = None,
) -> tuple[torch.Tensor, None, None, torch.Tensor]:
    """Stands in for `minimax_h3_rollout_update_video_target`: its one draw, as upstream
    calls it."""
    sample, dtype = video_target, torch.float32
    noise = torch.randn(sample.shape, generator=generator, device=sample.device, dtype=dtype)
    return video_target, None, None, noise


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu().contiguous().view(torch.int32)


def run_loop(stream: str, device: str, rows: int, steps: int) -> dict[str, Any]:
    """One rollout loop of `steps` updates through `h3_rollout` on a `device` generator."""
    batch = SimpleNamespace(
        extra={DENOISE_STATE_KEY: {"initial_video_rows": torch.empty(rows, 96)}},
        sampling_params=SimpleNamespace(seed=SEED),
    )
    generator = torch.Generator(device=device).manual_seed(SEED)
    state_before = generator.get_state()
    video_target = torch.zeros(rows, 96, device=device)
    velocity = torch.zeros_like(video_target)
    noises = []
    caller = threading.current_thread().name
    with h3_rollout.open_loop(batch, stream) as loop:
        for step in range(steps):
            kwargs = {"batch": batch, "generator": generator, "loop_step_index": step}
            out = h3_rollout.update(upstream_update, stream, (video_target, velocity), kwargs)
            noises.append(out[3])
    reference = torch.Generator(device="cpu" if stream != NATIVE else device).manual_seed(SEED)
    failures: list[str] = []
    for step, noise in enumerate(noises):
        if stream == NATIVE:
            expected = torch.randn(
                (rows, 96), generator=reference, device=reference.device, dtype=torch.float32
            )
        else:
            with StreamDrawMode(stream):
                expected = torch.randn((rows, 96), generator=reference, dtype=torch.float32)
        if noise.device.type != torch.device(device).type or noise.dtype != torch.float32:
            failures.append(f"step {step}: noise on {noise.device} {noise.dtype}")
        elif not torch.equal(_bits(noise), _bits(expected)):
            differing = int((_bits(noise) != _bits(expected)).sum())
            failures.append(f"step {step}: {differing} elements differ from the reference")
    if torch.device(device).type != "cpu" and stream != NATIVE:
        if not torch.equal(generator.get_state(), state_before):
            failures.append("the device generator was drawn from")
    elif not torch.equal(generator.get_state(), reference.get_state()):
        failures.append("the generator's end state differs from the reference's")
    served = loop.served
    expected_served = 0 if stream == NATIVE else steps
    if served != expected_served:
        failures.append(f"{served} of {steps} draws served, {expected_served} expected")
    elsewhere = sorted(
        {n for n in WORKER_THREADS if n == caller or not n.startswith(h3_rollout.EXECUTOR_NAME)}
    )
    if elsewhere:
        failures.append(f"prepared draws ran on {elsewhere}, not the rollout worker")
    return {
        "stream": stream,
        "steps": steps,
        "rows": rows,
        "served": served,
        "first_ahead": loop.first_ahead,
        "left": loop.left,
        "worker_threads": sorted(set(WORKER_THREADS)),
        "equal": not failures,
        "failures": failures,
    }


WORKER_THREADS: list[str] = []


def _spy_worker_threads() -> None:
    """Record the thread of every prepared draw (the look-ahead's private-clone draws)."""
    original = StepLookahead._draw_from

    def draw_from(self: StepLookahead, draw: Any, state: torch.Tensor) -> Any:
        WORKER_THREADS.append(threading.current_thread().name)
        return original(self, draw, state)

    StepLookahead._draw_from = draw_from  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=SEED_ROWS)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.steps < 2:
        print("gpu_rollout_stream_check: --rows must be >= 1 and --steps >= 2", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_rollout_stream_check: no CUDA device", file=sys.stderr)
        return 2
    # The loop's draw count is upstream's rule (`_effective_sde_type` per step): fixed here.
    h3_rollout.expected_draws = lambda batch: (args.steps, "")  # type: ignore[assignment]
    _spy_worker_threads()
    report: dict[str, Any] = {"device": args.device, "torch": torch.__version__, "loops": []}
    began = time.perf_counter()
    try:
        # The native stream is checked with a device generator only (upstream's draw untouched);
        # on the CPU it is the CPU-platform path the test suite runs with SGLang itself.
        streams = STREAMS if torch.device(args.device).type == "cpu" else (*STREAMS, NATIVE)
        for stream in streams:
            WORKER_THREADS.clear()
            loop = run_loop(stream, args.device, args.rows, args.steps)
            report["loops"].append(loop)
            print(f"{stream}: served {loop['served']}/{loop['steps']}, equal {loop['equal']}")
            for failure in loop["failures"]:
                print(f"  {failure}")
        report["equal"] = all(loop["equal"] for loop in report["loops"])
    except Exception:
        report["equal"] = False
        report["error"] = traceback.format_exc()
        print(report["error"], file=sys.stderr)
    report["seconds"] = round(time.perf_counter() - began, 3)
    args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
