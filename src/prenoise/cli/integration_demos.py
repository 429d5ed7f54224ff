"""`prenoise demo diffusers [--modular]` and `prenoise demo vllm-omni`: each integration at work
on tiny pipelines with random weights (no checkpoint, nothing downloaded), ending with the
bitwise verdict and the timing.

- `diffusers`: `integrations.diffusers.demo` (a tiny Wan 2.1 `WanPipeline`; `--modular`: a tiny
  `LTX2ModularPipeline`): the plain call against `enable(pipe)`'s, exit 0 only if every output
  is bitwise equal, the global RNG unchanged and every planned draw prepared ahead and served.
- `vllm-omni`: `prenoise vllm-omni-verify` with its defaults (upstream's real MiniMax-H3
  `forward` with stand-in components, plugin off vs on), its JSON written to `--json`.

Exit statuses as `prenoise demo`'s: 0 verified, 1 not (a difference, or nothing prepared
ahead), 2 a missing package (one line naming what to install) or bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

from rich.console import Console
from rich.table import Table

from prenoise.guards.extras import install_command
from prenoise.guards.usage import UsageError
from prenoise.observe.console_text import cell, line, title
from prenoise.observe.progress import CommandProgress

__all__ = [
    "DIFFUSERS_MODULES",
    "VLLM_OMNI_JSON",
    "check_options",
    "run",
    "run_diffusers",
    "run_vllm_omni",
]

DIFFUSERS_MODULES = ("diffusers", "transformers", "tokenizers")
"""What the tiny pipelines need: diffusers (the `diffusers` extra) and transformers (with its
`tokenizers`) for the text encoders and the tokenizer."""

DEFAULT_PAIRS = 3
DEFAULT_ENCODE_SECONDS = 0.6
"""The core demo's stand-in encode, unless `--encode-seconds` says."""
VLLM_OMNI_JSON = "outputs/vllm-omni-demo/verify.json"
"""Where `prenoise demo vllm-omni` writes its per-field report unless `--json` says."""


def _missing(modules: tuple[str, ...]) -> list[str]:
    found = []
    for name in modules:
        try:
            found.append(importlib.util.find_spec(name) is not None)
        except (ImportError, ValueError):
            found.append(False)
    return [name for name, ok in zip(modules, found, strict=True) if not ok]


def run(args: argparse.Namespace, console: Console) -> int | None:
    """`prenoise demo [INTEGRATION]`: the integration's demo and its exit status, or None for
    the core demo (its `--encode-seconds` default filled in). An option of another demo is
    refused first (`UsageError`: one line, exit 2)."""
    check_options(args)
    if args.integration == "diffusers":
        return run_diffusers(args, console)
    if args.integration == "vllm-omni":
        return run_vllm_omni(args, console)
    if args.encode_seconds is None:
        args.encode_seconds = DEFAULT_ENCODE_SECONDS
    return None


def check_options(args: argparse.Namespace) -> None:
    """Refuse an option the chosen demo does not take (`UsageError`: one line, exit 2)."""
    target = args.integration
    given = {
        "--encode-seconds": args.encode_seconds is not None,
        "--modular": args.modular,
        "--pairs": args.pairs is not None,
        "--json": args.json is not None,
    }
    takes = {
        None: {"--encode-seconds"},
        "diffusers": {"--modular", "--pairs"},
        "vllm-omni": {"--json"},
    }[target]
    for option, set_ in given.items():
        if set_ and option not in takes:
            which = f"prenoise demo {target}" if target else "prenoise demo (the core demo)"
            raise UsageError(f"{option}: {which} does not take it")


