"""The `prenoise` command line."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from prenoise.cli.args import (
    UsageError,
    check_output_dir,
    check_output_file,
    check_outputs_are_not_inputs,
    missing_directory,
)
from prenoise.cli.parser import DEBUG_ENV_VAR, build_parser
from prenoise.guards.atomic import OutputWriteError, write_atomic
from prenoise.observe.console_text import caption, cell, line, title
from prenoise.observe.progress import CommandProgress
from prenoise.ref2va.cli_options import check_request_outputs, generate_out_path

if TYPE_CHECKING:
    from prenoise.observe.attribution import Timing

__all__ = ["build_parser", "main"]

EXIT_USAGE = 2
"""Bad input, a missing pip extra, an output the disk refuses, low memory: one-line `error: …`."""
EXIT_INTERNAL = 70
"""An unexpected exception (a bug, or an environment failure such as a full disk): one line
`internal error: …` (`EX_SOFTWARE` of sysexits.h, distinct from verify's and compare's 1)."""

COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "generate": ("ref2va",),
    "verify": ("ref2va",),
    "bench": ("ref2va",),
    "serve": ("ref2va", "serve"),
}
"""pip extras each command needs (checked before it starts; `doctor`, `demo`, `compare` need
none). `vllm-omni-verify` and `sglang-verify` check for vLLM-Omni / SGLang themselves."""

console = Console()


def _cmd_demo(args: argparse.Namespace) -> int:
    from prenoise.cli import integration_demos
    from prenoise.cli.demo import run_demo

    status = integration_demos.run(args, console)  # None: the core demo, below
    if status is not None:
        return status
    with console.status("running the serial and the overlapped arm…"):
        result = run_demo(seed=args.seed, encode_seconds=args.encode_seconds)
    table = Table(
        title=title(f"core demo: {result.numel / 1e6:.1f}M noise values, seed {args.seed}")
    )
    table.add_column("stage (s)")
    table.add_column("serial", justify="right")
    table.add_column("overlapped", justify="right")
    for key in result.serial_s:
        table.add_row(cell(key), f"{result.serial_s[key]:.3f}", f"{result.overlapped_s[key]:.3f}")
    console.print(table)
    console.print(line(f"verify: {result.summary()}"))
    return 0 if result.equal else 1


def _cmd_doctor(args: argparse.Namespace) -> int:
    from prenoise.cli.doctor import doctor_table

    with CommandProgress(console, "doctor") as progress:  # a line per part on stderr
        table = doctor_table(progress)
    console.print(table)
    return 0


def _cmd_recipes(args: argparse.Namespace) -> int:
    from prenoise.ref2va.catalog import describe, shipped

    table = Table(title="recipes shipped with prenoise: --recipe NAME")
    for column in ("name", "what it is"):
        table.add_column(column, no_wrap=column == "name")
    for name, path in shipped().items():
        table.add_row(cell(name), cell(describe(path)))
    console.print(table)
    console.print(line(f"files: {next(iter(shipped().values())).parent}"), soft_wrap=True)
    return 0


STREAM_DIGEST_PROGRESS_VALUES = 1 << 26
"""From this many values in all (~67M: seconds on a busy machine; a count may be 2**33, minutes)
`stream-digest` shows its progress, one line per tenth on stderr (not on a terminal)."""


def _cmd_stream_digest(args: argparse.Namespace) -> int:
    from prenoise.noise.streams import stream_digest

    total = sum(args.count)
    if total < STREAM_DIGEST_PROGRESS_VALUES:
        print(stream_digest(args.stream, args.seed, args.count, args.dtype))
        return 0
    with CommandProgress(console, "stream-digest") as progress:
        progress.stage(f"drawing {total} values in stream {args.stream}: 0%")
        shown = 0

        def on_chunk(done: int) -> None:
            nonlocal shown
            tenth = 10 * done // total
            if tenth > shown and done < total:
                shown = tenth
                progress.stage(f"drawing {total} values in stream {args.stream}: {tenth * 10}%")

        digest = stream_digest(args.stream, args.seed, args.count, args.dtype, on_chunk=on_chunk)
    print(digest)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from prenoise.verify import compare, load_saved, require_inputs_fit

    missing = None
    if args.json:  # the report must not overwrite what it describes
        report_path = check_output_file(args.json, "--json")
        inputs = [("A", Path(args.a)), ("B", Path(args.b))]
        check_outputs_are_not_inputs([("--json", report_path)], inputs)
        missing = missing_directory(report_path, "--json")
    # Before anything is inflated: both files' declared contents must fit the budget.
    declared = require_inputs_fit((args.a, args.b), args.memory_budget)
    # Exit status: 0 equal, 1 different, 2 cannot compare (UncomparableError, a user error).
    a = load_saved(args.a, args.memory_budget)
    b = load_saved(args.b, args.memory_budget)
    # What is left of the budget for the copies comparing needs (None: measured at each copy).
    left = None if args.memory_budget is None else max(0, args.memory_budget - declared)
    report = compare(a, b, memory_budget=left)
    if args.json:
        write_atomic(args.json, report.to_json(indent=2), what="--json")
        _print_created([missing])
    console.print(line(report.summary()))
    return 0 if report.equal else 1


def _user_errors() -> tuple[type[Exception], ...]:
    """Errors caused by the user's input or install: reported in one line, exit status 2.

    Imports only modules that need no pip extra (see `prenoise.guards.extras`)."""
    from prenoise.guards.budget import BudgetExceededError
    from prenoise.guards.env import EnvVarError
    from prenoise.guards.extras import MissingExtraError
    from prenoise.noise.streams import NoiseStreamError
    from prenoise.preparation.prediction import PredictionMismatchError
    from prenoise.ref2va.checkpoint import CheckpointError
    from prenoise.ref2va.config import RecipeError
    from prenoise.ref2va.media.caps import MediaError
    from prenoise.verify import UncomparableError

    return (
        RecipeError,
        MediaError,
        CheckpointError,
        PredictionMismatchError,
        UncomparableError,
        UsageError,
        EnvVarError,
        BudgetExceededError,
        NoiseStreamError,
        MissingExtraError,
        OutputWriteError,
    )


def _require_extras(args: argparse.Namespace) -> None:
    """Refuse, before any work, a command whose pip extra is not installed."""
    from prenoise.guards.extras import require

    what = f"prenoise {args.command}"
    for extra in COMMAND_EXTRAS.get(args.command, ()):
        require(extra, what)
    if args.command == "bench" and args.trace_dir:
        require("bench", f"{what} --trace-dir")


def _missing_extra(error: ModuleNotFoundError) -> str | None:
    """The one-line hint for an import of an optional module that failed; None if the module
    belongs to no extra (then it is an internal error)."""
    from prenoise.guards.extras import extra_for_module, install_command

    extra = extra_for_module(error.name)
    if extra is None:
        return None
    return f"{error.name} is not installed: {install_command(extra)}"


def _allocation_failure(error: Exception) -> str | None:
    """The one line for an allocation that failed (low memory: `ulimit -v`, the cgroup), naming
    the limit; None for any other error."""
    from prenoise.guards.budget import allocation_failure

    return allocation_failure(error)


def _internal_error(error: Exception) -> str:
    """One line for an exception no user input explains."""
    what = f"{type(error).__name__}: {error}"
    if isinstance(error, OSError):  # the environment (a full disk, a vanished file), not a bug
        return f"error: {what} (rerun with --debug for the traceback)"
    return f"internal error: {what}; rerun with --debug for the traceback, please report it"


def _print_created(missing: Sequence[tuple[str, Path] | None]) -> None:
    """Say which of the directories that were missing when the command started (checked then:
    `prenoise.guards.usage.missing_directory`) it created to write its outputs."""
    for entry in missing:
        if entry is not None and entry[1].is_dir():
            console.print(line(f"created the directory {entry[1]} ({entry[0]})"))


def _stage_table(heading: str, seconds: dict[str, float]) -> Table:
    table = Table(title=title(heading))
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for name, value in seconds.items():
        table.add_row(cell(name), f"{value:.3f}")
    return table


def _cmd_generate(args: argparse.Namespace) -> int:
    from prenoise.ref2va.cli_options import load_models, recipe_from_args
    from prenoise.ref2va.pipeline import Ref2VAPipeline
    from prenoise.ref2va.request_plan import plan_request
    from prenoise.ref2va.sampler import StepInfo

    recipe = recipe_from_args(args)
    missing = check_request_outputs(args, recipe)
    out = generate_out_path(args, recipe)
    plan = plan_request(recipe)  # too big or bad media fails here, before any model work
    with CommandProgress(console, "generate", quiet=args.quiet) as progress:
        progress.stage("load models")
        pipeline = Ref2VAPipeline(load_models(recipe), device=recipe.device)

        def on_stage(name: str) -> None:
            progress.stage(name, recipe.steps if name.startswith("denoise") else None)

        def on_step(info: StepInfo) -> None:
            progress.advance(info.step)

        result = pipeline.generate(
            plan,
            out,
            args.arm,
            on_stage=on_stage,
            callback=on_step,
            prepare_next_output=args.prepare_next_output,
        )
    console.print(_stage_table(f"{recipe.name}: {args.arm} arm", result.stage_seconds))
    for event in result.prediction_events:
        console.print(line(("prediction fallback", "yellow"), f": {event}"))
    _print_created(missing)
    for path in result.paths:
        console.print(line("wrote ", (str(path), "bold")))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from prenoise.ref2va.cli_options import load_models, recipe_from_args
    from prenoise.ref2va.pipeline import Ref2VAPipeline
    from prenoise.ref2va.request_plan import plan_request
    from prenoise.ref2va.verification import NOISE_FIELDS, verify_recipe, verify_timing

    recipe = recipe_from_args(args)
    missing = check_request_outputs(args, recipe)
    plan = plan_request(recipe)
    with CommandProgress(console, "verify", quiet=args.quiet) as progress:
        progress.stage("load models")
        pipeline = Ref2VAPipeline(load_models(recipe), device=recipe.device)
        result = verify_recipe(pipeline, plan, on_stage=progress.stage)
    report = result.to_json()
    table = Table(title=title(f"{recipe.name}: serial vs overlapped"))
    for column in ("field", "equal", "shape", "sha256 (serial)"):
        table.add_column(column)
    for name, entry in report["fields"].items():
        table.add_row(
            cell(name),
            cell(("yes", "green"))
            if entry["equal"]
            else cell(("NO", "red"), f" {entry['differences']}"),
            cell(str(entry.get("shape", ""))),
            cell(entry.get("sha256", "")[:16]),
        )
    console.print(table)
    timing = verify_timing(result)
    if args.pairs and result.equal:  # timing arms that differ would compare different work
        from prenoise.ref2va.bench import BenchConfig, bench_timing, run_bench

        with CommandProgress(console, "verify", quiet=args.quiet) as progress:
            config = BenchConfig(args.pairs, warmup=0)
            summary = run_bench(pipeline, plan, config, on_request=progress.stage).summary
        timing = bench_timing(summary)
        report["paired_timings"] = {
            k: summary[k] for k in ("pairs", "serial", "overlapped", "delta")
        }
    if timing is not None:
        noise = sum(
            math.prod(entry.get("shape", ()))
            for name, entry in report["fields"].items()
            if name.rpartition(".")[2] in NOISE_FIELDS
        )
        console.print(_timing_table(recipe.name, timing, noise))
    if args.json:
        write_atomic(args.json, json.dumps(report, indent=2), what="--json")
    style = "green" if result.equal else "red"
    console.print(line((result.summary(), style)))
    if args.json:
        _print_created(missing)
        console.print(
            line("wrote the per-field report to ", (str(args.json), "bold")), soft_wrap=True
        )
    return 0 if result.equal else 1


def _timing_table(name: str, timing: Timing, noise_values: int) -> Table:
    """Noise on the request thread and preparation window of one request, serial vs
    overlapped, captioned with what of the difference is prenoise's (`WindowAttribution`)."""
    sentence = timing.attribution.sentence()
    flagged = timing.attribution.drift or timing.attribution.noisy
    table = Table(
        title=title(f"{name}: {timing.runs}"),
        caption=caption(
            f"{noise_values / 1e6:.2f}M noise values; ",
            (sentence, "yellow") if flagged else sentence,
        ),
        caption_justify="left",
    )
    for column in ("ms", "serial", "overlapped", "overlapped − serial"):
        table.add_column(column, justify="left" if column == "ms" else "right")
    attribution = timing.attribution
    for label, (a, b), saved in (
        ("noise on the request thread", timing.noise_s, attribution.noise_moved_s),
        ("preparation window", timing.window_s, attribution.window_saved_s),
    ):
        table.add_row(cell(label), f"{a * 1e3:.1f}", f"{b * 1e3:.1f}", f"{-saved * 1e3:+.1f}")
    return table


