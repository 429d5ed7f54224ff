"""The `prenoise` argument parser: every subcommand and its options (`commands` runs them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from prenoise.cli.args import LOG_LEVELS, at_least, finite_between, port, seed
from prenoise.guards.sizes import byte_count
from prenoise.noise.streams import DIGEST_DTYPES

__all__ = ["DEBUG_ENV_VAR", "HelpFormatter", "build_parser", "byte_size", "counts"]

DEBUG_ENV_VAR = "PRENOISE_DEBUG"
"""`PRENOISE_DEBUG=1` (like `--debug`): let errors propagate with their traceback."""


def counts(text: str) -> list[int]:
    """`--count`: one element count >= 16, or several comma-separated (drawn in order)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count or count list: {text!r}") from None
    if any(n < 16 or n > 1 << 33 for n in counts):
        raise argparse.ArgumentTypeError(f"each count must be in [16, 2**33], got {text!r}")
    return counts


def byte_size(text: str) -> int:
    """`--memory-budget`: a byte count such as `8GiB`, `500MB` or `1048576`
    (`prenoise.guards.sizes.byte_count`, as the library takes them)."""
    try:
        return byte_count(text, "size")
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8GiB)") from None


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default, unless the help already says it, the option is
    required or a flag, or there is no value to show (then the help says in words what happens
    without it, e.g. "default: the recipe's seed"; `tests/test_cli_help.py` checks both)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, [], argparse.SUPPRESS)
        if not action.option_strings or action.required or "default" in text or not shown:
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    """The `prenoise` parser; `args.command` names the subcommand to run.

    No option may be abbreviated (`allow_abbrev=False`): `--dur 2` is an error, not `--duration`,
    so a typo or an option a later release adds can never silently take another's value."""
    parser = argparse.ArgumentParser(
        prog="prenoise",
        description="Prepare diffusion noise off the critical path, bit-identical to serial.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version", action="version", version=f"prenoise {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=text, description=text, formatter_class=HelpFormatter, allow_abbrev=False
        )

    demo = add_command(
        "demo",
        "prepare noise during a stand-in encode and verify it; with diffusers or vllm-omni: "
        "that integration on tiny pipelines (no checkpoint), verified bitwise and timed",
    )
    demo.add_argument(
        "integration",
        nargs="?",
        choices=("diffusers", "vllm-omni"),
        help="diffusers: enable(pipe) on a tiny Wan pipeline (--modular: a tiny modular "
        "LTX-2 pipeline) against the plain call; vllm-omni: prenoise vllm-omni-verify with its "
        "defaults; default: the core alone",
    )
    demo.add_argument("--seed", type=seed, default=42, help="the noise seed")
    demo.add_argument(
        "--encode-seconds",
        type=finite_between(0.0, 60.0),
        help="seconds the stand-in encoder holds the request thread (0..60; default 0.6; "
        "the core demo only)",
    )
    demo.add_argument(
        "--modular",
        action="store_true",
        help="demo diffusers: a modular pipeline (LTX2ModularPipeline) instead of WanPipeline",
    )
    demo.add_argument(
        "--pairs",
        type=at_least(0),
        metavar="N",
        help="demo diffusers: timed alternating pairs, plain vs enabled call (default: 3)",
    )
    demo.add_argument(
        "--json",
        help="demo vllm-omni: the per-field report (default: outputs/vllm-omni-demo/verify.json)",
    )

    from prenoise.ref2va.catalog import resolve_recipe
    from prenoise.ref2va.cli_options import add_request_arguments
    from prenoise.ref2va.limits import add_limit_arguments

    gen = add_command("generate", "run a Ref2VA request and write MP4(s)")
    add_request_arguments(gen)
    gen.add_argument(
        "--arm",
        choices=("serial", "overlapped"),
        default="overlapped",
        help="serial: draw the noise after encoding; overlapped: during it (the same bits)",
    )
    gen.add_argument("--out", help="output MP4 (default: OUTPUT_DIR/NAME.mp4)")
    gen.add_argument(
        "--prepare-next-output",
        action="store_true",
        help="draw output i+1's noise while output i denoises (same bits)",
    )

    ver = add_command("verify", "prove both arms prepare bitwise-identical inputs")
    add_request_arguments(ver)
    ver.add_argument("--json", help="write the per-field report here (default: none written)")
    ver.add_argument(
        "--pairs",
        type=at_least(0),
        default=0,
        metavar="N",
        help="after the check, time N alternating serial/overlapped pairs of the same request "
        "(as prenoise bench) and show their medians; 0: the checked runs' own timing, one run "
        "per arm",
    )

    bench = add_command("bench", "alternating serial/overlapped pairs, same process")
    add_request_arguments(bench)
    bench.add_argument(
        "--pairs", type=at_least(1), default=5, help="timed pairs (the order alternates)"
    )
    bench.add_argument(
        "--warmup", type=at_least(0), default=2, help="untimed requests before the pairs"
    )
    bench.add_argument("--full", action="store_true", help="time whole requests, not preparation")
    bench.add_argument(
        "--encoder-threads",
        type=at_least(1),
        help="torch intra-op threads for the encoders (default: torch's, unchanged)",
    )
    bench.add_argument("--json", help="write the summary here (default: none written)")
    bench.add_argument(
        "--trace-dir",
        help="write Chrome traces and a PNG timeline here (default: none written)",
    )

    add_command("doctor", "which noise backend is active, and why")
    add_command("recipes", "the recipes shipped with prenoise (use one as --recipe NAME)")

    digest = add_command(
        "stream-digest",
        "sha256 of a noise stream's raw bytes, to compare machines "
        "(make aarch64-stream-digest prints the emulated aarch64 one)",
    )
    digest.add_argument(
        "--stream",
        choices=("native", "x86", "libm"),
        required=True,
        help="native: local torch's arithmetic; x86, libm: the named streams",
    )
    digest.add_argument("--seed", type=seed, required=True, help="the generator's seed")
    digest.add_argument("--count", type=counts, required=True, help="N or N1,N2,... (>= 16)")
    digest.add_argument(
        "--dtype",
        choices=tuple(DIGEST_DTYPES),
        default="float32",
        help="the dtype drawn (its raw bytes are hashed)",
    )

    serve = add_command("serve", "HTTP service: queue Ref2VA requests on one model")
    serve.add_argument(
        "--recipe",
        required=True,
        type=resolve_recipe,
        help="models + request defaults: a file or a shipped recipe's name",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="bind address (default: 127.0.0.1, loopback only)"
    )
    serve.add_argument("--port", type=port, default=8000, help="TCP port; 0: any free port")
    serve.add_argument(
        "--media-root",
        type=Path,
        help="reference paths must lie inside it (default: none; requests upload their files)",
    )
    serve.add_argument("--output-dir", type=Path, help="where MP4s go (default: OUTPUT_DIR/serve)")
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
    serve.add_argument(
        "--body-timeout",
        type=at_least(1),
        default=120,
        metavar="S",
        help="seconds a request body may take in all before it is refused (408)",
    )
    serve.add_argument(
        "--headers-timeout",
        type=at_least(1),
        default=10,
        metavar="S",
        help="seconds a connection may take to send its request headers (408, closed)",
    )
    serve.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default="info",
        help="uvicorn's log level",
    )
    add_limit_arguments(serve)

    cmp_ = add_command("compare", "bitwise-compare two torch.save files")
    cmp_.add_argument("a", help="the first torch.save file")
    cmp_.add_argument("b", help="the second torch.save file")
    cmp_.add_argument(
        "--json", help="write the per-field report here, not an input (default: none written)"
    )
    cmp_.add_argument(
        "--memory-budget",
        type=byte_size,
        metavar="SIZE",
        help="refuse inputs whose uncompressed contents together exceed SIZE, e.g. 8GiB "
        "(default: the memory available)",
    )

    from prenoise.integrations.vllm_omni.cli import add_arguments as add_vllm_omni_arguments

    vllm = add_command(
        "vllm-omni-verify", "vLLM-Omni MiniMax-H3 with stand-in weights: plugin off vs on, bitwise"
    )
    add_vllm_omni_arguments(vllm)
    vllm.formatter_class = HelpFormatter  # keeps its description's line breaks, shows defaults

    from prenoise.cli.sglang_verify import add_arguments as add_sglang_arguments

    sglang = add_command(
        "sglang-verify", "SGLang MiniMax-H3 through its real stages: plugin off vs on, bitwise"
    )
    add_sglang_arguments(sglang)

    from prenoise.cli.rollout_check import add_arguments as add_rollout_check_arguments

    rollout = add_command(
        "rollout-check",
        "noise records of a batch: collisions, ranks that disagree, repeats, a rerun's bits",
    )
    add_rollout_check_arguments(rollout)

    for long_command in (gen, ver, bench):
        long_command.add_argument(
            "--quiet",
            action="store_true",
            help="no progress (on a terminal a live line, elsewhere one stderr line per stage); "
            "results and errors still print",
        )

    debug_help = f"show tracebacks instead of one-line errors (also: {DEBUG_ENV_VAR}=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    for command in sub.choices.values():  # also accepted after the command
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help
        )
    return parser


def _version() -> str:
    """The installed distribution's version (what pip installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prenoise")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed: run from a source tree)"
