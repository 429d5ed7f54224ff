"""Every rank of a replica draws as upstream does: two ranks, each with its own prenoise worker.

In SGLang's multi-rank replica every rank runs the latent preparation stage and draws the same
initial noise itself (and the Denoising stage's condition noise), while the text, visual and
audio encodes run on an owner rank and are broadcast. Here two real processes (`_h3_rank`) join
SGLang's own parallel state on the CPU (`maybe_init_distributed_environment_and_model_parallel`,
gloo on loopback, the environment variables upstream's launcher sets; a replica group of 2),
each with the plugin loaded by SGLang's loader, and run t2va, fl2va (both keyframes) and ref2va
(one image reference) requests with the plugin off, then on: the encoders' outputs reach rank 1
through upstream's replica broadcast (`minimax_h3_replica_broadcast_extra`, and upstream's
`MiniMaxH3VisualEncodingStage._forward` for the visual rows); no text encoder runs (the owner's
payload is the harness's). Asserted, byte for byte: on each rank, plugin on equals off (every
tensor the Denoising stage receives, every DiT input, the outputs, the global RNG); rank 0
equals rank 1; both equal this process's single-process, plugin-off run of the same requests;
each rank's noise was prepared on a `prenoise-sglang` worker of its own process and served.
Both ranks record their noise (`PRENOISE_NOISE_RECORD`): one group, the replica's, the same
request names, and `rollout-check` finds the ranks agree (a digest changed on one rank: found).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _h3_harness import run, same
from _h3_rank import IMAGES_ENV, OUT_ENV, make, replica_encoders, requests

from prenoise.integrations.sglang import plugin
from prenoise.observe import noise_record
from prenoise.verify.rollout_noise import check_rollout, load_records
from waits import before, deadline

WORLD = 2


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("h3_ranks")
    paths = []
    for name, size, colour in (
        ("first", (200, 112), (10, 200, 30)),
        ("last", (160, 96), (200, 20, 30)),
    ):
        path = folder / f"{name}.png"
        Image.new("RGB", size, colour).save(path)
        paths.append(str(path))
    return paths


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ranks(images: list[str], folder: Path) -> list[dict[str, Any]]:
    """Both ranks' results; a rank that fails stops the other (it would wait in a collective)."""
    root = Path(__file__).resolve().parents[2]
    port = str(_free_port())
    (folder / "records").mkdir()
    processes = []
    for rank in range(WORLD):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, HF_HUB_OFFLINE="1",
                   **{OUT_ENV: str(folder / f"rank{rank}.pt"),
                      noise_record.RECORD_ENV: str(folder / "records"),
                      IMAGES_ENV: os.pathsep.join(images), plugin.ENABLE_ENV: "1"})  # fmt: skip
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   str(Path(__file__).parent / "_h3_rank.py")]  # fmt: skip
        with (folder / f"rank{rank}.log").open("w") as log:  # the child keeps its own descriptor
            processes.append(subprocess.Popen(command, cwd=root, env=env, stdout=log,
                                              stderr=subprocess.STDOUT))  # fmt: skip
    at = deadline()
    try:
        while before(at) and any(p.poll() is None for p in processes):
            if any(p.poll() not in (None, 0) for p in processes):
                break
            time.sleep(0.5)
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
            p.wait()
    logs = {r: (folder / f"rank{r}.log").read_text(errors="replace")[-3000:] for r in range(WORLD)}
    assert [p.returncode for p in processes] == [0] * WORLD, logs
    return [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.mark.slow
def test_every_rank_draws_as_upstream(
    h3: Any, images: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranks = _ranks(images, tmp_path)
    assert [r["rank"] for r in ranks] == list(range(WORLD))
    assert len({r["pid"] for r in ranks} | {os.getpid()}) == WORLD + 1
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    encode = replica_encoders(h3)  # a replica of one rank: rank 0 encodes, nothing broadcast
    for name, spec in requests(images).items():
        single = run(h3, make(h3, spec), before_latents=encode)
        single.pop("served_ptrs")
        assert any(k.startswith("dit[") for k in single), name
        for r in ranks:
            off, on = r[name]["0"], r[name]["1"]
            assert same(off["fields"], on["fields"]) == [], (name, r["rank"])
            assert same({"rng": r["rng_start"]}, {"rng": on["fields"]["rng"]}) == [], name
            assert same({**single, "rng": on["fields"]["rng"]}, on["fields"]) == [], name
            assert off["draws"] == [] and off["serves"] == []
            labels = [label for label, _seed, _thread in on["draws"]]
            assert labels[:2] == ["initial_video_noise", "initial_audio_noise"], labels
            assert all(t.startswith("prenoise-sglang") for _l, _s, t in on["draws"])
            assert all(served for _what, served in on["serves"]) and on["serves"]
        # the ranks' global RNG states differ from the start (each checked unmoved above)
        rank0, rank1 = ({k: v for k, v in r[name]["1"]["fields"].items() if k != "rng"}
                        for r in ranks)  # fmt: skip
        assert same(rank0, rank1) == [], name
        drawn0, drawn1 = ([d[:2] for d in r[name]["1"]["draws"]] for r in ranks)
        assert drawn0 == drawn1, name  # the same draws (label, seed), each on its own worker
    _records_agree(tmp_path / "records", len(requests(images)))


def _records_agree(folder: Path, count: int) -> None:
    """Each rank's records (plugin-on arms only: off, nothing records): one group (the
    replica), the same request names and sites on both ranks; rollout-check clean; one rank's
    digest changed: a rank disagreement."""
    import json

    files = sorted(folder.glob("noise-*.jsonl"))
    assert len(files) == WORLD
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    assert {r["group"] for r in lines} == {"replica:0,1"}
    assert {r["world_size"] for r in lines} == {WORLD}
    per_rank = [sorted((r["request"], r["site"]) for r in lines if r["rank"] == k) for k in (0, 1)]
    assert per_rank[0] == per_rank[1] and len({q for q, _ in per_rank[0]}) == count
    assert {q for q, _ in per_rank[0]} == {f"replica:0,1#{n}" for n in range(count)}
    assert "h3.condition.0" in {site for _q, site in per_rank[0]}
    report = check_rollout(load_records(folder))
    assert report.clean and report.groups == 1 and report.ranks == WORLD, report.summary()
    tampered = [dict(r) for r in lines]
    one = next(r for r in tampered if r["rank"] == 1 and r["site"] == "h3.condition.0")
    one["digest"] = "0" * 64
    other = folder.parent / "tampered"
    other.mkdir()
    for k in (0, 1):
        rank = [json.dumps(r) for r in tampered if r["rank"] == k]
        (other / f"noise-host-{k}.jsonl").write_text("\n".join(rank) + "\n")
    found = check_rollout(load_records(other))
    assert found.counts == {"rank_disagreement": 1}, found.summary()
