"""Two ranks on the CPU (gloo): every rank receives what it received without the plugin."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp


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
    from prenoise.integrations.vllm_omni.verification import H3Request, verify_request

    result = verify_request(H3Request((Path(image),), seed=3, outputs=2)).to_json()
    summary: dict[str, Any] = {
        "equal": result["equal"],
        "summary": result["summary"],
        "drawn_on": result["arms"]["plugin_on"]["drawn_on"],
        "sha256": {name: entry["sha256"] for name, entry in result["fields"].items()},
    }
    Path(f"{out}.{rank}").write_text(json.dumps(summary))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_prepare_ahead_and_match_plugin_off(image_ref: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "rank")
    mp.spawn(rank_main, args=(free_port(), str(image_ref), out), nprocs=2)
    ranks = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    for rank in ranks:
        assert rank["equal"], rank["summary"]
        # Rank 1 has no media plan of its own: it drew ahead from rank 0's broadcast plan.
        for name in ("initial_video_noise", "initial_audio_noise", "visual_condition_noise"):
            assert rank["drawn_on"][name].startswith("prenoise-vllm-omni"), name
    assert ranks[0]["sha256"] == ranks[1]["sha256"]
