"""`prenoise sglang-verify`: plugin off vs on through SGLang's real MiniMax-H3 stages, bitwise.

The proof is `prenoise.integrations.sglang.verification.verify_request`; this is its wiring:
the options, the refusals made before sglang is imported (cheapest first), a progress line per
phase on stderr, the table and the `--json` report. Nothing of the SGLang integration is
imported to build the parser, and sglang itself only when the command runs where it is
installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from prenoise.guards.atomic import write_atomic
from prenoise.guards.usage import UsageError, check_output_file, missing_directory
from prenoise.observe.console_text import cell, line, title

__all__ = ["EXIT_STATUS_HELP", "MISSING_SGLANG", "ROLLOUTS", "TASKS", "add_arguments", "run"]

TASKS = ("t2va", "fl2va", "ref2va")
"""`--task` (the same as `prenoise.integrations.sglang.verification.TASKS`)."""
ROLLOUTS = ("sde", "cps", "ode")
"""`--rollout` (the same as `prenoise.integrations.sglang.verification.ROLLOUTS`)."""

MISSING_SGLANG = (
    "sglang is not installed here: sglang-verify runs in the environment that has sglang "
    '0.5.23; install prenoise there (pip install "prenoise[sglang]") and run its prenoise '
    "sglang-verify"
)
"""The one line (after `error:`) where sglang cannot be imported."""

EXIT_STATUS_HELP = """\
One request, two arms in this process: PRENOISE_SGLANG=0 (upstream's draws), then 1 (prenoise's
prepared noise), from the same global RNG state; the plugin is the one SGLang's own loader
loads (its entry point). Stages: upstream's pre-queue hook, latent preparation, timestep
preparation, denoising (its condition noise and, for a rollout, its SDE updates) with a tiny
fake DiT and, for fl2va/ref2va, upstream's visual encoding with a fake VAE; no checkpoint.

exit status:
  0   verified: every field bitwise equal (shape, dtype, device, strides, bytes: NaN-aware),
      the global RNG state too, and the plugin-on arm served prepared noise: the initial video
      and audio noise drawn on prenoise's worker and those very tensors received by the
      Denoising stage, the visual-condition noise (fl2va, ref2va) served, every per-step
      draw of an sde/cps rollout after the first served by the look-ahead
  1   not verified: a field differs, or the plugin-on arm did not prepare what it should
      have (the JSON's not_prepared_reasons says why: upstream's code is not the reviewed
      code, a key mismatch, ...)
  2   refused before the request runs, nothing written: sglang not importable here, the
      plugin off (PRENOISE_SGLANG=0) or not loaded by SGLang's loader (entry point missing,
      SGLANG_PLUGINS), a request upstream refuses or fails itself with the plugin off (its
      message; e.g. an sde rollout, NaN at step 0 upstream), --rollout with a task other than
      t2va, an unwritable --json
  70  internal error (please report it)"""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 4.0 <= value <= 15.0:
        raise argparse.ArgumentTypeError(f"{text}: upstream takes 4 to 15 seconds")
    return value


def _bounded(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text}: expected {low}..{high}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (defaults: a 4 s t2va request at a 64-pixel short edge)."""
    parser.epilog = EXIT_STATUS_HELP
    parser.add_argument(
        "--task",
        choices=TASKS,
        default="t2va",
        help="t2va; fl2va: a first and a last keyframe; ref2va: a 300x200 image reference "
        "(resized by upstream to 3072x2048)",
    )
    parser.add_argument(
        "--rollout",
        choices=ROLLOUTS,
        help="make it a rollout request (t2va) with this SDE update type; its per-step noise, "
        "trajectory and log-probs are compared too (default: not a rollout)",
    )
    parser.add_argument(
        "--seconds", type=_seconds, default=4.0, help="target duration (upstream: 4..15)"
    )
    parser.add_argument(
        "--short-edge",
        type=_bounded(16, 768),
        default=64,
        help="the canvas' short edge in pixels (16..768; upstream recommends 768)",
    )
    parser.add_argument("--seed", type=_bounded(0, 2**63 - 1), default=42, help="the seed")
    parser.add_argument("--steps", type=_bounded(1, 50), default=3, help="denoising steps (1..50)")
    parser.add_argument("--json", help="write the per-field report here (default: none written)")


def _phase(started: float, text: str) -> None:
    sys.stderr.write(f"sglang-verify [{time.perf_counter() - started:5.1f}s] {text}\n")
    sys.stderr.flush()


def _hooks_applied() -> bool:
    """Whether SGLang's loader registered and applied prenoise's entry hooks."""
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry

    from prenoise.integrations.sglang import plugin

    ours = {
        target
        for target, hooks in HookRegistry._hooks.items()
        for _type, hook, _source in hooks
        if getattr(hook, "__module__", None) == plugin.__name__ and target in HookRegistry._patched
    }
    return {target for target, _hook in plugin.HOOKS[:2]} <= ours