def _bench_table(summary: dict[str, object]) -> Table:
    serial, overlapped, delta = (summary[k] for k in ("serial", "overlapped", "delta"))
    assert isinstance(serial, dict) and isinstance(overlapped, dict) and isinstance(delta, dict)
    table = Table(title=title(f"{summary['recipe']}: {summary['pairs']} pairs, {summary['timed']}"))
    table.add_column("metric (median)", no_wrap=True)
    for column in ("serial", "overlapped", "Δ per pair", "Δ min…max"):
        table.add_column(column, justify="right", no_wrap=True)
    for metric, stats in serial.items():
        fmt = (lambda v: f"{v / 2**20:.0f}MiB") if metric == "peak_rss_bytes" else "{:.3f}".format
        d = delta.get(metric, {"median": 0.0, "per_pair": [0.0]})
        table.add_row(
            cell(metric),
            cell(fmt(stats["median"])),
            cell(fmt(overlapped[metric]["median"])),
            cell(fmt(d["median"])),
            cell(f"{fmt(min(d['per_pair']))}…{fmt(max(d['per_pair']))}"),
        )
    return table


def _print_attribution(attribution: dict[str, Any]) -> None:
    """What the bench measured: the median noise moved and window difference per pair, then every
    pair flagged for encoder drift or timing noise (`prenoise.observe.attribution`)."""
    median = attribution["median"]
    flagged = median["encoder_drift"] or median["timing_noise"]
    style = "yellow" if flagged else "green"
    pairs = len(attribution["per_pair"])
    label = f"medians of {pairs} pairs" if pairs > 1 else "1 pair"
    console.print(line((f"{label}: {median['said']}", style)), soft_wrap=True)
    for index, entry in enumerate(attribution["per_pair"]):
        if entry["encoder_drift"] or entry["timing_noise"]:
            console.print(line((f"pair {index + 1}: {entry['said']}", "yellow")), soft_wrap=True)


