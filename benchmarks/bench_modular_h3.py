"""Noise time on the request thread: MiniMax-H3 modular Ref2VA, plain vs enabled.

The seed's workload: a 14.4 s 1344x768 video reference at 24 fps with a stereo soundtrack,
generating 345 frames (the longest `17 * n + 5` count within H3's 15 s) on the 768x1344 canvas,
seed 2101. The draws are diffusers 0.42.1's own blocks at the released geometry (24 latent
channels, /16, 17-frame chunks; the pipeline's defaults when no VAE is loaded):
`MiniMaxH3PrepareConditionLatentsStep` draws the reference's (1, 24, 102, 48, 84) condition noise,
`MiniMaxH3PrepareLatentsStep` the (1, 24, 102, 48, 84) video noise and (1150, 32) audio rows:
19.8M float32 values. The setup block is diffusers' own (the reference passes through
untouched: already at 24 fps on its canvas). The two encoder blocks are stand-ins that take a
realistic time (`--text-s`, `--vae-s`: sleeping, as an accelerator-bound encoder leaves the host
CPU idle) and emit what the real ones would at this geometry; nothing after the draws runs.

Arms alternate in one process; medians of the pairs are reported:
- plain: time inside `randn_tensor` on the request thread;
- enabled: the request thread's time taking the prepared draws (`CallReport.wait_s`), and
  prenoise's own set-up / teardown (`setup_s`, `teardown_s`).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_modular_h3.py --pairs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

SEED = 2101
NUM_FRAMES = 345
HEIGHT, WIDTH = 768, 1344
AUDIO_RATE = 32000


def build(text_s: float, vae_s: float) -> Any:
    from diffusers.modular_pipelines import SequentialPipelineBlocks
    from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3Blocks
    from diffusers.modular_pipelines.minimax_h3 import encoders as h3_encoders
    from diffusers.schedulers import MiniMaxH3Scheduler

    workflow = MiniMaxH3Blocks().get_workflow("ref2va")
    names = (
        "before_encode",
        "text_encoder",
        "vae_encoder",
        "denoise.prepare_condition_latents",
        "denoise.prepare_latents",
    )
    blocks = SequentialPipelineBlocks.from_blocks_dict({n: workflow.sub_blocks[n] for n in names})

    def text_encoder(self: Any, components: Any, state: Any) -> Any:
        self.get_block_state(state)  # reads its inputs as the real block does (prenoise plans here)
        time.sleep(text_s)
        return components, state

    def vae_encoder(self: Any, components: Any, state: Any) -> Any:
        block_state = self.get_block_state(state)
        time.sleep(vae_s)
        latents = []
        for reference in block_state.normalized_references:
            frames = reference.frames.shape[0]
            encoded = max(1, (frames - 5) // 17) * 17 + 5
            t = (encoded - 5) // 17 * 5 + 2
            h, w = reference.frames.shape[1] // 16, reference.frames.shape[2] // 16
            latents.append(torch.zeros(1, 24, t, h, w))
        state.set("condition_latents", latents)
        rows = sum(c[0, 0].numel() // 4 for c in latents)  # (1, 2, 2) patches
        state.set("num_condition_video_rows", rows)
        num_frames = state.get("num_frames")
        state.set("num_latent_frames", (num_frames - 5) // 17 * 5 + 2)
        state.set("latent_height", state.get("height") // 16)
        state.set("latent_width", state.get("width") // 16)
        state.set("num_audio_latents", round(num_frames / 24 * 40))
        return components, state

    h3_encoders.MiniMaxH3Ref2VATextEncoderStep.__call__ = text_encoder  # type: ignore[method-assign]
    h3_encoders.MiniMaxH3Ref2VAReferenceEncoderStep.__call__ = vae_encoder  # type: ignore[method-assign]
    pipe = blocks.init_pipeline()
    pipe.update_components(scheduler=MiniMaxH3Scheduler())
    return pipe


def references() -> list[Any]:
    from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3VideoReference

    frames = np.full((NUM_FRAMES, HEIGHT, WIDTH, 3), 128, dtype=np.uint8)
    seconds = NUM_FRAMES / 24
    audio = torch.zeros(2, round(seconds * AUDIO_RATE))
    return [MiniMaxH3VideoReference(frames=frames, fps=24.0, audio=audio, sample_rate=AUDIO_RATE)]


@contextmanager
def timed_draws(totals: list[float]) -> Iterator[None]:
    """Time the plain arm's `randn_tensor` calls in the draw module (request thread)."""
    from diffusers.modular_pipelines.minimax_h3 import before_denoise

    original = before_denoise.randn_tensor

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals.append(time.perf_counter() - start)

    before_denoise.randn_tensor = timed
    try:
        yield
    finally:
        before_denoise.randn_tensor = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--text-s", type=float, default=1.0, help="text encoder stand-in (s)")
    parser.add_argument("--vae-s", type=float, default=2.0, help="VAE encoder stand-in (s)")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    from prenoise.integrations.diffusers import overlapped_call_with_report

    pipe = build(args.text_s, args.vae_s)
    refs = references()
    kwargs = {"prompt": "a dancer", "references": refs, "num_frames": NUM_FRAMES}
    plain_s, wait_s, setup_s, teardown_s, call_plain, call_enabled = [], [], [], [], [], []
    for pair in range(args.pairs):
        totals: list[float] = []
        generator = torch.Generator("cpu").manual_seed(SEED)
        with timed_draws(totals):
            start = time.perf_counter()
            plain = pipe(generator=generator, **kwargs)
            call_plain.append(time.perf_counter() - start)
        plain_s.append(sum(totals))
        generator = torch.Generator("cpu").manual_seed(SEED)
        start = time.perf_counter()
        out, report = overlapped_call_with_report(pipe, generator=generator, **kwargs)
        call_enabled.append(time.perf_counter() - start)
        assert report.overlapped and report.served == 3, report
        for name in ("latents", "audio_latents", "condition_rows"):
            assert torch.equal(plain.get(name).view(torch.int32), out.get(name).view(torch.int32))
        wait_s.append(report.wait_s)
        setup_s.append(report.setup_s)
        teardown_s.append(report.teardown_s)
        print(
            f"pair {pair}: plain noise {sum(totals) * 1e3:.0f} ms, enabled wait "
            f"{report.wait_s * 1e3:.1f} ms (setup {report.setup_s * 1e3:.1f}, teardown "
            f"{report.teardown_s * 1e3:.1f}); calls {call_plain[-1]:.2f} / "
            f"{call_enabled[-1]:.2f} s",
            flush=True,
        )
    med = statistics.median
    plain_ms, wait_ms = med(plain_s) * 1e3, med(wait_s) * 1e3
    overhead_ms = wait_ms + (med(setup_s) + med(teardown_s)) * 1e3
    print(
        f"median of {args.pairs} pairs: plain {plain_ms:.0f} ms of noise on the request thread; "
        f"enabled {wait_ms:.1f} ms waiting ({wait_ms / plain_ms:.1%} of plain), "
        f"{overhead_ms:.1f} ms with set-up and teardown ({overhead_ms / plain_ms:.1%}); "
        f"call {med(call_plain):.2f} s -> {med(call_enabled):.2f} s"
    )


if __name__ == "__main__":
    main()
