"""`torchrun … verify` across two hosts: every rank of both equals one process, each host its own.

The hosts are two network namespaces on a veth pair, each with a private tmpfs on `/dev/shm`
(`two_hosts.py`); each runs `torchrun --nnodes 2 --node-rank K --nproc-per-node 2`, rendezvous at
host 0's veth address, gloo over the veth. The recipe asks for host-shared noise, so each host's
local rank 0 creates that host's segments and the host's two ranks split its draws.

One 2-host run per noise stream (native, libm). The verdict (every rank's 9 field digests equal
rank 0's and rank 0's equal a single process in the same namespace) must be "equal", rank 0's
digests must equal a single-process preparation made here, and the ranks' logs must show two
hosts: ranks [0, 1] and [2, 3], two different `/dev/shm`s (neither this process's), segments
created by ranks 0 and 2 only, every stream drawn exactly once per host, in the recipe's stream.

These hosts had one host name, as two containers or namespaces on one machine do; host grouping
by host name put all four ranks on one host and rank 2 failed to map rank 0's segment
(`FileNotFoundError`). Hosts are now grouped by the shared-memory directory they see
(`prenoise.distributed.shm.shm_identity`), tested below too.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch
from two_hosts import Host, HostsUnavailable, run_on_hosts, two_hosts

from prenoise.distributed import shm
from prenoise.distributed.shm import leftover_segments, shm_identity
from prenoise.distributed.verification import field_digests
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
ENTRY = Path(__file__).with_name("_two_hosts_rank.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")
RUN_TIMEOUT_S = READY_CEILING_S
"""Per 2-host run (measured ~20 s on 2 busy cores): only a hang reaches it (`waits.py`); the
ranks' own waits give up at 60 s, and a host that fails ends the run at once."""
MASTER_PORT = "29500"  # host 0's namespace is fresh: nothing else listens there
STREAMS = ["native", "libm"]


# -- the pieces ---------------------------------------------------------------------------------
def write_recipe(workdir: Path, noise_stream: str) -> Path:
    """The tiny recipe in `noise_stream`, on 4 ranks with host-shared noise."""
    path = workdir / f"tiny-{noise_stream}.yaml"
    path.write_text(
        TINY.read_text()
        + f"noise_stream: {noise_stream}\n"
        + "parallel: {ranks: 4, host_shared_noise: true, timeout_s: 60}\n"
    )
    return path


def single_process_digests(recipe_path: Path) -> dict[str, Any]:
    """Digests of one serial preparation here, as `verify --json` writes them. One thread, as
    the ranks run (the encoders' convolutions sum in a thread-count-dependent order)."""
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(recipe_path.parent)
    torch.set_num_threads(1)
    try:
        recipe = load_recipe(recipe_path)
        pipeline = Ref2VAPipeline(Ref2VAModels.default(recipe.model))
        outputs, _ = pipeline.prepare_outputs(plan_request(recipe), "serial", keep_noise=True)
        digests = field_digests(outputs)
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
    as_json = {k: None if v is None else asdict(v) for k, v in digests.items()}
    return dict(json.loads(json.dumps(as_json)))


def torchrun_verify(host: Host, master: Host, recipe: Path, logs: Path) -> list[str]:
    """This host's half of the job: 2 ranks of 4, `prenoise verify` through the logging entry."""
    return [
        str(TORCHRUN), "--nnodes", "2", "--node-rank", str(host.node_rank),
        "--nproc-per-node", "2", "--master-addr", master.addr, "--master-port", MASTER_PORT,
        str(ENTRY), str(logs), "verify", "--recipe", str(recipe),
        "--json", str(logs / "verify.json"),
    ]  # fmt: skip


def read_rank_logs(logs: Path) -> dict[int, list[dict[str, Any]]]:
    """Each rank's events (see `_two_hosts_rank.py`)."""
    return {
        rank: [json.loads(line) for line in (logs / f"rank{rank}.jsonl").read_text().splitlines()]
        for rank in range(4)
    }