def _cmd_bench(args: argparse.Namespace) -> int:
    from prenoise.ref2va.bench import BenchConfig, run_bench
    from prenoise.ref2va.cli_options import load_models, recipe_from_args
    from prenoise.ref2va.pipeline import Ref2VAPipeline
    from prenoise.ref2va.request_plan import plan_request

    recipe = recipe_from_args(args)
    missing = check_request_outputs(args, recipe)
    plan = plan_request(recipe)
    config = BenchConfig(args.pairs, args.warmup, args.full, args.encoder_threads)
    with CommandProgress(console, "bench", quiet=args.quiet) as progress:
        progress.stage("load models")
        pipeline = Ref2VAPipeline(load_models(recipe), device=recipe.device)
        result = run_bench(pipeline, plan, config, on_request=progress.stage)
    summary = result.summary
    console.print(_bench_table(summary))
    _print_attribution(summary["attribution"])
    console.print(
        line(f"threads: {summary['threads']}; machine: {summary['machine']}"), soft_wrap=True
    )
    if args.json:
        write_atomic(args.json, json.dumps(summary, indent=2), what="--json")
        console.print(line(f"wrote {args.json}"))
    if args.trace_dir:
        from prenoise.observe.timeline_plot import plot_timelines

        trace_dir = Path(args.trace_dir)
        for arm, trace in result.chrome_traces().items():
            trace_file = trace_dir / f"{recipe.name}-{arm}.trace.json"
            write_atomic(trace_file, json.dumps(trace), what="--trace-dir")
        pair = result.median_pair
        png = plot_timelines(
            result.pair_spans(pair),
            trace_dir / f"{recipe.name}-timeline.png",
            title=f"{recipe.name}: the median pair (pair {pair + 1} of {summary['pairs']}, by "
            "window difference), threads as lanes",
        )
        console.print(line(f"wrote Chrome traces and {png} to {trace_dir}"))
    _print_created(missing)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # `serve` and `ref2va` extras: checked by `_require_extras`

    from prenoise.ref2va.cli_options import with_limit_overrides
    from prenoise.ref2va.config import RecipeError, load_recipe
    from prenoise.serve import ServeLimits, ServeSettings, create_app, http_protocol

    recipe = with_limit_overrides(load_recipe(args.recipe), args)
    media_root = args.media_root.resolve() if args.media_root else None
    if media_root is not None and not media_root.is_dir():
        raise RecipeError(f"--media-root {args.media_root}: not a directory")
    option = "--output-dir" if args.output_dir else "output_dir"
    output_dir = check_output_dir(args.output_dir or recipe.output_dir / "serve", option)
    settings = ServeSettings(
        recipe=recipe,
        output_dir=output_dir.resolve(),
        media_root=media_root,
        prepare_ahead=args.prepare_ahead,
        limits=ServeLimits(
            max_upload_bytes=args.max_upload_mb * 2**20,
            max_queued=args.max_queued,
            max_queued_upload_bytes=args.max_queued_upload_mb * 2**20,
        ),
        body_idle_timeout_s=args.body_idle_timeout,
        body_timeout_s=args.body_timeout,
        headers_timeout_s=args.headers_timeout,
    )
    with console.status("loading models…"):
        app = create_app(settings)
    console.print(
        line(
            f"serving {recipe.name} on http://{args.host}:{args.port} (outputs: "
            f"{settings.output_dir}, media root: {media_root}, "
            f"prepare-ahead: {args.prepare_ahead})"
        ),
        soft_wrap=True,
    )
    http = http_protocol(settings.headers_timeout_s)  # closes connections whose headers lag
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, http=http)
    return 0


