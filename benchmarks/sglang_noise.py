"""Request-thread noise time of SGLang's MiniMax-H3 path, plugin off vs on (not a timed test).

Run in the environment that has sglang 0.5.23 and prenoise (`.venv-sglang`):

    .venv-sglang/bin/python benchmarks/sglang_noise.py --json outputs/bench/sglang_noise.json

Per request kind (t2va; fl2va with a first and a last keyframe; ref2va with one 1920x1080 image
reference, which upstream resizes to 3648x2048) at 1344x768 for 5, 10 and 15 s, one request
runs through upstream's real pre-queue hook, latent preparation, timestep preparation and
denoising stages (one step, a fake DiT; the plugin loaded by SGLang's own loader), with a
stand-in encode (upstream's visual encoding with a fake VAE, then a sleep of `--encode-seconds`)
where the encoders run. Timed on the request thread, per arm: upstream's
`_prepare_denoise_state_from_plan` (the initial video and audio noise; the plugin serves it
there) and `minimax_h3_imgvid_cond_noise_aug_rows` (the visual-condition noise, drawn and mixed;
the plugin mixes its prepared noise there), each call's wall time through SGLang's hooks. The
two arms alternate, `--repeats` times; the medians are reported, with every run in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from prenoise.integrations.sglang import harness, plugin

SECONDS = (5.0, 10.0, 15.0)
KINDS = ("t2va", "fl2va", "ref2va")


@contextmanager
def _timed(owner: Any, name: str, spent: list[float]) -> Iterator[None]:
    """Wrap `owner.name` (already SGLang's hooked function) to add each call's wall time."""
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _request(h3: Any, kind: str, seconds: float, files: dict[str, str]) -> Any:
    conditions: list[dict[str, Any]] | None = None
    aspect = "16:9"
    if kind == "fl2va":
        conditions = [
            {"type": "image", "uri": files["kf_first"], "role": "keyframe", "frame_index": 0},
            {"type": "image", "uri": files["kf_last"], "role": "keyframe", "frame_index": -1},
        ]
        aspect = "auto"
    elif kind == "ref2va":
        conditions = [{"type": "image", "uri": files["ref_1080p"], "role": "reference"}]
    return harness.make_request(
        h3, 7, 768, seconds, task=kind, conditions=conditions, aspect_ratio=aspect, steps=1
    )


def _one(h3: Any, kind: str, seconds: float, files: dict[str, str], on: bool, encode_s: float):
    """One request; (initial noise s, condition noise s) on the request thread."""
    os.environ[plugin.ENABLE_ENV] = "1" if on else "0"
    encode = harness.encode_visual(h3, {}) if kind != "t2va" else None

    def encoders(batch: Any) -> None:
        if encode is not None:
            encode(batch)
        time.sleep(encode_s)

    condition_noise = __import__(
        f"{harness.H3_MODULE}.condition_noise", fromlist=["minimax_h3_imgvid_cond_noise_aug_rows"]
    )
    initial: list[float] = []
    conditions: list[float] = []
    req = _request(h3, kind, seconds, files)
    with (
        _timed(h3.LatentStage, "_prepare_denoise_state_from_plan", initial),
        _timed(condition_noise, "minimax_h3_imgvid_cond_noise_aug_rows", conditions),
        harness.recorded_serves() as serves,
    ):
        harness.capture(h3, req, before_latents=encoders)
    if on and ("initial", True) not in serves:
        raise SystemExit(f"{kind} {seconds:g}s: the plugin did not serve the initial noise")
    return sum(initial), sum(conditions)


def _images(folder: Path) -> dict[str, str]:
    from PIL import Image

    files = harness.synthetic_images(folder)
    path = folder / "ref_1080p.png"
    Image.new("RGB", (1920, 1080), (40, 90, 160)).save(path)
    files["ref_1080p"] = str(path)
    return files


def main(argv: list[str] | None = None) -> int:
    """Run the table; print it and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternating off/on pairs")
    parser.add_argument("--encode-seconds", type=float, default=1.5, help="stand-in encode")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--seconds", default=",".join(f"{s:g}" for s in SECONDS))
    parser.add_argument("--json", help="write every run here")
    args = parser.parse_args(argv)
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    say("importing sglang…")
    h3 = harness.load_h3()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        files = _images(Path(scratch))
        for kind in args.kinds.split(","):
            for seconds in (float(s) for s in args.seconds.split(",")):
                _one(h3, kind, seconds, files, True, 0.0)  # warm-up, untimed
                runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
                for _ in range(args.repeats):
                    for arm in ("off", "on"):
                        runs[arm].append(
                            _one(h3, kind, seconds, files, arm == "on", args.encode_seconds)
                        )
                row = {"kind": kind, "seconds": seconds, "runs": runs}
                for arm in ("off", "on"):
                    row[f"{arm}_initial_ms"] = 1e3 * statistics.median(i for i, _ in runs[arm])
                    row[f"{arm}_conditions_ms"] = 1e3 * statistics.median(c for _, c in runs[arm])
                rows.append(row)
                say(
                    f"{kind:6} {seconds:4.0f}s  initial {row['off_initial_ms']:7.1f} -> "
                    f"{row['on_initial_ms']:6.1f} ms   conditions {row['off_conditions_ms']:7.1f}"
                    f" -> {row['on_conditions_ms']:6.1f} ms"
                )
    machine = {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }
    print("| kind | seconds | initial noise off -> on (ms) | condition noise off -> on (ms) |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['kind']} | {row['seconds']:g} | {row['off_initial_ms']:.1f} -> "
            f"{row['on_initial_ms']:.1f} | {row['off_conditions_ms']:.1f} -> "
            f"{row['on_conditions_ms']:.1f} |"
        )
    print(f"machine: {machine}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
