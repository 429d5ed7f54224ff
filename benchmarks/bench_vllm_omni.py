"""vLLM-Omni MiniMax-H3 with and without the prenoise plugin: noise on the request thread and
the preparation window, alternating pairs in one process (run with .venv-vllm-omni/bin/python).

The pipeline is upstream's real `MiniMaxH3Pipeline` with the stand-in components of
`prenoise.integrations.vllm_omni.standins`. Accelerator time is simulated: the text encoder
stand-in sleeps `--encoder-idle` seconds (the host CPU idles while an accelerator would encode
the prompt), and the media encoder runs its cheap CPU stand-in. Measured per request:
- noise on the request thread: wall time inside `_initial_noise` and the condition-noise
  function (upstream's draws and mix with the plugin off; waits, takes and the mix with it on);
- preparation window: `forward` entry to the first transformer call;
- plan to first step: from `prepare_encoder_inputs` returning (the media plan is known; upstream's
  ffmpeg transcode and decode of video references are behind) to the first transformer call.

    .venv-vllm-omni/bin/python benchmarks/bench_vllm_omni.py --json outputs/bench/vllm_omni.json

(scratch; `--json benchmarks/results/NAME.json` refreshes a recorded result). Per release and
request kind (`benchmarks/vllm_omni.md`): `.venv-vllm-omni-032/bin/python
benchmarks/bench_vllm_omni.py --kinds image video image-2 t2va fl2va guided --durations 5`.

`--noise-stream x86|libm`: the plugin arm runs with `PRENOISE_VLLM_OMNI_NOISE_STREAM` set to it;
the plain arm draws upstream's noise functions (only those, as the plugin's serial path does)
inside `draws_in_stream`, i.e. what the stream costs on the request thread without the overlap.

`--kinds`: the request kinds (default `image video`: a Ref2VA request with that reference);
also `image-2` (two outputs, `PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=1` in both arms: it only
changes the plugin arm), `t2va`, `fl2va` (one keyframe) and `guided` (a Ref2VA image request with
a still timeline guide; vllm-omni 0.32.0rc1 on), `continuation` (a Ref2VA image request in
continuation mode, 107-frame windows overlapping by 22, `PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=1`
in both arms: window k+1 drawn while window k denoises; give it `--step-idle`, the simulated
accelerator time of one transformer call, so that there is denoising to overlap). Only time on
the request's own thread counts: on 0.32.0rc1 upstream draws a Ref2VA first output on its own
worker thread, with the plugin on or off, and that time is not the request thread's.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from prenoise.integrations.vllm_omni import plugin
from prenoise.integrations.vllm_omni.settings import NEXT_OUTPUT_ENV, NOISE_STREAM_ENV
from prenoise.integrations.vllm_omni.standins import StandInHooks, synthetic_image, synthetic_video
from prenoise.integrations.vllm_omni.verification import H3Request, run_forward
from prenoise.noise.stream_mode import draws_in_stream


def timed(fn: Callable[..., Any], sink: list[float], stream: str = "native") -> Callable[..., Any]:
    request_thread = threading.get_ident()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        mode = draws_in_stream(stream) if stream != "native" else contextlib.nullcontext()
        try:
            with mode:
                return fn(*args, **kwargs)
        finally:
            if threading.get_ident() == request_thread:
                sink.append(time.perf_counter() - start)

    return wrapper


def one_request(
    request: H3Request,
    plugin_on: bool,
    encoder_idle: float,
    stream: str = "native",
    step_idle: float = 0.0,
) -> dict[str, float]:
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    noise: list[float] = []
    marks: dict[str, float] = {}

    def first_call(calls: int) -> None:
        if calls == 1:
            marks["first_step"] = time.perf_counter()
        time.sleep(step_idle)  # the accelerator denoising; the host idles

    hooks = StandInHooks(
        on_text_encode=lambda: time.sleep(encoder_idle), on_transformer_call=first_call
    )
    (plugin.install if plugin_on else plugin.uninstall)()
    cls = upstream.MiniMaxH3Pipeline
    initial, condition = (
        cls.__dict__["_initial_noise"],
        upstream.minimax_h3_imgvid_cond_noise_aug_rows,
    )
    plan = upstream.prepare_encoder_inputs

    def plan_probe(*args: Any, **kwargs: Any) -> Any:
        prepared = plan(*args, **kwargs)
        marks["plan_known"] = time.perf_counter()
        return prepared

    serial_stream = "native" if plugin_on else stream  # the plugin draws in it by itself
    cls._initial_noise = timed(initial, noise, serial_stream)
    upstream.minimax_h3_imgvid_cond_noise_aug_rows = timed(condition, noise, serial_stream)
    upstream.prepare_encoder_inputs = plan_probe
    try:
        start = time.perf_counter()
        run_forward(request, plugin_on=plugin_on, hooks=hooks)
    finally:
        cls._initial_noise = initial
        upstream.minimax_h3_imgvid_cond_noise_aug_rows = condition
        upstream.prepare_encoder_inputs = plan
    return {
        "noise_on_request_thread_s": sum(noise),
        "window_s": marks["first_step"] - start,
        "plan_to_first_step_s": marks["first_step"] - marks["plan_known"],
    }


KINDS = ("image", "video", "image-2", "t2va", "fl2va", "guided", "continuation")


def make_request(kind: str, folder: Path, duration: float) -> H3Request:
    """The request of `kind` (see `--kinds`), 1344x768, seed 2101, one denoising step."""
    image = folder / "reference.png"
    if not image.exists():
        synthetic_image(image, 1344, 768)
    base = H3Request((image,), seed=2101, duration=duration, width=1344, height=768, steps=1)
    if kind == "video":
        video = folder / "reference.mp4"
        if not video.exists():
            synthetic_video(video, 1344, 768)
        return replace(base, references=(video,))
    if kind == "image-2":
        return replace(base, outputs=2)
    if kind == "t2va":
        return replace(base, references=(), task="t2va")
    if kind == "fl2va":
        return replace(base, task="fl2va")
    if kind == "guided":
        return replace(base, guides=((0, image),))
    if kind == "continuation":
        return replace(base, continuation=True)
    return base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--durations", type=float, nargs="+", default=[5.0, 10.0, 15.0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--encoder-idle", type=float, default=0.6)
    parser.add_argument(
        "--step-idle", type=float, default=0.0, help="seconds each transformer call sleeps"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--kinds", nargs="+", default=["image", "video"], choices=KINDS)
    parser.add_argument("--noise-stream", default="native", choices=["native", "x86", "libm"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ[NOISE_STREAM_ENV] = args.noise_stream
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for kind in args.kinds:
            os.environ[NEXT_OUTPUT_ENV] = "1" if kind in ("image-2", "continuation") else "0"
            for duration in args.durations:
                request = make_request(kind, Path(scratch), duration)
                one_request(  # warm-up (imports, ffmpeg)
                    request, True, args.encoder_idle, args.noise_stream, args.step_idle
                )
                arms: dict[str, list[dict[str, float]]] = {"plain": [], "plugin": []}
                for pair in range(args.pairs):
                    order = ("plain", "plugin") if pair % 2 == 0 else ("plugin", "plain")
                    for arm in order:
                        arms[arm].append(
                            one_request(
                                request,
                                arm == "plugin",
                                args.encoder_idle,
                                args.noise_stream,
                                args.step_idle,
                            )
                        )
                row: dict[str, Any] = {
                    "vllm_omni": importlib.metadata.version("vllm-omni"),
                    "kind": kind,
                    "duration_s": duration,
                    "noise_stream": args.noise_stream,
                }
                for metric in ("noise_on_request_thread_s", "window_s", "plan_to_first_step_s"):
                    for arm, runs in arms.items():
                        row[f"{arm}.{metric}"] = statistics.median(r[metric] for r in runs)
                        row[f"{arm}.{metric}.all"] = [round(r[metric], 4) for r in runs]
                plain_noise = row["plain.noise_on_request_thread_s"]
                row["plugin_noise_pct_of_plain"] = (
                    100 * row["plugin.noise_on_request_thread_s"] / plain_noise
                    if plain_noise
                    else None
                )
                for window in ("window_s", "plan_to_first_step_s"):
                    shrink = row[f"plain.{window}"] - row[f"plugin.{window}"]
                    row[f"{window}_shrink_pct_of_plain_noise"] = (
                        100 * shrink / plain_noise if plain_noise else None
                    )
                results.append(row)
                print(json.dumps({k: v for k, v in row.items() if not k.endswith(".all")}))
    summary = {
        "machine": f"{platform.machine()} {platform.processor()} torch {torch.__version__}",
        "threads": 1,
        "encoder_idle_s": args.encoder_idle,
        "step_idle_s": args.step_idle,
        "pairs": args.pairs,
        "rows": results,
    }
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
