"""The `prenoise` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

__all__ = ["main"]

console = Console()


def _cmd_demo(args: argparse.Namespace) -> int:
    from prenoise.demo import run_demo

    with console.status("running the serial and the overlapped arm…"):
        result = run_demo(seed=args.seed, encode_seconds=args.encode_seconds)
    table = Table(title=f"core demo: {result.numel / 1e6:.1f}M noise values, seed {args.seed}")
    table.add_column("stage (s)")
    table.add_column("serial", justify="right")
    table.add_column("overlapped", justify="right")
    for key in result.serial_s:
        table.add_row(key, f"{result.serial_s[key]:.3f}", f"{result.overlapped_s[key]:.3f}")
    console.print(table)
    console.print(f"verify: {result.report.summary()}; global RNG unchanged")
    return 0 if result.report.equal else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    import torch

    from prenoise.verify import compare

    a = torch.load(args.a, map_location="cpu", weights_only=True)
    b = torch.load(args.b, map_location="cpu", weights_only=True)
    report = compare(a, b)
    if args.json:
        Path(args.json).write_text(report.to_json(indent=2))
    console.print(report.summary())
    return 0 if report.equal else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prenoise",
        description="Prepare diffusion noise off the critical path, bit-identical to serial.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="prepare noise during a stand-in encode and verify it")
    demo.add_argument("--seed", type=int, default=42)
    demo.add_argument("--encode-seconds", type=float, default=0.6)
    demo.set_defaults(func=_cmd_demo)

    cmp_ = sub.add_parser("compare", help="bitwise-compare two torch.save files")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--json", help="write the per-field report here")
    cmp_.set_defaults(func=_cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `prenoise` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
