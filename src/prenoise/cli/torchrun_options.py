"""Which options of `prenoise generate|verify|bench` the torchrun path honours; it refuses the rest.

Under `torchrun` (`WORLD_SIZE` > 1) the three commands run `prenoise.distributed.commands`, not
the single-process code, so an option the single process reads could be dropped there without a
word. This table is the one place that decides, per command and per option (argparse `dest`):

- `HONOURED`: the torchrun path reads it. The request options (`REQUEST_OPTIONS`) reach every
  rank through `recipe_from_args` and the broadcast recipe (`tests/test_option_paths.py` proves
  each sets its recipe key); the others are read by `prenoise.distributed.commands`.
- `REFUSED`: the torchrun path does not implement it; given away from its default, the command
  stops before any work (no process group, no model, no output) with one line naming the option
  and what to do instead, exit status 2 (`refusal`).

An option in neither table (one added to the parser later without a decision) is refused too, with
a generic line, and `tests/distributed/test_torchrun_options.py` fails until it is placed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from prenoise.guards.torchrun_env import torchrun_env

__all__ = [
    "DISTRIBUTED_COMMANDS",
    "HONOURED",
    "REFUSED",
    "REQUEST_OPTIONS",
    "command_parser",
    "print_rank",
    "refusal",
    "under_torchrun",
]

DISTRIBUTED_COMMANDS = ("generate", "verify", "bench")
"""The commands that run distributed under torchrun (the others ignore `WORLD_SIZE`)."""

REQUEST_OPTIONS = frozenset(
    {
        "recipe",
        "prompt",
        "reference",
        "seed",
        "noise_stream",
        "duration",
        "frames",
        "width",
        "height",
        "steps",
        "shift_video",
        "shift_audio",
        "outputs",
        "device",
        "checkpoint",
        "max_reference_frames",
        "max_decoded_frames",
        "max_frame_pixels",
        "max_reference_pixels",
        "memory_budget",
    }
)
"""`add_request_arguments`: they set recipe keys, which rank 0 broadcasts to every rank."""

_EVERY_COMMAND = frozenset({"help", "debug", "quiet"})
"""argparse's `--help`, `main`'s `--debug`, `--quiet` (rank 0's progress; other ranks show none)."""

HONOURED: Mapping[str, frozenset[str]] = {
    "generate": REQUEST_OPTIONS | _EVERY_COMMAND | {"arm", "out"},
    "verify": REQUEST_OPTIONS | _EVERY_COMMAND | {"json"},
    "bench": REQUEST_OPTIONS | _EVERY_COMMAND | {"pairs", "warmup", "encoder_threads", "json"},
}
"""Per command, the options the torchrun path reads (argparse `dest`s)."""

REFUSED: Mapping[str, Mapping[str, str]] = {
    "generate": {
        "prepare_next_output": "the ranks prepare every output before the first denoise; drop "
        "it, or run prenoise generate --prepare-next-output in one process",
    },
    "verify": {
        "pairs": "for multi-rank timings run torchrun ... -m prenoise bench --pairs N (per-rank "
        "vs host-shared noise), or prenoise verify --pairs N in one process",
    },
    "bench": {
        "full": "the multi-rank bench times preparation only; run prenoise bench --full in one "
        "process",
        "trace_dir": "the multi-rank bench writes no traces; run prenoise bench --trace-dir DIR "
        "in one process",
    },
}
"""Per command, the options the torchrun path does not implement, with what to do instead."""


def under_torchrun(environ: Mapping[str, str] = os.environ) -> bool:
    """True when `torchrun` started this process for more than one rank (`WORLD_SIZE` > 1):
    then `generate`, `verify` and `bench` run distributed. Raises `TorchrunEnvError` (one line,
    exit 2) when `WORLD_SIZE` is set and it or another torchrun variable is wrong."""
    return torchrun_env(environ).distributed


def print_rank(environ: Mapping[str, str] = os.environ) -> bool:
    """True on the rank that prints a refusal: local rank 0, one line per host (`LOCAL_RANK`,
    else `RANK`; a process torchrun did not start is rank 0)."""
    return torchrun_env(environ).local_rank == 0


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subparser of `command` in the `prenoise` parser (`prenoise.cli.parser.build_parser`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices[command]
            assert isinstance(sub, argparse.ArgumentParser)
            return sub
    raise KeyError(command)


def refusal(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The line refusing the first option of `args.command` that the torchrun path does not
    honour and that `args` sets away from its default (given on the command line); None when
    there is none. `parser` is the whole `prenoise` parser (the defaults are its own)."""
    if args.command not in DISTRIBUTED_COMMANDS:
        return None
    honoured = HONOURED[args.command]
    refused = REFUSED[args.command]
    for action in command_parser(parser, args.command)._actions:
        if action.dest in honoured:
            continue
        if getattr(args, action.dest, action.default) == action.default:
            continue  # not given (or given as its default): nothing is ignored
        option = "/".join(action.option_strings) or action.dest
        instead = refused.get(action.dest, f"run prenoise {args.command} {option} in one process")
        return f"{option} is not supported under torchrun ({args.command}): {instead}"
    return None
