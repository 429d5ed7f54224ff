"""The `prenoise` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prenoise.cli.args import (
    LOG_LEVELS,
    UsageError,
    at_least,
    check_output_dir,
    check_output_file,
    check_outputs_are_not_inputs,
    finite_between,
    missing_directory,
    port,
    seed,
)
from prenoise.ref2va.cli_options import check_request_outputs, generate_out_path

__all__ = ["main"]

DEBUG_ENV_VAR = "PRENOISE_DEBUG"
"""`PRENOISE_DEBUG=1` (like `--debug`): let errors propagate with their traceback."""

EXIT_USAGE = 2
"""Bad input, or a missing pip extra: one-line `error: …`."""
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
none). `vllm-omni-verify` checks for vLLM-Omni itself."""

console = Console()


def _cmd_demo(args: argparse.Namespace) -> int:
    from prenoise.cli.demo import run_demo

    with console.status("running the serial and the overlapped arm…"):
        result = run_demo(seed=args.seed, encode_seconds=args.encode_seconds)
    table = Table(title=f"core demo: {result.numel / 1e6:.1f}M noise values, seed {args.seed}")
    table.add_column("stage (s)")
    table.add_column("serial", justify="right")
    table.add_column("overlapped", justify="right")
    for key in result.serial_s:
        table.add_row(key, f"{result.serial_s[key]:.3f}", f"{result.overlapped_s[key]:.3f}")
    console.print(table)
    console.print(f"verify: {result.summary()}")
    return 0 if result.equal else 1


def _cmd_doctor(args: argparse.Namespace) -> int:
    from prenoise.cli.doctor import doctor_table

    console.print(doctor_table())
    return 0


def _cmd_stream_digest(args: argparse.Namespace) -> int:
    from prenoise.noise.streams import stream_digest

    print(stream_digest(args.stream, args.seed, args.count, args.dtype))
    return 0


