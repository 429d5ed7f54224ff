"""Every option of `generate|verify|bench` is honoured under torchrun or refused before any work.

The class behind `torchrun … generate --prepare-next-output` (and `verify --pairs`, `bench
--full|--encoder-threads|--trace-dir`) running as if the option were not there: the torchrun path
is other code than the single process's, and nothing made it read every option. The decision
table is `prenoise.cli.torchrun_options`; these tests hold it to the parser's real options and
check that a refusal is one line on stderr, exit 2, before the ranks' code runs, nothing written.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed

from prenoise.cli import torchrun_options
from prenoise.cli.commands import main
from prenoise.cli.parser import build_parser
from prenoise.cli.torchrun_options import (
    DISTRIBUTED_COMMANDS,
    HONOURED,
    REFUSED,
    REQUEST_OPTIONS,
    command_parser,
    refusal,
)
from prenoise.distributed import commands as distributed_commands
from prenoise.ref2va.cli_options import add_request_arguments
from prenoise.ref2va.config import RecipeError, load_recipe
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
TORCHRUN_ENV = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
"""What torchrun sets for a 2-rank job, besides each rank's own RANK and LOCAL_RANK."""

# Each refused option with a value away from its default; what the refused run would have written.
REFUSED_RUNS: dict[tuple[str, str], list[str]] = {
    ("generate", "prepare_next_output"): ["--prepare-next-output", "--out", "new/out.mp4"],
    ("verify", "pairs"): ["--pairs", "2", "--json", "new/verify.json"],
    ("bench", "full"): ["--full", "--json", "new/bench.json"],
    ("bench", "trace_dir"): ["--trace-dir", "new/traces"],
}


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {action.dest for action in parser._actions}


@pytest.fixture()
def torchrun_rank(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[argparse.Namespace]:
    """Rank 0 of a 2-rank torchrun job, in `tmp_path`; the distributed commands are replaced by a
    recorder (a refused run must never reach them)."""
    for name, value in {**TORCHRUN_ENV, "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    ran: list[argparse.Namespace] = []

    def record(args: argparse.Namespace) -> int:
        ran.append(args)
        return 0

    monkeypatch.setattr(distributed_commands, "run_distributed", record)
    return ran


def test_every_option_of_the_distributed_commands_has_a_torchrun_decision() -> None:
    parser = build_parser()
    for command in DISTRIBUTED_COMMANDS:
        options = _dests(command_parser(parser, command))
        honoured, refused = HONOURED[command], set(REFUSED[command])
        assert not honoured & refused, (command, honoured & refused)
        undecided = options - honoured - refused
        assert not undecided, f"{command}: no torchrun decision for {sorted(undecided)}"
        assert honoured | refused <= options, (command, (honoured | refused) - options)
    request = argparse.ArgumentParser()
    add_request_arguments(request)
    assert _dests(request) - {"help"} == REQUEST_OPTIONS
    assert {(c, o) for c in REFUSED for o in REFUSED[c]} == set(REFUSED_RUNS)


def test_the_docs_list_every_refused_option() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "distributed.md").read_text()
    table = docs.split("## Options under torchrun", 1)[1].split("\n## ", 1)[0]
    for command, refused in REFUSED.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{command}` |"))
        for dest in refused:
            assert f"`--{dest.replace('_', '-')}" in row.rsplit(" | ", 1)[1], (command, dest)


def test_an_option_added_without_a_decision_is_refused_when_given() -> None:
    parser = build_parser()
    command_parser(parser, "verify").add_argument("--new-knob", type=int, default=3)
    assert refusal(parser, parser.parse_args(["verify", "--recipe", str(TINY)])) is None
    given = parser.parse_args(["verify", "--recipe", str(TINY), "--new-knob", "4"])
    assert refusal(parser, given) == (
        "--new-knob is not supported under torchrun (verify): "
        "run prenoise verify --new-knob in one process"
    )


@pytest.mark.parametrize(("command", "dest"), list(REFUSED_RUNS))
def test_a_refused_option_stops_before_any_work(
    command: str,
    dest: str,
    torchrun_rank: list[argparse.Namespace],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [command, "--recipe", str(TINY), *REFUSED_RUNS[(command, dest)]]
    assert main(argv) == 2
    assert not (torch.distributed.is_available() and torch.distributed.is_initialized())
    out, err = capsys.readouterr()
    option = "--" + dest.replace("_", "-")
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"error: {option} is not supported under torchrun ({command}): "
    ), err
    assert REFUSED[command][dest] in err
    assert torchrun_rank == []  # the ranks' code never ran
    assert list(tmp_path.iterdir()) == []  # nothing written, no directory made


def test_only_local_rank_0_prints_the_refusal(
    torchrun_rank: list[argparse.Namespace],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert main(["bench", "--recipe", str(TINY), "--full"]) == 2
    assert capsys.readouterr() == ("", "")
    assert torchrun_rank == []


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--arm", "serial", "--out", "o.mp4", "--quiet", "--seed", "3"],
        ["verify", "--pairs", "0", "--json", "v.json"],  # the default, given: nothing ignored
        ["bench", "--pairs", "1", "--warmup", "0", "--encoder-threads", "2", "--json", "b.json"],
        ["bench", "--memory-budget", "8GiB", "--max-frame-pixels", "99999"],
    ],
)
def test_honoured_and_default_options_reach_the_ranks(
    argv: list[str], torchrun_rank: list[argparse.Namespace]
) -> None:
    assert main([*argv, "--recipe", str(TINY)]) == 0
    assert len(torchrun_rank) == 1 and torchrun_rank[0].command == argv[0]


def test_one_process_is_not_torchrun() -> None:
    assert not torchrun_options.under_torchrun({})
    assert not torchrun_options.under_torchrun({"WORLD_SIZE": "1", "RANK": "0"})
    assert torchrun_options.under_torchrun({**TORCHRUN_ENV, "RANK": "1"})


def test_a_cuda_index_is_refused_under_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """init_distributed gives each rank cuda:LOCAL_RANK: an index in the recipe would be ignored.
    (`model_copy` skips the check that this machine has the device.)"""
    for name, value in {**TORCHRUN_ENV, "RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    recipe = load_recipe(TINY)
    assert distributed_commands._parallel(recipe.model_copy(update={"device": "cuda"}))
    with pytest.raises(RecipeError, match=r"device 'cuda:1' is not supported under torchrun"):
        distributed_commands._parallel(recipe.model_copy(update={"device": "cuda:1"}))


def test_torchrun_refuses_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """The end-to-end refusal: 2 ranks, rank 0's line once, both ranks exit 2 (torchrun then
    reports the failed workers itself)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", "-m", "prenoise", "generate",
         "--recipe", str(TINY), "--prepare-next-output", "--out", "new/out.mp4"],
        cwd=tmp_path, capture_output=True, text=True, timeout=READY_CEILING_S, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    line = (
        "error: --prepare-next-output is not supported under torchrun (generate): the ranks "
        "prepare every output before the first denoise; drop it, or run prenoise generate "
        "--prepare-next-output in one process"
    )
    assert proc.stderr.splitlines().count(line) == 1, proc.stderr[-3000:]
    assert "prenoise" not in proc.stdout, proc.stdout
    frames = [row for row in proc.stderr.splitlines() if row.lstrip().startswith('File "')]
    assert all("/torch/" in row or "bin/torchrun" in row for row in frames), frames  # torchrun's
    assert "exitcode  : 2" in proc.stderr, proc.stderr[-3000:]
    assert "[prenoise generate" not in proc.stderr  # no stage started: not even `load models`
    assert list(tmp_path.iterdir()) == []
