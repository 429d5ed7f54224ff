"""Upstream's results with no prenoise, computed where torch's CPU arithmetic is the libm stream's.

`compute` (the session fixture `scalar_host`, conftest.py) runs `main` once in a process forked
from the `vllm_forkserver` (torch and vllm imported there once for the session, no CPU kernel run
yet: `forked.py`) with `ATEN_CPU_CAPABILITY=default` (torch's scalar kernels, asserted there);
test_noise_streams.py and test_pipeline_streams.py both compare against what it returns, instead
of starting an interpreter each (no vllm import of its own). By hand:

    ATEN_CPU_CAPABILITY=default python scalar_host.py PIPELINES_OUT IMAGE SEED H3_OUT

- PIPELINES_OUT: `pipeline_standins.draw_all()`, every other pipeline's draws;
- H3_OUT: every tensor field of MiniMax-H3's `forward`, plugin off, native, one image reference,
  seed SEED, two outputs.

Each starts from the global CPU RNG state the process started with, as in a process of its own.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
SEED = 7
"""The seed of the MiniMax-H3 request `ScalarHost.h3` ran (one image reference, two outputs)."""


@dataclass(frozen=True)
class ScalarHost:
    """What upstream computes, no prenoise, where torch's CPU arithmetic is the libm stream's."""

    pipelines: dict[str, torch.Tensor]
    """`pipeline_standins.draw_all()`: every other pipeline's draws."""
    h3: dict[str, torch.Tensor]
    """Every tensor field of MiniMax-H3's `forward`, plugin off, native: the image reference,
    seed `SEED`, two outputs."""


def compute(image: Path, out: Path, forkserver: ForkServerContext) -> ScalarHost:
    """`main` in a process forked from `forkserver` whose torch runs its scalar CPU kernels,
    native (no stream)."""
    import forked

    from prenoise.integrations.vllm_omni.settings import MISMATCH_ENV, NOISE_STREAM_ENV

    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", HF_HUB_OFFLINE="1")
    env.pop(NOISE_STREAM_ENV, None)
    env.pop(MISMATCH_ENV, None)
    pipelines, h3 = out / "draws.pt", out / "h3.pt"
    argv = [str(pipelines), str(image), str(SEED), str(h3)]
    done = forked.run(forkserver, _MAIN, argv, env, out)
    assert done.returncode == 0, done.stderr[-3000:]
    return ScalarHost(pipelines=torch.load(pipelines), h3=torch.load(h3))


_MAIN = f"""
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {str(Path(__file__).parent)!r})  # as `python scalar_host.py` would have it
import scalar_host
scalar_host.main(*sys.argv[1:])
"""


def main(pipelines_out: str, image: str, seed: str, h3_out: str) -> None:
    # torch's first CPU kernel reads ATEN_CPU_CAPABILITY: none ran before this in the process
    assert torch.backends.cpu.get_cpu_capability() == "DEFAULT", "not torch's scalar kernels"
    fresh = torch.default_generator.get_state()

    import pipeline_standins  # this file's folder is sys.path[0]

    torch.save(pipeline_standins.draw_all(), pipelines_out)
    torch.default_generator.set_state(fresh)

    from prenoise.integrations.vllm_omni.verification import H3Request, run_arm

    arm = run_arm(H3Request((Path(image),), seed=int(seed), outputs=2), plugin_on=False)
    tensors = {n: v for n, v in arm.fields.items() if isinstance(v, torch.Tensor)}
    torch.save(tensors, h3_out)


if __name__ == "__main__":
    main(*sys.argv[1:])
