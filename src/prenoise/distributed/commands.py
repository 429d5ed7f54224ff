"""`prenoise generate|verify|bench` under `torchrun` (called by `prenoise.cli.commands` when
`WORLD_SIZE` > 1). Rank 0 prints the tables and writes the files; every rank prints its errors.

Progress is the single-process commands' (`prenoise.observe.progress`), shown by rank 0 only:
the same stage names (`load models`, then the command's stages, denoise steps counted), one
stderr line per stage when stdout is not a terminal, a live line on one; other ranks and
`--quiet` show none. The tables print after the progress ends, as in one process.

Options the single process reads but this path does not implement (`generate
--prepare-next-output`, `verify --pairs`, `bench --full`, `bench --trace-dir`) never reach it:
`prenoise.cli.torchrun_options` refuses them before any work; every other option is read here or
reaches the ranks in the broadcast recipe.

The request check of the single process (`plan_request`: memory budget, media caps) runs on
rank 0 once the process group is up, before any rank loads a model (`broadcast_request`), and its
plan is what every rank works from. A request it refuses ends the job as one process would end:
its one line, printed by local rank 0 of each host, nothing written, every rank exit status 2.

Exit status: 0 success, 1 a failed check or a failed rank, 2 a user error (as the plain CLI).
"""

from __future__ import annotations

import argparse
import atexit
import json
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.table import Table

from prenoise.distributed.bench import run_distributed_bench
from prenoise.distributed.group import DistContext, env_world_size, init_distributed, shutdown
from prenoise.distributed.request import (
    REQUEST_REFUSALS,
    RequestRefusedError,
    ResolvedRequest,
    broadcast_request,
)
from prenoise.distributed.runner import DistributedRef2VA
from prenoise.distributed.shm import sweep_stale_segments
from prenoise.distributed.status import DistributedPreparationError
from prenoise.distributed.verification import verify_distributed
from prenoise.guards.atomic import write_atomic
from prenoise.observe.console_text import cell, line, title
from prenoise.observe.progress import CommandProgress
from prenoise.ref2va.cli_options import check_request_outputs, recipe_from_args
from prenoise.ref2va.config import ParallelConfig, Recipe, RecipeError
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.sampler import StepInfo

__all__ = ["run_distributed"]

Report = Callable[[], int]
"""What a command prints (rank 0) once its progress has ended; returns the exit status."""

console = Console()

EXIT_USAGE = 2
"""A refused request: the single-process CLI's status for a user error."""


def _terminate(signum: int, _frame: FrameType | None) -> None:
    # torchrun stops the other workers with SIGTERM when one fails: unwind so `finally` blocks
    # unlink shared segments and leave the process group.
    raise SystemExit(128 + signum)


