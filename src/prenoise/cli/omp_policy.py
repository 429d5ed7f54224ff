"""How torch's idle OpenMP threads wait in prenoise's own commands (`OMP_WAIT_POLICY`).

prenoise's commands run with `OMP_WAIT_POLICY=PASSIVE` unless the environment sets it: torch's
idle OpenMP threads then sleep instead of spinning, and the request thread, the preparation
worker and the denoiser's threads share the cores (on a loaded 2-core VM, without the variable,
`prenoise generate --recipe ref2va-demo` denoised in 2.0-3.0 s with torch's default policy and
0.08-0.45 s with this one: benchmarks/omp_wait_policy.md). It only changes how idle threads
wait: no value changes. The policy is read when torch loads, so `apply` runs in `prenoise.cli`
before anything imports torch (importing `prenoise` imports no torch by itself), and only in
prenoise's own process: a library user's process is left as it is. A policy the user set is
kept.
"""

from __future__ import annotations

import os
import sys

__all__ = ["DEFAULT", "apply", "describe"]

DEFAULT = "PASSIVE"
_set_by_prenoise = False


def apply() -> None:
    """Set `OMP_WAIT_POLICY=PASSIVE` for this process when the environment does not set it
    and torch is not loaded yet (afterwards it would change nothing)."""
    global _set_by_prenoise
    if "OMP_WAIT_POLICY" not in os.environ and "torch" not in sys.modules:
        os.environ["OMP_WAIT_POLICY"] = DEFAULT
        _set_by_prenoise = True


def describe() -> str:
    """The policy this process runs with, and who chose it (`prenoise doctor`)."""
    value = os.environ.get("OMP_WAIT_POLICY")
    if value is None:
        return "(unset: libgomp's default, idle threads spin; prenoise's commands set PASSIVE)"
    if _set_by_prenoise:
        return f"{value} (prenoise's commands set it; your environment did not)"
    if value.upper() == "ACTIVE":
        return f"{value} (set in your environment: idle threads spin; unset it for speed)"
    return f"{value} (set in your environment)"
