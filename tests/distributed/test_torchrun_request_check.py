"""Under torchrun, a request the single process refuses is refused before any rank loads a model.

The defect: `torchrun … -m prenoise generate|verify|bench` checked the request (memory budget,
media caps) on rank 0 only when resolving it, after every rank had loaded its models; rank 0 then
exited 2 and the others 1, each with its own line. Now rank 0 plans the request (`plan_request`,
the single process's check) once the process group is up and broadcasts the plan or the refusal
(`broadcast_request`): every rank ends with the single process's one line (local rank 0 prints
it) and exit 2, nothing written.

The in-process tests run `main` as one rank of a 2-rank job with the collectives faked: the check
(rank 0) or the verdict (other ranks), then the model loading, which must not happen.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from progress_lines import torchrun_stages

from prenoise.cli.commands import EXIT_USAGE, _user_errors, main
from prenoise.distributed import commands as distributed_commands
from prenoise.distributed.group import DistContext
from prenoise.distributed.request import REQUEST_REFUSALS, ResolvedRequest
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.media.caps import MediaError
from prenoise.ref2va.request_plan import plan_request
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
TOO_BIG = ["generate", "--recipe", str(TINY), "--memory-budget", "1KiB", "--out", "new/out.mp4"]


class ModelsLoaded(BaseException):
    """Raised where a rank would load its models (past `main`'s handlers)."""


class FakeJob:
    """One rank of a 2-rank job in this process: what it broadcast, its barriers, the exit
    handlers it registered (not run here: this process is pytest)."""

    def __init__(self, rank: int, local_rank: int, verdict: Any = None) -> None:
        self.rank, self.local_rank, self.verdict = rank, local_rank, verdict
        self.broadcast: list[Any] = []
        self.barriers = 0
        self.at_exit: list[tuple[Any, ...]] = []

    def init_distributed(self, timeout_s: float, device: str = "cpu") -> DistContext:
        return DistContext(
            self.rank, 2, self.local_rank, [0, 1], torch.device("cpu"), "gloo", timeout_s, None
        )

    def broadcast_object_list(self, payload: list[Any], src: int = 0, group: Any = None) -> None:
        if self.rank != 0:
            payload[0] = self.verdict  # what rank 0 sent
        self.broadcast.append(list(payload))

    def barrier(self, group: Any = None) -> None:
        self.barriers += 1

    def register(self, *call: Any) -> None:
        self.at_exit.append(call)


def _as_rank(
    monkeypatch: pytest.MonkeyPatch, rank: int, local_rank: int, verdict: Any = None
) -> FakeJob:
    job = FakeJob(rank, local_rank, verdict)
    env = {"WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(local_rank)}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")  # a complete torchrun environment
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(distributed_commands, "init_distributed", job.init_distributed)
    monkeypatch.setattr(dist, "broadcast_object_list", job.broadcast_object_list)
    monkeypatch.setattr(dist, "barrier", job.barrier)
    monkeypatch.setattr(distributed_commands.atexit, "register", job.register)
    monkeypatch.setattr(distributed_commands, "sweep_stale_segments", lambda: None)

    def load(*_args: object, **_kwargs: object) -> None:
        raise ModelsLoaded

    monkeypatch.setattr(distributed_commands.Ref2VAModels, "default", load)
    monkeypatch.setattr(distributed_commands.Ref2VAModels, "from_checkpoint", load)
    return job


def test_the_refusals_are_the_single_process_user_errors() -> None:
    """What the ranks end with 2 the single process ends with 2 (`main`'s one-line errors)."""
    assert set(REQUEST_REFUSALS) <= set(_user_errors())
    assert distributed_commands.EXIT_USAGE == EXIT_USAGE


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def test_rank_0_refuses_with_the_single_process_line_before_any_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(TOO_BIG) == 2
    single = capsys.readouterr()
    assert single.out.startswith("error: this request (") and single.out.count("\n") == 1
    job = _as_rank(monkeypatch, 0, 0)
    assert main(TOO_BIG) == 2  # ModelsLoaded would propagate
    assert capsys.readouterr() == single  # the same one line, no progress (no stage started)
    text = single.out.removeprefix("error: ").rstrip("\n")
    assert job.broadcast == [[(True, text)]]  # the verdict the other ranks act on
    assert job.barriers == 1  # no rank leaves before every host's line is out
    # torchrun's SIGTERM, once the first rank has left, ends this one with 2 all the same
    assert job.at_exit == [(signal.signal, signal.SIGTERM, signal.SIG_IGN)]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("local_rank", "printed"), [(1, ""), (0, "error: too big [1KiB]\n")])
def test_the_other_ranks_exit_2_when_rank_0_refused(
    local_rank: int,
    printed: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rank 1 on rank 0's host prints nothing; on another host (local rank 0) it prints the line."""
    job = _as_rank(monkeypatch, 1, local_rank, verdict=(True, "too big [1KiB]"))
    assert main(["verify", "--recipe", str(TINY), "--json", "new/v.json"]) == 2
    assert capsys.readouterr() == (printed, "")
    assert job.barriers == 1 and len(job.at_exit) == 1
    assert list(tmp_path.iterdir()) == []


def test_an_accepted_request_goes_on_to_load_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _as_rank(monkeypatch, 0, 0)
    with pytest.raises(ModelsLoaded):
        main(["bench", "--recipe", str(TINY), "--quiet"])
    ((request,),) = job.broadcast  # the plan, sent before any rank loads a model
    assert isinstance(request, ResolvedRequest) and request.plan.recipe.name == "ref2va-tiny"
    assert job.barriers == 0 and job.at_exit == []


def test_torchrun_refuses_a_reference_over_the_cap_before_loading_models(tmp_path: Path) -> None:
    """The end-to-end refusal: 2 ranks, the single process's line once, both ranks exit 2, no
    `load models` stage, nothing written."""
    with pytest.raises(MediaError) as caught:  # what one process says (it writes the recipe's
        plan_request(load_recipe(TINY, limits={"max_reference_frames": 1}))  # synthetic input)
    inputs = sorted(tmp_path.iterdir())
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", "-m", "prenoise", "verify",
         "--recipe", str(TINY), "--max-reference-frames", "1", "--json", "new/verify.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=READY_CEILING_S, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert proc.stdout == f"error: {caught.value}\n", proc.stdout + proc.stderr[-3000:]
    assert torchrun_stages(proc.stderr, "verify") == []  # not even `load models`
    exits = [row.split()[2] for row in proc.stderr.splitlines() if "exitcode  :" in row]
    assert exits == ["2", "2"], proc.stderr[-3000:]
    frames = [row for row in proc.stderr.splitlines() if row.lstrip().startswith('File "')]
    assert all("/torch/" in row or "bin/torchrun" in row for row in frames), frames  # torchrun's
    assert sorted(tmp_path.iterdir()) == inputs == [tmp_path / "tiny-reference.mp4"]
