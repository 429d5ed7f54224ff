"""Checks of `prenoise` command-line values that run before any heavy work.

Argument types make argparse refuse impossible numbers (exit 2 with argparse's usage line);
output-path checks refuse, up front, a destination the run could only fail to write at its end.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from prenoise.path_checks import path_problem
from prenoise.seeds import check_seed_range

if TYPE_CHECKING:
    from prenoise.ref2va.config import Recipe

__all__ = [
    "LOG_LEVELS",
    "UsageError",
    "at_least",
    "check_output_dir",
    "check_output_file",
    "check_outputs_are_not_inputs",
    "check_request_outputs",
    "finite_between",
    "generate_out_path",
    "port",
    "seed",
]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""uvicorn's log levels (`prenoise serve --log-level`)."""


class UsageError(ValueError):
    """A command-line value or output path that cannot work; one line, exit status 2."""


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ≥ `minimum`."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # argparse names the type in its messages
    return parse


def finite_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite float in `[low, high]` (inf, nan and 1e308 are refused)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be a number in [{low:g}, {high:g}], got {text}")
        return value

    parse.__name__ = f"number in [{low:g}, {high:g}]"
    return parse


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) … 65535."""
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port 0..65535, got {value}")
    return value


def seed(text: str) -> int:
    """An argparse type: a seed in the generator's range (`prenoise.seeds`)."""
    try:
        return check_seed_range(_integer(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def check_output_file(path: str | os.PathLike[str], option: str) -> Path:
    """`path` as a Path if a file can be written there (missing parents are creatable).

    Raises :class:`UsageError` naming `option` when it is a directory, or when it or its
    nearest existing parent is not writable.
    """
    p = _os_path(path, option)
    if p.is_dir():
        raise UsageError(f"{option} {p}: is a directory; give a file path")
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(f"{option} {p}: not writable")
    _check_creatable(p.parent, option, p)
    return p


def check_output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """`path` as a Path if it is (or can be created as) a writable directory; else
    :class:`UsageError` naming `option`."""
    p = _os_path(path, option)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {p}: exists and is not a directory")
    _check_creatable(p, option, p)
    return p


def _os_path(path: str | os.PathLike[str], option: str) -> Path:
    """`path` as a Path, or a :class:`UsageError` naming `option` when the OS would refuse the
    name (a NUL byte, a component over 255 bytes: `stat` raised ENAMETOOLONG, exit 70)."""
    problem = path_problem(path)
    if problem is not None:
        raise UsageError(f"{option}: the path {problem}")
    return Path(path)


def _check_creatable(directory: Path, option: str, target: Path) -> None:
    """`directory` exists and is writable, or its nearest existing ancestor is."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {target}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {target}: directory {existing} is not writable")


def generate_out_path(args: argparse.Namespace, recipe: Recipe) -> Path:
    """The first output MP4 of `prenoise generate`: `--out`, else `OUTPUT_DIR/NAME.mp4`."""
    return Path(args.out) if args.out else recipe.output_dir / f"{recipe.name}.mp4"


def check_request_outputs(args: argparse.Namespace, recipe: Recipe) -> None:
    """Check every path a `generate`/`verify`/`bench` run will write (one process or torchrun):
    each output MP4 of `generate`, `--json` and `--trace-dir`. No output may be one of the
    run's inputs (the recipe, a reference, a checkpoint file) or another output."""
    from prenoise.ref2va.pipeline import output_path

    outputs: list[tuple[str, Path]] = []
    if args.command == "generate":
        out = generate_out_path(args, recipe)
        option = "--out" if args.out else "output_dir"
        for index in range(recipe.outputs):
            outputs.append((option, check_output_file(output_path(out, index), option)))
    if getattr(args, "json", None):
        outputs.append(("--json", check_output_file(args.json, "--json")))
    if getattr(args, "trace_dir", None):
        check_output_dir(args.trace_dir, "--trace-dir")
    inputs = [("--recipe", Path(args.recipe))] if getattr(args, "recipe", None) else []
    inputs += [("reference", Path(spec.path)) for spec in recipe.references]
    if recipe.checkpoint is not None and Path(recipe.checkpoint).is_dir():
        inputs += [("checkpoint", p) for p in sorted(Path(recipe.checkpoint).iterdir())]
    check_outputs_are_not_inputs(outputs, inputs)


def check_outputs_are_not_inputs(
    outputs: list[tuple[str, Path]], inputs: list[tuple[str, Path]]
) -> None:
    """Refuse (`UsageError`) an output that is an input, or the same file as another output.

    Two paths are the same file when both exist and `os.path.samefile` says so (symlinks and
    hard links included), or when they resolve to the same absolute path.
    """
    seen: list[tuple[str, Path]] = []
    for option, path in outputs:
        for other_option, other in [*inputs, *seen]:
            if _same_file(path, other):
                role = "input" if (other_option, other) in inputs else "output"
                raise UsageError(
                    f"{option} {path}: is the {role} {other_option} {other}; "
                    f"writing it would overwrite the {role}"
                )
        seen.append((option, path))


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except OSError:  # a path that cannot even be resolved is refused by its own check
        return False