def run(args: argparse.Namespace, console: Console) -> int:
    """Verify; exit status as in `EXIT_STATUS_HELP` (bad input raises `UsageError`: exit 2)."""
    if importlib.util.find_spec("sglang") is None:
        console.print(line(("error:", "red"), f" {MISSING_SGLANG}"), soft_wrap=True)
        return 2
    from prenoise.integrations.sglang import plugin

    setting = plugin.enabled()
    if setting is not True:
        raise UsageError(
            f"{plugin.ENABLE_ENV}={_env_value()!r}: the plugin is "
            + ("off: nothing to verify" if setting is False else "not set to 0 or 1")
        )
    if args.rollout is not None and args.task != "t2va":
        raise UsageError(f"--rollout: upstream rolls out t2va requests only, not {args.task}")
    missing = None
    if args.json:
        check_output_file(args.json, "--json")
        missing = missing_directory(args.json, "--json")
    started = time.perf_counter()
    _phase(started, "importing sglang's diffusion runtime (20-40 s)")
    try:
        from prenoise.integrations.sglang.harness import load_h3

        h3 = load_h3()
    except ImportError as error:
        raise UsageError(f"sglang cannot be imported here ({error}); {MISSING_SGLANG}") from None
    _phase(started, "plugin loaded by SGLang's loader (load_plugins, apply_plugin_hooks)")
    from prenoise.integrations.sglang import support

    if support.current().h3_initial and not _hooks_applied():
        raise UsageError(
            "SGLang's loader did not load prenoise's plugin (entry point prenoise of "
            "sglang.multimodal_gen.plugins not installed in this environment, or left out by "
            'SGLANG_PLUGINS): pip install "prenoise[sglang]" here'
        )
    from prenoise.integrations.sglang.verification import (
        RequestRefused,
        VerifyRequest,
        verify_request,
    )

    request = VerifyRequest(
        task=args.task,
        rollout=args.rollout,
        seconds=args.seconds,
        short_edge=args.short_edge,
        seed=args.seed,
        steps=args.steps,
    )
    try:
        result = verify_request(h3, request, lambda text: _phase(started, text))
    except RequestRefused as error:
        raise UsageError(str(error)) from None
    finally:
        h3.server_args_module.set_global_server_args(h3.previous_server_args)
    _phase(started, "done")
    report = result.to_json()
    _print(console, result)
    if args.json:
        write_atomic(args.json, json.dumps(report, indent=2), what="--json")
        if missing is not None and missing[1].is_dir():
            console.print(line(f"created the directory {missing[1]} (--json)"), soft_wrap=True)
        console.print(line("wrote the per-field report to ", (str(args.json), "bold")))
    return 0 if result.verified else 1


def _env_value() -> str | None:
    import os

    from prenoise.integrations.sglang import plugin

    return os.environ.get(plugin.ENABLE_ENV)


def _print(console: Console, result: Any) -> None:
    """The noise fields and any difference as a table, what was prepared, the verdict."""
    request = result.request
    kind = request.task + (f", {request.rollout} rollout" if request.rollout else "")
    table = Table(title=title(f"MiniMax-H3 (sglang): plugin off vs on, {kind}"))
    for column in ("field", "equal", "shape", "dtype"):
        table.add_column(column, overflow="fold")
    noisy = ("initial_video_rows", "initial_audio_rows", "cond_noise", "rollout", "rng", "dit[0]")
    for f in result.fields:
        if f.equal and not any(word in f.name for word in noisy):
            continue  # the table shows the noise-bearing fields and any difference
        table.add_row(
            cell(f.name),
            cell(("yes", "green")) if f.equal else cell(("NO", "red"), f" {f.differences[0]}"),
            cell(str(list(f.shape))),
            cell(f.dtype),
        )
    console.print(table)
    served = ", ".join(f"{s['what']}: {'served' if s['served'] else 'NOT served'}"
                       for s in result.prepared["serves"])  # fmt: skip
    rollout = result.prepared["rollout"]
    if rollout is not None:
        served += (
            f"; rollout: {rollout['answered']} of {rollout['expected_draws']} per-step draws "
            f"answered, {rollout['served']} of them prepared ahead (every one after the first)"
        )
    console.print(line(f"prepared by prenoise: {served or 'nothing'}"), soft_wrap=True)
    console.print(
        line(
            f"arms: plugin off {result.seconds['plugin_off']:.2f} s, "
            f"on {result.seconds['plugin_on']:.2f} s"
        ),
        soft_wrap=True,
    )
    style = "green" if result.verified else "red"
    console.print(line((result.summary(), style)), soft_wrap=True)
