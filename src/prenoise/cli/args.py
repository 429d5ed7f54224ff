"""Checks of `prenoise` command-line values that run before any heavy work.

Argument types make argparse refuse impossible numbers (exit 2 with argparse's usage line).
The output-path checks live in `prenoise.guards.usage` (every command shares them) and are
re-exported here; the Ref2VA request's outputs are checked by `prenoise.ref2va.cli_options`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from prenoise.guards.seeds import check_seed_range
from prenoise.guards.usage import (
    UsageError,
    check_output_dir,
    check_output_file,
    check_outputs_are_not_inputs,
    missing_directory,
)

__all__ = [
    "LOG_LEVELS",
    "UsageError",
    "at_least",
    "check_output_dir",
    "check_output_file",
    "check_outputs_are_not_inputs",
    "finite_between",
    "missing_directory",
    "port",
    "seed",
]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""uvicorn's log levels (`prenoise serve --log-level`)."""


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
    """An argparse type: a seed in the generator's range (`prenoise.guards.seeds`)."""
    try:
        return check_seed_range(_integer(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