def _counts(text: str) -> list[int]:
    """`--count`: one element count >= 16, or several comma-separated (drawn in order)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count or count list: {text!r}") from None
    if any(n < 16 or n > 1 << 33 for n in counts):
        raise argparse.ArgumentTypeError(f"each count must be in [16, 2**33], got {text!r}")
    return counts


def _byte_size(text: str) -> int:
    """`--memory-budget`: a byte count such as `8GiB`, `500MB` or `1048576`."""
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8GiB)") from None


def _cmd_compare(args: argparse.Namespace) -> int:
    from prenoise.verify import compare, load_saved, require_inputs_fit

    missing = None
    if args.json:  # the report must not overwrite what it describes
        report_path = check_output_file(args.json, "--json")
        inputs = [("A", Path(args.a)), ("B", Path(args.b))]
        check_outputs_are_not_inputs([("--json", report_path)], inputs)
        missing = missing_directory(report_path, "--json")
    # Before anything is inflated: both files' declared contents must fit the budget.
    require_inputs_fit((args.a, args.b), args.memory_budget)
    # Exit status: 0 equal, 1 different, 2 cannot compare (UncomparableError, a user error).
    a = load_saved(args.a, args.memory_budget)
    report = compare(a, load_saved(args.b, args.memory_budget))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(report.to_json(indent=2))
        _print_created([missing])
    console.print(report.summary())
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
    from prenoise.guards.extras import extra_for_module

    extra = extra_for_module(error.name)
    if extra is None:
        return None
    return f"{error.name} is not installed: pip install 'prenoise[{extra}]'"


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
            console.print(f"created the directory {escape(str(entry[1]))} ({entry[0]})")


def _stage_table(title: str, seconds: dict[str, float]) -> Table:
    table = Table(title=title)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for name, value in seconds.items():
        table.add_row(name, f"{value:.3f}")
    return table


def _cmd_generate(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    from prenoise.ref2va.cli_options import load_models, recipe_from_args
    from prenoise.ref2va.pipeline import Ref2VAPipeline
    from prenoise.ref2va.request_budget import check_request
    from prenoise.ref2va.sampler import StepInfo

    recipe = recipe_from_args(args)
    missing = check_request_outputs(args, recipe)
    out = generate_out_path(args, recipe)
    check_request(recipe)  # too big or bad media fails here, before any model work
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        stage = progress.add_task("load models", total=None)
        pipeline = Ref2VAPipeline(load_models(recipe), device=recipe.device)
        steps = progress.add_task("denoise", total=recipe.steps, visible=False)

        def on_stage(name: str) -> None:
            progress.update(stage, description=name)
            if name.startswith("denoise"):
                progress.reset(steps, total=recipe.steps, visible=True, description=name)

        def on_step(info: StepInfo) -> None:
            progress.update(steps, completed=info.step)

        result = pipeline.generate(
            recipe,
            out,
            args.arm,
            on_stage=on_stage,
            callback=on_step,
            prepare_next_output=args.prepare_next_output,
        )
    console.print(_stage_table(f"{recipe.name}: {args.arm} arm", result.stage_seconds))
    for event in result.prediction_events:
        console.print(f"[yellow]prediction fallback[/]: {event}")
    _print_created(missing)
    for path in result.paths:
        console.print(f"wrote [bold]{path}[/]")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from prenoise.ref2va.cli_options import load_models, recipe_from_args
    from prenoise.ref2va.pipeline import Ref2VAPipeline
    from prenoise.ref2va.request_budget import check_request
    from prenoise.ref2va.verification import verify_recipe

    recipe = recipe_from_args(args)
    missing = check_request_outputs(args, recipe)
    check_request(recipe)
    with console.status("preparing the request with both arms…"):
        pipeline = Ref2VAPipeline(load_models(recipe), device=recipe.device)
        result = verify_recipe(pipeline, recipe)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result.to_json(), indent=2))
    table = Table(title=f"{recipe.name}: serial vs overlapped")
    for column in ("field", "equal", "shape", "sha256 (serial)"):
        table.add_column(column)
    for name, entry in result.to_json()["fields"].items():
        mark = "[green]yes[/]" if entry["equal"] else f"[red]NO[/] {entry['differences']}"
        table.add_row(name, mark, str(entry.get("shape", "")), entry.get("sha256", "")[:16])
    console.print(table)
    style = "green" if result.equal else "red"
    console.print(f"[{style}]{result.summary()}[/]")
    if args.json:
        _print_created(missing)
        console.print(f"wrote the per-field report to [bold]{args.json}[/]", soft_wrap=True)
    return 0 if result.equal else 1


def _bench_table(summary: dict[str, object]) -> Table:
    serial, overlapped, delta = (summary[k] for k in ("serial", "overlapped", "delta"))
    assert isinstance(serial, dict) and isinstance(overlapped, dict) and isinstance(delta, dict)
    table = Table(title=f"{summary['recipe']}: {summary['pairs']} pairs, {summary['timed']}")
    table.add_column("metric (median)", no_wrap=True)
    for column in ("serial", "overlapped", "Δ per pair", "Δ min…max"):
        table.add_column(column, justify="right", no_wrap=True)
    for metric, stats in serial.items():
        fmt = (lambda v: f"{v / 2**20:.0f}MiB") if metric == "peak_rss_bytes" else "{:.3f}".format
        d = delta.get(metric, {"median": 0.0, "per_pair": [0.0]})
        table.add_row(
            metric,
            fmt(stats["median"]),
            fmt(overlapped[metric]["median"]),
            fmt(d["median"]),
            f"{fmt(min(d['per_pair']))}…{fmt(max(d['per_pair']))}",
        )
    return table


def _cmd_bench(args: argparse.Namespace) -> int:
    from prenoise.ref2va.bench import BenchConfig, run_bench
    from prenoise.ref2va.cli_options import load_models, recipe_from_args
    from prenoise.ref2va.pipeline import Ref2VAPipeline
    from prenoise.ref2va.request_budget import check_request

    recipe = recipe_from_args(args)
    missing = check_request_outputs(args, recipe)
    check_request(recipe)
    config = BenchConfig(args.pairs, args.warmup, args.full, args.encoder_threads)
    with console.status("loading models…") as status:
        pipeline = Ref2VAPipeline(load_models(recipe), device=recipe.device)
        result = run_bench(pipeline, recipe, config, on_request=status.update)
    summary = result.summary
    console.print(_bench_table(summary))
    console.print(f"threads: {summary['threads']}; machine: {summary['machine']}", soft_wrap=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=2))
        console.print(f"wrote {args.json}")
    if args.trace_dir:
        from prenoise.observe.timeline_plot import plot_timelines

        trace_dir = Path(args.trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        for arm, trace in result.chrome_traces().items():
            (trace_dir / f"{recipe.name}-{arm}.trace.json").write_text(json.dumps(trace))
        png = plot_timelines(
            result.last_spans(),
            trace_dir / f"{recipe.name}-timeline.png",
            title=f"{recipe.name}: last pair, threads as lanes",
        )
        console.print(f"wrote Chrome traces and {png} to {trace_dir}")
    _print_created(missing)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # `serve` and `ref2va` extras: checked by `_require_extras`

    from prenoise.ref2va.cli_options import with_limit_overrides
    from prenoise.ref2va.config import RecipeError, load_recipe
    from prenoise.serve import ServeLimits, ServeSettings, create_app

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
    )
    with console.status("loading models…"):
        app = create_app(settings)
    console.print(
        f"serving {recipe.name} on http://{args.host}:{args.port} (outputs: "
        f"{settings.output_dir}, media root: {media_root}, "
        f"prepare-ahead: {args.prepare_ahead})",
        soft_wrap=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _cmd_vllm_omni_verify(args: argparse.Namespace) -> int:
    from prenoise.integrations.vllm_omni.cli import run

    return run(args, console)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prenoise",
        description="Prepare diffusion noise off the critical path, bit-identical to serial.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="prepare noise during a stand-in encode and verify it")
    demo.add_argument("--seed", type=seed, default=42)
    demo.add_argument(
        "--encode-seconds",
        type=finite_between(0.0, 60.0),
        default=0.6,
        help="seconds the stand-in encoder holds the request thread (0..60; default 0.6)",
    )
    demo.set_defaults(func=_cmd_demo)

    from prenoise.ref2va.cli_options import add_request_arguments
    from prenoise.ref2va.limits import add_limit_arguments

    gen = sub.add_parser("generate", help="run a Ref2VA request and write MP4(s)")
    add_request_arguments(gen)
    gen.add_argument("--arm", choices=("serial", "overlapped"), default="overlapped")
    gen.add_argument("--out", help="output MP4 (default: OUTPUT_DIR/NAME.mp4)")
    gen.add_argument(
        "--prepare-next-output",
        action="store_true",
        help="draw output i+1's noise while output i denoises (same bits)",
    )
    gen.set_defaults(func=_cmd_generate)

    ver = sub.add_parser("verify", help="prove both arms prepare bitwise-identical inputs")
    add_request_arguments(ver)
    ver.add_argument("--json", help="write the per-field report here")
    ver.set_defaults(func=_cmd_verify)

    bench = sub.add_parser("bench", help="alternating serial/overlapped pairs, same process")
    add_request_arguments(bench)
    bench.add_argument("--pairs", type=at_least(1), default=5)
    bench.add_argument("--warmup", type=at_least(0), default=2)
    bench.add_argument("--full", action="store_true", help="time whole requests, not preparation")
    bench.add_argument(
        "--encoder-threads", type=at_least(1), help="torch intra-op threads for the encoders"
    )
    bench.add_argument("--json", help="write the summary here")
    bench.add_argument("--trace-dir", help="write Chrome traces and a PNG timeline here")
    bench.set_defaults(func=_cmd_bench)

    doctor = sub.add_parser("doctor", help="which noise backend is active, and why")
    doctor.set_defaults(func=_cmd_doctor)

    digest = sub.add_parser(
        "stream-digest",
        help="sha256 of a noise stream's raw bytes, to compare machines "
        "(make aarch64-stream-digest prints the emulated aarch64 one)",
    )
    digest.add_argument("--stream", choices=("native", "x86", "libm"), required=True)
    digest.add_argument("--seed", type=seed, required=True)
    digest.add_argument("--count", type=_counts, required=True, help="N or N1,N2,... (>= 16)")
    digest.add_argument("--dtype", choices=("float32", "bfloat16", "float64"), default="float32")
    digest.set_defaults(func=_cmd_stream_digest)

    serve = sub.add_parser("serve", help="HTTP service: queue Ref2VA requests on one model")
    serve.add_argument("--recipe", required=True, type=Path, help="models + request defaults")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    serve.add_argument("--port", type=port, default=8000)
    serve.add_argument("--media-root", type=Path, help="reference paths must lie inside it")
    serve.add_argument("--output-dir", type=Path, help="default: OUTPUT_DIR/serve")
    serve.add_argument(
        "--prepare-ahead",
        type=at_least(0),
        default=1,
        metavar="N",
        help="queued requests prepared (media + noise) during the current denoise",
    )
    serve.add_argument("--max-upload-mb", type=at_least(1), default=64, help="request body limit")
    serve.add_argument(
        "--max-queued", type=at_least(1), default=32, help="queued requests (more: 429)"
    )
    serve.add_argument(
        "--max-queued-upload-mb",
        type=at_least(1),
        default=256,
        help="upload bytes held for queued and running requests (more: 429)",
    )
    serve.add_argument(
        "--body-idle-timeout",
        type=at_least(1),
        default=30,
        metavar="S",
        help="seconds a request body may send nothing before it is refused (408)",
    )
    serve.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default="info")
    add_limit_arguments(serve)
    serve.set_defaults(func=_cmd_serve)

    cmp_ = sub.add_parser("compare", help="bitwise-compare two torch.save files")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--json", help="write the per-field report here (not an input)")
    cmp_.add_argument(
        "--memory-budget",
        type=_byte_size,
        metavar="SIZE",
        help="refuse inputs whose uncompressed contents together exceed SIZE, e.g. 8GiB "
        "(default: the memory available)",
    )
    cmp_.set_defaults(func=_cmd_compare)

    from prenoise.integrations.vllm_omni.cli import add_arguments as add_vllm_omni_arguments

    vllm = sub.add_parser(
        "vllm-omni-verify",
        help="vLLM-Omni MiniMax-H3 with stand-in weights: plugin off vs on, bitwise",
    )
    add_vllm_omni_arguments(vllm)
    vllm.set_defaults(func=_cmd_vllm_omni_verify)

    debug_help = f"show tracebacks instead of one-line errors (also: {DEBUG_ENV_VAR}=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    for command in sub.choices.values():  # also accepted after the command
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help
        )
    return parser


def _world_size() -> int:
    """`WORLD_SIZE` set by `torchrun` (1 when unset): above 1, requests run distributed."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `prenoise` console script; returns the exit status.

    User errors and missing pip extras print one line and return 2; any other exception prints
    one line and returns `EXIT_INTERNAL` (70). Ctrl-C returns 130, SIGTERM/SIGHUP 128 + signum
    (after the same clean-up as Ctrl-C). `--debug` or `PRENOISE_DEBUG=1` re-raise instead, with
    the traceback.
    """
    from prenoise.guards.signals import Terminated, install_termination_handlers

    debug = os.environ.get(DEBUG_ENV_VAR) == "1"  # until the command line is parsed
    restore = _nothing_to_restore
    try:
        args = build_parser().parse_args(argv)
        debug = debug or args.debug
        # uvicorn handles serve's signals itself (graceful shutdown).
        if args.command != "serve":
            restore = install_termination_handlers()
        return _run(args)
    except _user_errors() as error:
        if debug:
            raise
        console.print(f"[red]error:[/] {escape(str(error))}", soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if debug:
            raise
        console.print("[red]interrupted[/]")
        return 130
    except Terminated as stop:
        if debug:
            raise
        console.print(f"[red]terminated[/] by {stop.signal_name}")
        return 128 + stop.signum
    except Exception as error:  # a bug, or an import of an extra that is not installed
        if debug:
            raise
        hint = _missing_extra(error) if isinstance(error, ModuleNotFoundError) else None
        if hint is not None:
            console.print(f"[red]error:[/] {escape(hint)}", soft_wrap=True)
            return EXIT_USAGE
        console.print(escape(_internal_error(error)), style="red", soft_wrap=True)
        return EXIT_INTERNAL
    finally:
        restore()


def _nothing_to_restore() -> None:
    pass


def _run(args: argparse.Namespace) -> int:
    """Check the environment and the command's extras, then run the command."""
    from prenoise.guards.env import check_environment, env_choice
    from prenoise.noise import kernel

    env_choice(DEBUG_ENV_VAR, ("0", "1"), "0")  # an unknown value is a user error
    kernel.check_environment()
    check_environment()  # every PRENOISE_* variable, so a bad value never waits for first use
    _require_extras(args)
    func = args.func
    if args.command in ("generate", "verify", "bench") and _world_size() > 1:
        from prenoise.distributed.commands import run_distributed

        func = run_distributed
    return int(func(args))


if __name__ == "__main__":
    sys.exit(main())