def _cmd_vllm_omni_verify(args: argparse.Namespace) -> int:
    from prenoise.integrations.vllm_omni.cli import run

    return run(args, console)


def _cmd_sglang_verify(args: argparse.Namespace) -> int:
    from prenoise.cli.sglang_verify import run

    return run(args, console)


def _cmd_rollout_check(args: argparse.Namespace) -> int:
    from prenoise.cli.rollout_check import run

    return run(args, console)


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs subcommand `name` (the parser, `prenoise.cli.parser`, knows only
    the options), looked up when it runs."""
    return {
        "demo": _cmd_demo,
        "generate": _cmd_generate,
        "verify": _cmd_verify,
        "bench": _cmd_bench,
        "doctor": _cmd_doctor,
        "recipes": _cmd_recipes,
        "stream-digest": _cmd_stream_digest,
        "serve": _cmd_serve,
        "compare": _cmd_compare,
        "vllm-omni-verify": _cmd_vllm_omni_verify,
        "sglang-verify": _cmd_sglang_verify,
        "rollout-check": _cmd_rollout_check,
    }[name]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `prenoise` console script; returns the exit status.

    User errors, missing pip extras, an output the disk refuses (`OutputWriteError`) and low
    memory (`guards.budget.allocation_failure`) print one line and return 2; any other exception
    prints one line and returns `EXIT_INTERNAL` (70). Ctrl-C returns 130, SIGTERM/SIGHUP
    128 + signum (after the same clean-up as Ctrl-C). `--debug` or `PRENOISE_DEBUG=1` re-raise
    instead, with the traceback.
    """
    from prenoise.guards.signals import Terminated, install_termination_handlers

    debug = os.environ.get(DEBUG_ENV_VAR) == "1"  # until the command line is parsed
    restore = _nothing_to_restore
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = debug or args.debug
        # uvicorn handles serve's signals itself (graceful shutdown).
        if args.command != "serve":
            restore = install_termination_handlers()
        return _run(args, parser)
    except _user_errors() as error:
        if debug:
            raise
        console.print(line(("error:", "red"), f" {error}"), soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if debug:
            raise
        console.print("[red]interrupted[/]")
        return 130
    except Terminated as stop:
        if debug:
            raise
        console.print(line(("terminated", "red"), f" by {stop.signal_name}"))
        return 128 + stop.signum
    except Exception as error:  # a bug, or an import of an extra that is not installed
        if debug:
            raise
        low_memory = _allocation_failure(error)
        if low_memory is not None:  # plain output: rich may need an import that fails now
            sys.stdout.write(f"error: {low_memory}\n")
            return EXIT_USAGE
        hint = _missing_extra(error) if isinstance(error, ModuleNotFoundError) else None
        if hint is not None:
            console.print(line(("error:", "red"), f" {hint}"), soft_wrap=True)
            return EXIT_USAGE
        console.print(line(_internal_error(error)), style="red", soft_wrap=True)
        return EXIT_INTERNAL
    finally:
        restore()


def _nothing_to_restore() -> None:
    pass


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Check the environment, (under torchrun) the options the ranks honour and the command's
    extras, then run the command."""
    from prenoise.cli import torchrun_options
    from prenoise.guards.documents import check_document_file
    from prenoise.guards.env import check_environment, env_choice
    from prenoise.noise import kernel

    env_choice(DEBUG_ENV_VAR, ("0", "1"), "0")  # an unknown value is a user error
    kernel.check_environment()
    check_environment()  # every PRENOISE_* variable, so a bad value never waits for first use
    distributed = (
        args.command in torchrun_options.DISTRIBUTED_COMMANDS and torchrun_options.under_torchrun()
    )
    if distributed:  # before the extras and any work: an option the ranks would not honour
        refused = torchrun_options.refusal(parser, args)
        if refused is not None:
            if torchrun_options.print_rank():  # one line per host, not one per rank
                sys.stderr.write(f"error: {refused}\n")
            return EXIT_USAGE
    recipe = getattr(args, "recipe", None)
    if recipe is not None:  # a device, a FIFO or a huge file: refused before it is read
        check_document_file(recipe, "--recipe")
    _require_extras(args)
    func = _command(args.command)
    if distributed:
        from prenoise.distributed.commands import run_distributed

        func = run_distributed
    return int(func(args))


if __name__ == "__main__":
    sys.exit(main())
