"""The `prenoise` argument parser: every subcommand and its options (`commands` runs them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from prenoise.cli.args import LOG_LEVELS, at_least, finite_between, port, seed

__all__ = ["DEBUG_ENV_VAR", "build_parser", "byte_size", "counts"]

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
    """`--memory-budget`: a byte count such as `8GiB`, `500MB` or `1048576`."""
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8GiB)") from None


def build_parser() -> argparse.ArgumentParser:
    """The `prenoise` parser; `args.command` names the subcommand to run."""
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

    ver = sub.add_parser("verify", help="prove both arms prepare bitwise-identical inputs")
    add_request_arguments(ver)
    ver.add_argument("--json", help="write the per-field report here")
    ver.add_argument(
        "--pairs",
        type=at_least(0),
        default=0,
        metavar="N",
        help="after the check, time N alternating serial/overlapped pairs of the same request "
        "(as prenoise bench) and show their medians; 0: the checked runs' own timing, one run "
        "per arm",
    )

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

    sub.add_parser("doctor", help="which noise backend is active, and why")

    digest = sub.add_parser(
        "stream-digest",
        help="sha256 of a noise stream's raw bytes, to compare machines "
        "(make aarch64-stream-digest prints the emulated aarch64 one)",
    )
    digest.add_argument("--stream", choices=("native", "x86", "libm"), required=True)
    digest.add_argument("--seed", type=seed, required=True)
    digest.add_argument("--count", type=counts, required=True, help="N or N1,N2,... (>= 16)")
    digest.add_argument("--dtype", choices=("float32", "bfloat16", "float64"), default="float32")

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

    cmp_ = sub.add_parser("compare", help="bitwise-compare two torch.save files")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--json", help="write the per-field report here (not an input)")
    cmp_.add_argument(
        "--memory-budget",
        type=byte_size,
        metavar="SIZE",
        help="refuse inputs whose uncompressed contents together exceed SIZE, e.g. 8GiB "
        "(default: the memory available)",
    )

    from prenoise.integrations.vllm_omni.cli import add_arguments as add_vllm_omni_arguments

    vllm = sub.add_parser(
        "vllm-omni-verify",
        help="vLLM-Omni MiniMax-H3 with stand-in weights: plugin off vs on, bitwise",
    )
    add_vllm_omni_arguments(vllm)

    debug_help = f"show tracebacks instead of one-line errors (also: {DEBUG_ENV_VAR}=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    for command in sub.choices.values():  # also accepted after the command
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help
        )
    return parser
