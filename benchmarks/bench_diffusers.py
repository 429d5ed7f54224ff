"""Noise time on the request thread: plain `pipe(...)` vs `overlapped_call(pipe, ...)`.

A Wan 2.2 TI2V-sized request (121 frames, 704x1280, 48 latent channels, VAE /16 → noise
(1, 48, 31, 44, 80) float32) on a WanPipeline with a tiny transformer (one layer, patch
(1, 4, 4)), the tiny TI2V VAE and a small T5 text encoder (512 tokens), one step, latent output.
Arms alternate in one process; medians of the pairs are reported. Offline: every component is
built from a small config.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_diffusers.py --pairs 7

Measured per call:
- plain: time inside `randn_tensor` on the request thread (the draw is on the critical path);
- overlapped: time the request thread waits for the prepared noise (`CallReport.wait_s`);
- set-up / teardown: the request thread's time in prenoise before the pipeline's own call
  (planning, executor start, submission; `CallReport.setup_s`) and after it (settling the
  replay queue, the executor's exit joining its worker; `CallReport.teardown_s`);
- encode: `encode_prompt` time, which is what the draw overlaps with;
- call: the whole call's wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integrations"))


def build(encoder_dim: int, encoder_layers: int) -> Any:
    import diffusers_tiny
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    from transformers import T5Config, T5EncoderModel

    reference = diffusers_tiny.wan(ti2v=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        transformer = WanTransformer3DModel(
            patch_size=(1, 4, 4),
            num_attention_heads=1,
            attention_head_dim=8,
            in_channels=48,
            out_channels=48,
            text_dim=encoder_dim,
            freq_dim=32,
            ffn_dim=8,
            num_layers=1,
            rope_max_seq_len=64,
        ).eval()
        encoder = T5EncoderModel(
            T5Config(
                vocab_size=len(diffusers_tiny.WORDS) + 3,
                d_model=encoder_dim,
                d_ff=encoder_dim * 2,
                d_kv=64,
                num_layers=encoder_layers,
                num_heads=max(1, encoder_dim // 64),
            )
        ).eval()
    return WanPipeline(
        tokenizer=diffusers_tiny.tokenizer(512),
        text_encoder=encoder,
        vae=reference.vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0),
        transformer=transformer,
        expand_timesteps=False,  # per-token timesteps assume a (1, 2, 2) patch; noise unchanged
    )


@contextmanager
def timed_attr(owner: Any, name: str, sink: list[float]) -> Iterator[None]:
    """Wrap `owner.name` with a timer that appends each call's seconds to `sink`."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - start)

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--encoder-dim", type=int, default=256)
    parser.add_argument("--encoder-layers", type=int, default=2)
    args = parser.parse_args()

    import diffusers.pipelines.wan.pipeline_wan as wan_module

    from prenoise.integrations.diffusers import overlapped_call_with_report

    pipe = build(args.encoder_dim, args.encoder_layers)
    kwargs = {
        "prompt": "a red cat dance on the moon",
        "height": 704,
        "width": 1280,
        "num_frames": 121,
        "num_inference_steps": 1,
        "guidance_scale": 1.0,
        "output_type": "latent",
    }
    rows: dict[str, list[float]] = {k: [] for k in ("plain", "overlapped", "enc_p", "enc_o")}
    rows.update(call_p=[], call_o=[], setup=[], teardown=[])

    def plain_arm(seed: int) -> torch.Tensor:
        draws: list[float] = []
        encodes: list[float] = []
        with (
            timed_attr(wan_module, "randn_tensor", draws),
            timed_attr(pipe, "encode_prompt", encodes),
        ):
            start = time.perf_counter()
            out = pipe(generator=torch.Generator().manual_seed(seed), **kwargs).frames
            rows["call_p"].append(time.perf_counter() - start)
        rows["plain"].append(sum(draws))
        rows["enc_p"].append(sum(encodes))
        return out  # type: ignore[no-any-return]

    def overlapped_arm(seed: int) -> torch.Tensor:
        encodes: list[float] = []
        with timed_attr(pipe, "encode_prompt", encodes):
            start = time.perf_counter()
            output, report = overlapped_call_with_report(
                pipe, generator=torch.Generator().manual_seed(seed), **kwargs
            )
            rows["call_o"].append(time.perf_counter() - start)
        assert report.overlapped and report.served == 1, report
        rows["overlapped"].append(report.wait_s)
        rows["setup"].append(report.setup_s)
        rows["teardown"].append(report.teardown_s)
        rows["enc_o"].append(sum(encodes))
        return output.frames  # type: ignore[no-any-return]

    arms: list[Callable[[int], torch.Tensor]] = [plain_arm, overlapped_arm]
    plain_arm(0), overlapped_arm(0)  # warm up both paths
    for rows_list in rows.values():
        rows_list.clear()
    for i in range(args.pairs):
        order = arms if i % 2 == 0 else arms[::-1]
        outs = [arm(i) for arm in order]
        a, b = (x.contiguous().view(torch.int32) for x in outs)
        assert torch.equal(a, b), "overlapped output differs"

    def med(name: str) -> float:
        return statistics.median(rows[name]) * 1e3

    noise_shape = (1, 48, 31, 44, 80)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, pairs={args.pairs}")
    print(f"noise {noise_shape} float32 = {4 * torch.Size(noise_shape).numel() / 2**20:.1f} MiB")
    print(f"text encoder: T5 d_model={args.encoder_dim} layers={args.encoder_layers}, 512 tokens")
    print(
        "| arm | noise on request thread (ms) | prenoise set-up / teardown (ms) "
        "| encode_prompt (ms) | whole call (ms) |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| plain | {med('plain'):.1f} | – | {med('enc_p'):.1f} | {med('call_p'):.1f} |")
    print(
        f"| overlapped | {med('overlapped'):.2f} | {med('setup'):.2f} / {med('teardown'):.2f} "
        f"| {med('enc_o'):.1f} | {med('call_o'):.1f} |"
    )
    parts = zip(rows["setup"], rows["overlapped"], rows["teardown"], strict=True)
    overhead = [setup + wait + teardown for setup, wait, teardown in parts]
    print(
        f"overlapped: prenoise's whole request-thread time (set-up + wait + teardown) "
        f"{statistics.median(overhead) * 1e3:.2f} ms median, "
        f"{min(overhead) * 1e3:.2f}…{max(overhead) * 1e3:.2f} ms"
    )
    print("outputs bitwise equal in every pair")


if __name__ == "__main__":
    main()
