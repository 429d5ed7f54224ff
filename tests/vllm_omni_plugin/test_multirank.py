"""Two ranks on the CPU (gloo): every rank receives what it received without the plugin, in the
native noise stream and in a named one (libm: both arms draw every noise tensor in it), on every
reviewed release (make test runs this file in each release's venv). Where upstream draws a Ref2VA
first output ahead itself (0.32.0rc1: rank 0 builds the noise parameters and broadcasts them), its
overlap is proven on each rank against its own serial path too (`--upstream-overlap`)."""

from __future__ import annotations

import json
import os
import socket
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import forked
import pytest
import torch
import torch.multiprocessing as mp
from release import PRENOISE_WORKER, UPSTREAM_AHEAD, UPSTREAM_WORKER, first_output_worker

STREAMS = ("native", "libm")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_main(rank: int, port: int, image: str, out: str) -> None:
    # vllm-omni's own init divides by the device count (0 on a CPU host): init torch first.
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank
    )
    from vllm_omni.diffusion.distributed import parallel_state

    parallel_state.init_distributed_environment(
        world_size=2, rank=rank, local_rank=rank, backend="gloo"
    )
    from prenoise.integrations.vllm_omni.settings import NEXT_OUTPUT_ENV, NOISE_STREAM_ENV
    from prenoise.integrations.vllm_omni.upstream_overlap import verify_upstream_overlap
    from prenoise.integrations.vllm_omni.verification import H3Request, verify_request

    os.environ[NEXT_OUTPUT_ENV] = "1"  # output 2 drawn ahead while output 1 denoises
    request = H3Request((Path(image),), seed=3, outputs=2)
    summary: dict[str, Any] = {}
    for stream in STREAMS:  # one spawn for all: the ranks' start-up is most of the cost
        os.environ[NOISE_STREAM_ENV] = stream
        result = verify_request(request).to_json()
        summary[stream] = {
            "verified": result["verified"],
            "summary": result["summary"],
            "noise_stream": result["noise_stream"],
            "drawn_on": result["arms"]["plugin_on"]["drawn_on"],
            "sha256": {name: entry["sha256"] for name, entry in result["fields"].items()},
        }
    if UPSTREAM_AHEAD:
        os.environ[NOISE_STREAM_ENV] = "native"
        overlap = verify_upstream_overlap(request)
        upstream = overlap.upstream.to_json()
        summary["upstream_overlap"] = {
            "verified": overlap.verified,
            "summary": overlap.summary(),
            "fields": len(upstream["fields"]),
            "drawn_on": upstream["arms"]["plugin_on"]["drawn_on"],
            "serial_drawn_on": upstream["arms"]["plugin_off"]["drawn_on"],
            "sha256": {name: entry["sha256"] for name, entry in upstream["fields"].items()},
        }
    Path(f"{out}.{rank}").write_text(json.dumps(summary))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_prepare_ahead_and_match_plugin_off(
    image_ref: Path, tmp_path: Path, vllm_forkserver: ForkServerContext
) -> None:
    out = str(tmp_path / "rank")
    # forked from the session's server (torch and vllm imported there once: `forked.py`), each
    # in the environment a spawned rank would have had
    args = (dict(os.environ), rank_main, free_port(), str(image_ref), out)
    mp.start_processes(forked.in_environ, args=args, nprocs=2, start_method="forkserver")
    noise = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")
    ranks = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    for stream in STREAMS:
        for rank in ranks:
            assert rank[stream]["verified"], rank[stream]["summary"]
            assert rank[stream]["noise_stream"] == stream
            # Rank 1 has no media plan of its own: it drew ahead from rank 0's broadcast plan
            # (0.32.0rc1: upstream's own worker draws the first output from rank 0's broadcast
            # noise parameters, prenoise the second).
            drawn_on = rank[stream]["drawn_on"]
            for name in noise:
                assert drawn_on[name].startswith(first_output_worker()), name
                assert drawn_on["output1." + name].startswith(PRENOISE_WORKER), name
        assert ranks[0][stream]["sha256"] == ranks[1][stream]["sha256"]
    if UPSTREAM_AHEAD:
        for rank in ranks:
            overlap = rank["upstream_overlap"]
            assert overlap["verified"], overlap["summary"]
            assert overlap["fields"] > 50  # every _build_denoise_inputs field of both outputs
            for name in noise:
                assert overlap["drawn_on"][name].startswith(UPSTREAM_WORKER), name
                assert not overlap["serial_drawn_on"][name].startswith(UPSTREAM_WORKER), name
        assert ranks[0]["upstream_overlap"]["sha256"] == ranks[1]["upstream_overlap"]["sha256"]
        assert ranks[0]["upstream_overlap"]["sha256"] == {
            name: digest
            for name, digest in ranks[0]["native"]["sha256"].items()
            if name in ranks[0]["upstream_overlap"]["sha256"]
        }
    else:
        assert all("upstream_overlap" not in rank for rank in ranks)
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":  # the streams differ here
        assert ranks[0]["native"]["sha256"][noise[0]] != ranks[0]["libm"]["sha256"][noise[0]]