def run_diffusers(args: argparse.Namespace, console: Console) -> int:
    """The diffusers demo; 0 verified, 1 not, 2 a missing package."""
    missing = _missing(DIFFUSERS_MODULES)
    if missing:
        console.print(
            line(
                ("error:", "red"),
                f" prenoise demo diffusers needs {', '.join(missing)} (not installed): "
                f"{install_command('diffusers')} transformers",
            ),
            soft_wrap=True,
        )
        return 2
    from prenoise.integrations.diffusers.demo import median, run_diffusers_demo

    pairs = DEFAULT_PAIRS if args.pairs is None else args.pairs
    with CommandProgress(console, "demo diffusers") as progress:
        result = run_diffusers_demo(args.modular, args.seed, pairs, stage=progress.stage)
    console.print(
        line(
            f"{result.pipeline}: tiny random weights, built offline (no checkpoint), seed "
            f"{args.seed}"
        ),
        soft_wrap=True,
    )
    prepared_style = "green" if result.prepared else "red"
    console.print(line("enable(pipe): ", (result.served_line(), prepared_style)), soft_wrap=True)
    if pairs:
        table = Table(title=title(f"{result.pipeline}: medians of {pairs} alternating pairs"))
        for column in ("call (s)", "plain pipe(...)", "enabled pipe(...)", "enabled − plain"):
            table.add_column(column, justify="right" if column != "call (s)" else "left")
        plain, enabled = median(result.plain_s), median(result.enabled_s)
        table.add_row(
            cell("whole call"), f"{plain:.3f}", f"{enabled:.3f}", f"{enabled - plain:+.3f}"
        )
        console.print(table)
        console.print(
            line(
                "timing: a tiny pipeline's noise is a few thousand values, so this shows "
                "prenoise's own cost per call, not a saving (real sizes: benchmarks/diffusers.md)"
            ),
            soft_wrap=True,
        )
    for field in result.comparison.differing:
        console.print(line(("differs:", "red"), f" {field.path}: {field.differences}"))
    if result.verified:
        verdict = ("verified: ", "green")
    elif not result.equal:
        verdict = ("NOT EQUAL: ", "red")
    else:  # equal arms prove nothing of prenoise's preparation when it prepared nothing
        verdict = ("NOT VERIFIED (not prepared ahead): ", "red")
    console.print(line(verdict, (result.summary(), verdict[1])), soft_wrap=True)
    return 0 if result.verified else 1


def run_vllm_omni(args: argparse.Namespace, console: Console) -> int:
    """`prenoise vllm-omni-verify` with its defaults (it is the checkpoint-free check of the
    plugin), its JSON written to `--json`; then its time, vLLM-Omni's import apart."""
    if importlib.util.find_spec("vllm_omni") is None:
        console.print(
            line(
                ("error:", "red"),
                " prenoise demo vllm-omni needs vLLM-Omni (not installed here): run the "
                "prenoise of an environment that has it (0.30.0 to 0.32.0rc1 are reviewed); "
                "from a prenoise clone: make setup-vllm-omni, then "
                ".venv-vllm-omni/bin/prenoise demo vllm-omni",
            ),
            soft_wrap=True,
        )
        return 2
    from prenoise.cli.parser import build_parser
    from prenoise.integrations.vllm_omni.cli import run

    json_path = args.json if args.json is not None else VLLM_OMNI_JSON
    verify_args = build_parser().parse_args(
        ["vllm-omni-verify", "--seed", str(args.seed), "--json", json_path]
    )
    console.print(
        line(
            "prenoise demo vllm-omni runs `prenoise vllm-omni-verify --seed "
            f"{args.seed} --json {json_path}` (upstream's real MiniMax-H3 forward, tiny "
            "stand-in components, plugin off vs on)"
        ),
        soft_wrap=True,
    )
    start = time.perf_counter()
    with CommandProgress(console, "demo vllm-omni") as progress:
        progress.stage("importing vLLM-Omni")
        import vllm_omni  # noqa: F401  (timed apart: tens of seconds on a busy machine)
    imported = time.perf_counter()
    status = run(verify_args, console)
    done = time.perf_counter()
    console.print(
        line(
            f"timing: both arms of MiniMax-H3's forward and the comparison {done - imported:.1f} s "
            f"(importing vLLM-Omni before them: {imported - start:.1f} s)"
        ),
        soft_wrap=True,
    )
    return status
