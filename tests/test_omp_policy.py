"""prenoise's own commands run with `OMP_WAIT_POLICY=PASSIVE` unless the environment sets it;
importing prenoise as a library changes nothing of the process (issue 41: the Makefile's
export made `make` runs fast and a user's own environment slow).

Subprocesses: the policy is read when torch loads, so each case needs a fresh interpreter.
No timing is asserted here (benchmarks/omp_wait_policy.md measures it).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(code: str, policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_importing_prenoise_imports_no_torch_and_sets_nothing() -> None:
    code = (
        "import os, sys, prenoise\n"
        "print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))\n"
        "prenoise.randn((2,), generator=None) if False else prenoise.Draw\n"
        "print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))"
    )
    assert _run(code, None).splitlines() == ["False None", "True None"]


@pytest.mark.parametrize(
    ("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE"), ("passive", "passive")]
)
def test_the_cli_sets_passive_only_when_the_environment_does_not(
    given: str | None, expected: str
) -> None:
    code = "import os, prenoise.cli\nprint(os.environ['OMP_WAIT_POLICY'])"
    assert _run(code, given) == expected


def test_doctor_says_which_policy_runs() -> None:
    code = "from prenoise.cli import omp_policy\nprint(omp_policy.describe())"
    assert _run(code, None) == "PASSIVE (prenoise's commands set it; your environment did not)"
    assert _run(code, "ACTIVE").startswith("ACTIVE (set in your environment: idle threads spin")
