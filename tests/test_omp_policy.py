"""prenoise's own commands run with `OMP_WAIT_POLICY=PASSIVE` unless the environment sets it;
importing prenoise as a library changes nothing of the process (issue 41: the Makefile's
export made `make` runs fast and a user's own environment slow).

The policy is read when torch loads, so each case needs a fresh interpreter.
No timing is asserted (benchmarks/omp_wait_policy.md measures it).
"""

from __future__ import annotations

import os
import subprocess
import sys

COMMAND = """
import os, sys
import prenoise
print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))
from prenoise.cli import omp_policy  # what `prenoise ...` imports first
print(os.environ.get('OMP_WAIT_POLICY'))
print(omp_policy.describe())
"""

LIBRARY = """
import os, prenoise
prenoise.Draw  # a library use: torch loads
print(os.environ.get('OMP_WAIT_POLICY'))
"""


def _run(code: str, policy: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip().splitlines()


def test_the_cli_sets_passive_before_torch_loads() -> None:
    assert _run(COMMAND, None) == [
        "False None",  # importing prenoise imports no torch
        "PASSIVE",
        "PASSIVE (prenoise's commands set it; your environment did not)",
    ]


def test_a_library_use_leaves_the_environment_alone() -> None:
    assert _run(LIBRARY, None) == ["None"]


def test_a_policy_the_user_set_is_kept_and_named() -> None:
    lines = _run(COMMAND, "ACTIVE")
    assert lines[:2] == ["False ACTIVE", "ACTIVE"]
    assert lines[2].startswith("ACTIVE (set in your environment: idle threads spin")
