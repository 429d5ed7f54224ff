"""`prenoise vllm-omni-verify`: plugin off vs on in the real MiniMax-H3 pipeline, as JSON."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (defaults: a 4 s 256x256 request on a synthetic image reference)."""
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--duration", type=float, default=4.0, help="seconds (upstream: 4..15)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--height", type=int, default=256)
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="PATH",
        help="image (png/jpg/webp) or video (mp4/mov) reference; repeat for several "
        "(default: a synthetic 512x384 image)",
    )
    parser.add_argument("--outputs", type=int, default=1, help="outputs per request (seed + i)")
    parser.add_argument("--steps", type=int, default=2, help="denoising steps")
    parser.add_argument("--json", required=True, help="write the per-field report here")


def run(args: argparse.Namespace, console: Console) -> int:
    """Verify; exit 0 only if every field is bitwise equal and the global RNG is unchanged."""
    try:
        import vllm_omni  # noqa: F401
    except ImportError:
        console.print(
            "[red]error:[/] vllm-omni is not installed here; run .venv-vllm-omni/bin/prenoise "
            "(make setup-vllm-omni)"
        )
        return 2
    from prenoise.integrations.vllm_omni.standins import synthetic_image
    from prenoise.integrations.vllm_omni.verification import (
        H3Request,
        references_for,
        verify_request,
    )

    out = Path(args.json)
    if out.is_dir():
        console.print(f"[red]error:[/] --json {out}: is a directory")
        return 2
    if args.outputs < 1 or args.steps < 1:
        console.print("[red]error:[/] --outputs and --steps must be >= 1")
        return 2
    with tempfile.TemporaryDirectory(prefix="prenoise-vllm-omni-") as scratch:
        try:
            references = references_for(args.reference) or (
                synthetic_image(Path(scratch) / "reference.png"),
            )
        except FileNotFoundError as error:
            console.print(f"[red]error:[/] {error}")
            return 2
        request = H3Request(
            references,
            seed=args.seed,
            duration=args.duration,
            width=args.width,
            height=args.height,
            outputs=args.outputs,
            steps=args.steps,
        )
        with console.status("running MiniMax-H3 with the plugin off, then on…"):
            result = verify_request(request)
    report = result.to_json()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    table = Table(title="MiniMax-H3 (vllm-omni): plugin off vs on")
    for column in ("field", "equal", "shape", "drawn on (plugin on)"):
        table.add_column(column)
    drawn_on = report["arms"]["plugin_on"]["drawn_on"]
    for name, entry in report["fields"].items():
        if not name.split(".")[-1].endswith("noise") and entry["equal"]:
            continue  # the table shows the noise fields and any difference; the JSON has all
        mark = "[green]yes[/]" if entry["equal"] else f"[red]NO[/] {entry['differences']}"
        table.add_row(name, mark, str(entry["shape"]), drawn_on.get(name, ""))
    console.print(table)
    console.print(f"geometry: {report['geometry']}", soft_wrap=True)
    style = "green" if result.equal else "red"
    console.print(f"[{style}]{result.summary()}[/]")
    console.print(f"wrote {out}")
    return 0 if result.equal else 1