def _exit_refused(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(EXIT_USAGE)


def _refuse(ctx: DistContext, error: Exception) -> int:
    """End this rank of a refused request: the one-line error of the single-process CLI (local
    rank 0 of each host prints it), then a barrier, so that no rank leaves (torchrun then stops
    the rest) before every host's line is out; returns 2.

    Every rank is then on its way out with status 2, and the first to leave makes torchrun stop
    the others with SIGTERM: that stop must not turn their 2 into 143 (in Python) or -15 (once
    `main` has restored the default handler, while the interpreter exits)."""
    signal.signal(signal.SIGTERM, _exit_refused)
    if ctx.local_rank == 0:
        console.print(line(("error:", "red"), f" {error}"), soft_wrap=True)
    ctx.barrier()
    atexit.register(signal.signal, signal.SIGTERM, signal.SIG_IGN)
    return EXIT_USAGE


def _parallel(recipe: Recipe) -> ParallelConfig:
    parallel = recipe.parallel or ParallelConfig()
    world = env_world_size()
    if parallel.ranks is not None and parallel.ranks != world:
        raise RecipeError(f"recipe declares parallel.ranks={parallel.ranks}, WORLD_SIZE={world}")
    if parallel.text_encoder_tp > world:
        raise RecipeError(f"parallel.text_encoder_tp={parallel.text_encoder_tp} > {world} ranks")
    if recipe.device.startswith("cuda:"):  # init_distributed would ignore the index
        raise RecipeError(
            f"device {recipe.device!r} is not supported under torchrun: each rank uses "
            "cuda:LOCAL_RANK; set device cuda (--device cuda), or CUDA_VISIBLE_DEVICES"
        )
    return parallel


def run_distributed(args: argparse.Namespace) -> int:
    """Run `args.command` on this rank of a `torchrun` job; see the module docstring."""
    recipe = recipe_from_args(args)
    missing = check_request_outputs(args, recipe)  # before the process group and the models
    parallel = _parallel(recipe)
    signal.signal(signal.SIGTERM, _terminate)
    ctx = init_distributed(parallel.timeout_s, recipe.device)
    try:
        try:  # the single process's request check, on rank 0, before any rank loads a model
            request = broadcast_request(ctx, recipe if ctx.rank == 0 else None)
        except RequestRefusedError as refused:  # the other ranks, told by rank 0
            return _refuse(ctx, refused)
        except REQUEST_REFUSALS as refused:  # rank 0
            return _refuse(ctx, refused)
        quiet = args.quiet or ctx.rank != 0  # one set of lines per job, not one per rank
        with CommandProgress(console, args.command, quiet=quiet) as progress:
            progress.stage("load models")
            if ctx.is_host_leader:
                sweep_stale_segments()
            if recipe.checkpoint is not None:
                models = Ref2VAModels.from_checkpoint(
                    recipe.checkpoint, recipe.model, device=ctx.device
                )
            else:
                models = Ref2VAModels.default(recipe.model, device=ctx.device)
            runner = DistributedRef2VA(ctx, models, parallel)
            command = {"generate": _generate, "verify": _verify, "bench": _bench}[args.command]
            report = command(args, ctx, runner, request, progress)
        status = report()
        if ctx.rank == 0:  # rank 0 writes the outputs: it says which directories it made
            for option, directory in missing:
                if directory.is_dir():
                    console.print(line(f"created the directory {directory} ({option})"))
        return status
    except DistributedPreparationError as error:
        _print_rank_failure(ctx.rank, error)
        return 1
    finally:
        shutdown()


def _print_rank_failure(rank: int, error: Exception) -> None:
    """The line a rank prints when preparation failed on it: `error: [rank N] <error>`."""
    console.print(line(("error:", "red"), f" [rank {rank}] {error}"), soft_wrap=True)


def _generate(
    args: argparse.Namespace,
    ctx: DistContext,
    runner: DistributedRef2VA,
    request: ResolvedRequest,
    progress: CommandProgress,
) -> Report:
    recipe = request.plan.recipe
    out = Path(args.out) if args.out else recipe.output_dir / f"{recipe.name}.mp4"

    def on_stage(name: str) -> None:
        progress.stage(name, recipe.steps if name.startswith("denoise") else None)

    def on_step(info: StepInfo) -> None:
        progress.advance(info.step)

    paths, seconds = runner.generate(request, out, args.arm, on_stage=on_stage, callback=on_step)

    def report() -> int:
        if ctx.rank == 0:
            heading = f"{recipe.name}: {args.arm} arm, {ctx.world_size} ranks (rank 0)"
            table = Table(title=title(heading))
            table.add_column("stage")
            table.add_column("seconds", justify="right")
            for name, value in seconds.items():
                table.add_row(cell(name), f"{value:.3f}")
            console.print(table)
            for path in paths:
                console.print(line("wrote ", (str(path), "bold")))
        return 0

    return report


def _verify(
    args: argparse.Namespace,
    ctx: DistContext,
    runner: DistributedRef2VA,
    request: ResolvedRequest,
    progress: CommandProgress,
) -> Report:
    result = verify_distributed(runner, request, on_stage=progress.stage)

    def report() -> int:
        if ctx.rank == 0:
            if args.json:
                write_atomic(args.json, json.dumps(result.to_json(), indent=2), what="--json")
            style = "green" if result.equal else "red"
            console.print(line((result.summary(), style)), soft_wrap=True)
        return 0 if result.equal else 1

    return report


def _bench(
    args: argparse.Namespace,
    ctx: DistContext,
    runner: DistributedRef2VA,
    request: ResolvedRequest,
    progress: CommandProgress,
) -> Report:
    summary = run_distributed_bench(
        runner,
        request,
        pairs=args.pairs,
        warmup=args.warmup,
        encoder_threads=args.encoder_threads,
        on_request=progress.stage,
    )

    def report() -> int:
        if summary is None:  # the other ranks
            return 0
        heading = f"{summary['recipe']}: {ctx.world_size} ranks, medians per request"
        table = Table(title=title(heading))
        table.add_column("metric")
        for mode in summary["medians"]:
            table.add_column(cell(mode), justify="right")
        first = next(iter(summary["medians"].values()))
        for key in first:
            scale = 2**20 if key.endswith("bytes") else 1
            table.add_row(
                cell(key.replace("_bytes", "_MiB")),
                *[f"{summary['medians'][m][key] / scale:.3f}" for m in summary["medians"]],
            )
        console.print(table)
        console.print(line(f"threads (each rank): {summary['threads']}"), soft_wrap=True)
        if args.json:
            write_atomic(args.json, json.dumps(summary, indent=2), what="--json")
            console.print(line(f"wrote {args.json}"))
        return 0

    return report
