"""Queue benchmark of `prenoise serve`: time to first step and total time, prepare-ahead 0 vs 1.

For each case, one process loads the models once and, per arm, starts the real service (uvicorn
on 127.0.0.1, a fresh app) with `--prepare-ahead N`, runs one warm-up request, then submits a
queue of requests at once (seeds 1..R) and polls until all are done. Arms alternate when
repeated. Every arm's MP4s are downloaded and compared: same seed, same bytes across arms.

    .venv/bin/python benchmarks/serve.py --case demo --requests 8 --repeats 2
    .venv/bin/python benchmarks/serve.py --case large --requests 4 --steps 8

`demo` is recipes/ref2va-demo.yaml; `large` is the same models at 5 s 1344x768 with a 1 s
1344x768 synthetic reference video.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import torch
import uvicorn

from prenoise.ref2va.cli_options import load_models
from prenoise.ref2va.config import Recipe, load_recipe
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.serve import ServeSettings, create_app

DEMO = Path("recipes/ref2va-demo.yaml")


def case_recipe(case: str, steps: int | None) -> Recipe:
    """The recipe of a benchmark case (`demo` or `large`)."""
    overrides: dict[str, Any] = {} if steps is None else {"steps": steps}
    if case == "large":
        ref = "outputs/serve-bench/reference-1s-1344x768.mp4"
        overrides.update(
            name="ref2va-serve-large",
            duration=5.0,
            frames=None,
            width=1344,
            height=768,
            short_edge=None,
            references=[
                {
                    "kind": "video",
                    "path": ref,
                    "synthetic": {"seconds": 1.0, "width": 1344, "height": 768},
                }
            ],
        )
    return load_recipe(DEMO, **overrides)


class Server:
    """The service on 127.0.0.1 (free port) in a thread."""

    def __init__(self, settings: ServeSettings, pipeline: Ref2VAPipeline) -> None:
        config = uvicorn.Config(
            create_app(settings, pipeline), host="127.0.0.1", port=0, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(120)


def wait_all(client: httpx.Client, ids: list[str], timeout: float) -> list[dict[str, Any]]:
    """Poll every job until it is finished (bounded by `timeout`)."""
    deadline = time.monotonic() + timeout
    views: dict[str, dict[str, Any]] = {}
    while len(views) < len(ids):
        for job_id in ids:
            if job_id not in views:
                view = client.get(f"/v1/videos/{job_id}").json()
                if view["state"] in ("done", "failed", "cancelled"):
                    views[job_id] = view
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ids) - len(views)} jobs unfinished")
        time.sleep(0.05)
    return [views[i] for i in ids]


def run_arm(
    pipeline: Ref2VAPipeline, recipe: Recipe, ahead: int, requests: int, timeout: float
) -> dict[str, Any]:
    """One queue of `requests` jobs on a fresh service with `prepare_ahead = ahead`."""
    with tempfile.TemporaryDirectory() as out:
        settings = ServeSettings(recipe=recipe, output_dir=Path(out), prepare_ahead=ahead)
        with Server(settings, pipeline) as client:
            warm = client.post("/v1/videos", json={"seed": 999}).json()["id"]
            wait_all(client, [warm], timeout)
            t0 = time.perf_counter()
            ids, sent = [], []
            for seed in range(1, requests + 1):
                sent.append(time.perf_counter() - t0)
                response = client.post("/v1/videos", json={"seed": seed})
                response.raise_for_status()
                ids.append(response.json()["id"])
            views = wait_all(client, ids, timeout)
            if any(v["state"] != "done" for v in views):
                raise RuntimeError(f"jobs failed: {[v['error'] for v in views]}")
            digests = [
                hashlib.sha256(client.get(v["content"][0]).content).hexdigest() for v in views
            ]
    timings = [v["timings"] for v in views]
    first_step = [t["first_step"] for t in timings]
    start_to_step = [t["first_step"] - t["queued"] for t in timings]
    makespan = max(s + t["total"] for s, t in zip(sent, timings, strict=True))
    return {
        "prepare_ahead": ahead,
        "requests": requests,
        "total_s": makespan,
        "first_step_s": first_step,
        "start_to_first_step_s": start_to_step,
        "prepare_wait_s": [t["prepare_wait"] for t in timings],
        "prepare_s": [t["prepare"] for t in timings],
        "denoise_s": [t["denoise"] for t in timings],
        "decode_s": [t["decode"] for t in timings],
        "sha256": digests,
    }


def summary_rows(results: list[dict[str, Any]]) -> list[str]:
    """Markdown rows: one per arm run (medians over the queue; request 1 shown separately)."""
    rows = [
        "| prepare-ahead | total s | first step of req 1 s | first step of req R s | "
        "executor start → first step s (median) | prepare s (median) | waited for prep s "
        "(median) | denoise s (median) | decode s (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    med = statistics.median
    for r in results:
        rows.append(
            f"| {r['prepare_ahead']} | {r['total_s']:.2f} | {r['first_step_s'][0]:.2f} | "
            f"{r['first_step_s'][-1]:.2f} | {med(r['start_to_first_step_s']):.3f} | "
            f"{med(r['prepare_s']):.3f} | {med(r['prepare_wait_s']):.3f} | "
            f"{med(r['denoise_s']):.3f} | {med(r['decode_s']):.3f} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("demo", "large"), default="demo")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--steps", type=int, help="override the recipe's steps")
    parser.add_argument("--arms", type=int, nargs="+", default=[0, 1], help="prepare-ahead values")
    parser.add_argument("--repeats", type=int, default=1, help="alternating repetitions")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--json", type=Path, help="write every arm's numbers here")
    args = parser.parse_args()

    recipe = case_recipe(args.case, args.steps)
    pipeline = Ref2VAPipeline(load_models(recipe), device=recipe.device)
    results: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        arms = args.arms if rep % 2 == 0 else list(reversed(args.arms))
        for ahead in arms:
            print(f"{args.case}: repeat {rep + 1}, prepare-ahead {ahead} …", file=sys.stderr)
            results.append(run_arm(pipeline, recipe, ahead, args.requests, args.timeout))
    digests = {tuple(r["sha256"]) for r in results}
    geo = recipe.geometry()
    meta = {
        "case": args.case,
        "recipe": recipe.name,
        "frames": recipe.num_frames(),
        "size": recipe.size(),
        "latent": [geo.T, geo.h, geo.w],
        "steps": recipe.steps,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "identical_bytes_across_arms": len(digests) == 1,
    }
    print(json.dumps(meta))
    print("\n".join(summary_rows(results)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "runs": results}, indent=2))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