def check_each_host_drew_its_own(events: dict[int, list[dict[str, Any]]], stream: str) -> None:
    """Two hosts of two ranks, two private /dev/shm, each host's noise drawn by its own ranks."""
    hosts = {r: next(e for e in ev if e["event"] == "host") for r, ev in events.items()}
    assert [hosts[r]["host_ranks"] for r in range(4)] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [hosts[r]["local_rank"] for r in range(4)] == [0, 1, 0, 1]
    dev = [hosts[r]["shm_dev"] for r in range(4)]
    assert dev[0] == dev[1] != dev[2] == dev[3], dev
    assert os.stat("/dev/shm").st_dev not in dev  # neither host saw this process's /dev/shm
    creators = {r for r, ev in events.items() for e in ev if e["event"] == "create"}
    assert creators == {0, 2}  # each host's local rank 0
    drawn: dict[int, list[str]] = {}
    for ranks in ([0, 1], [2, 3]):
        draws = [e for r in ranks for e in events[r] if e["event"] == "draw"]
        names = [e["stream"] for e in draws]
        assert len(names) == len(set(names)) >= 3, names  # video, audio, conditions: once each
        assert all(any(e["rank"] == r for e in draws) for r in ranks)  # both ranks drew
        assert {e["noise_stream"] or "native" for e in draws} == {stream}
        drawn[ranks[0]] = sorted(names)
    assert drawn[0] == drawn[2]  # each host drew every stream for itself


# -- the tests ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[Host, Host]]:
    try:
        with two_hosts() as pair:
            yield pair
    except HostsUnavailable as exc:
        pytest.skip(f"two network namespaces cannot be made here: {exc}")


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Per stream: the recipe and its single-process digests (the reference video is written
    next to them, where the ranks read it: they run in the same directory)."""
    workdir = tmp_path_factory.mktemp("two-hosts")
    recipes = {stream: write_recipe(workdir, stream) for stream in STREAMS}
    return {stream: (path, single_process_digests(path)) for stream, path in recipes.items()}


@pytest.mark.parametrize("stream", STREAMS)
def test_two_hosts_prepare_the_single_process_inputs(
    hosts: tuple[Host, Host], references: dict[str, tuple[Path, dict]], stream: str, tmp_path: Path
) -> None:
    recipe, single = references[stream]
    before = set(leftover_segments())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    runs = run_on_hosts(
        {host: torchrun_verify(host, hosts[0], recipe, tmp_path) for host in hosts},
        recipe.parent,
        env,
        RUN_TIMEOUT_S,
        logs=tmp_path,
    )
    seconds = time.perf_counter() - start
    for run in runs:
        assert run.returncode == 0, f"{run.host.name} exit {run.returncode}:\n{run.output[-3000:]}"
    report = json.loads((tmp_path / "verify.json").read_text())
    print(f"{stream}: 2 hosts x 2 ranks verified in {seconds:.1f} s: {report['fields']}")
    assert report["equal"] and report["differences"] == [], report["differences"]
    assert report["world_size"] == 4 and report["host_shared_noise"]
    assert report["rng_state_unchanged"] == [True] * 4
    assert report["fields"] == single
    check_each_host_drew_its_own(read_rank_logs(tmp_path), stream)
    assert set(leftover_segments()) <= before


def test_the_named_stream_is_not_the_native_noise(
    references: dict[str, tuple[Path, dict]],
) -> None:
    """libm changes the noise the 2-host runs compare: the stream option is not a no-op."""
    (_, native), (_, libm) = references["native"], references["libm"]
    assert native["initial_video_noise"] != libm["initial_video_noise"]
    assert native["initial_audio_noise"] != libm["initial_audio_noise"]


# -- host grouping ------------------------------------------------------------------------------
def test_separate_shm_directories_are_separate_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same machine and host name, two shared-memory directories: two identities (the 2-host
    runs above show it for two private /dev/shm mounts: ranks [0, 1] and [2, 3])."""
    identities = []
    for name in ("a", "b", "a"):
        (tmp_path / name).mkdir(exist_ok=True)
        monkeypatch.setattr(shm, "SHM_DIR", tmp_path / name)
        identities.append(shm_identity())
    assert identities[0] != identities[1] and identities[0] == identities[2]
