"""torchrun's variables set wrongly are the user's error: one line naming the variable, exit 2.

Issue 42 (MEDIUM): `WORLD_SIZE=abc`, `WORLD_SIZE=2` without `RANK` or `MASTER_ADDR` were read
where they were used (`int(os.environ["RANK"])`, torch's env:// rendezvous), so `prenoise
generate` said "internal error … please report it" (exit 70); `WORLD_SIZE=0`/`-1` ran one
process as if unset, and a rank out of range waited on a rendezvous for ranks that never come.
Now `guards.torchrun_env` reads them all in one place, before the torchrun decision, and both
the CLI and `distributed.group` take them from it. One CLI case runs the real CLI (`python -m
prenoise`) in a subprocess, a timeout guarding against a hang (no timing is asserted); the others
call the same `main` in this process with the variables set and any rendezvous made to fail at
once (a fresh interpreter per case was most of this file's time).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prenoise.guards.env import EnvVarError
from prenoise.guards.torchrun_env import TorchrunEnv, TorchrunEnvError, torchrun_env
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
JOB = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
"""A complete environment of rank 0 of a 2-rank job."""
TORCHRUN_NAMES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")


def _cli(command: list[str], variables: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (*TORCHRUN_NAMES, "MASTER_PORT")}
    env = {k: v for k, v in env.items() if k != "PRENOISE_DEBUG"}
    env.update(variables, COLUMNS="300", OMP_WAIT_POLICY="PASSIVE", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "prenoise", *command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )


def _cli_here(
    command: list[str],
    variables: dict[str, str],
    cwd: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, list[str]]:
    """`_cli` through the CLI's `main` in this process (the same `main` `python -m prenoise`
    runs, the variables set as there): its exit status and output lines. A rendezvous fails at
    once instead of waiting for ranks that never come: code that no longer refuses first fails
    here (exit 70, or work done), never hangs this process."""
    import torch.distributed as dist

    from prenoise.cli.commands import main

    for name in (*TORCHRUN_NAMES, "MASTER_PORT", "PRENOISE_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_rendezvous(*args: object, **kwargs: object) -> None:
        raise AssertionError("a rendezvous was started: the variables were not refused first")

    monkeypatch.setattr(dist, "init_process_group", no_rendezvous)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    returncode = main(command)
    captured = capsys.readouterr()
    return returncode, (captured.out + captured.err).strip().splitlines()


@pytest.mark.parametrize(
    ("variables", "command", "said"),
    [
        ({"WORLD_SIZE": "abc"}, "generate", "WORLD_SIZE='abc' is not valid"),
        ({"WORLD_SIZE": "0"}, "generate", "WORLD_SIZE='0' is not valid"),  # ran as one process
        ({"WORLD_SIZE": "2"}, "verify", "RANK is not set, but WORLD_SIZE='2'"),
        ({**JOB, "MASTER_ADDR": ""}, "bench", "MASTER_ADDR is not set, but WORLD_SIZE='2'"),
        (
            {**JOB, "RANK": "2"},
            "generate",
            "RANK='2' is not valid (accepted: an integer from 0 to 1 for WORLD_SIZE=2",
        ),
        ({**JOB, "LOCAL_RANK": "x"}, "verify", "LOCAL_RANK='x' is not valid"),
    ],
)
def test_a_wrong_torchrun_variable_is_one_line_exit_2_before_any_work(
    variables: dict[str, str],
    command: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = {"generate": ["--out", "o.mp4"], "verify": ["--json", "v.json"]}.get(command, [])
    argv = [command, "--recipe", str(TINY), *output]
    if variables == {"WORLD_SIZE": "abc"}:  # the real CLI once, as a user runs it
        proc = _cli(argv, variables, tmp_path)
        returncode, lines = proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()
    else:
        returncode, lines = _cli_here(argv, variables, tmp_path, monkeypatch, capsys)
    assert returncode == 2, (returncode, lines[-5:])
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert said in lines[0] and "unset WORLD_SIZE to run in one process" in lines[0], lines[0]
    assert "internal error" not in lines[0]
    assert list(tmp_path.iterdir()) == []  # no stage ran, nothing written


def test_the_variables_are_checked_in_one_place() -> None:
    assert torchrun_env({}) == TorchrunEnv()
    assert torchrun_env({"WORLD_SIZE": " ", "RANK": "abc"}) == TorchrunEnv()  # not torchrun's
    assert torchrun_env({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0"}) == TorchrunEnv()
    job = torchrun_env({**JOB, "RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
    assert job == TorchrunEnv(4, 3, 1, 2, "127.0.0.1", 29500) and job.distributed
    assert torchrun_env({**JOB, "LOCAL_RANK": "1"}).local_rank == 1
    assert issubclass(TorchrunEnvError, EnvVarError)  # the CLI's one-line user errors
    for wrong, named in [
        ({"WORLD_SIZE": "-1"}, "WORLD_SIZE='-1'"),
        ({"WORLD_SIZE": "2.0"}, "WORLD_SIZE='2.0'"),
        ({"WORLD_SIZE": "1", "RANK": "3"}, "RANK='3' is not valid (accepted: 0 for WORLD_SIZE=1"),
        ({**JOB, "RANK": "-1"}, "RANK='-1'"),
        ({**JOB, "MASTER_PORT": "99999"}, "MASTER_PORT='99999'"),
        ({**JOB, "MASTER_PORT": ""}, "MASTER_PORT is not set"),
        ({**JOB, "LOCAL_WORLD_SIZE": "3"}, "LOCAL_WORLD_SIZE='3'"),
        (
            {**JOB, "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "1"},
            "LOCAL_RANK='1' is not valid (accepted: 0 for LOCAL_WORLD_SIZE=1",
        ),
        ({"WORLD_SIZE": str(2**40)}, "WORLD_SIZE="),
    ]:
        with pytest.raises(TorchrunEnvError, match="^" + re.escape(named)):
            torchrun_env(wrong)
