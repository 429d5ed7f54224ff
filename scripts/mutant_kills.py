"""Check that given tests kill given mutmut mutants, without a full `mutmut run`.

    .venv/bin/python scripts/mutant_kills.py draws tests/test_draws_contract.py \
        'prenoise.preparation.draws.x_run_plan__mutmut_6' \
        'prenoise.preparation.draws.x__itemsize__mutmut_*'

Runs pytest once per mutant inside `build/mutation/<module>/mutants/` (which
`scripts/mutation.py <module>` generated), with
`MUTANT_UNDER_TEST` selecting the mutant, the way mutmut does. Prints `killed`/`SURVIVED` per
mutant and exits 1 if any survived. Mutant names may use shell-style wildcards, matched against
`mutmut results`.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _all_mutants(tree: Path) -> list[str]:
    out = subprocess.run(
        [str(ROOT / ".venv/bin/mutmut"), "results", "--all", "true"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [line.split(":")[0].strip() for line in out.splitlines() if ":" in line]


def _pytest(tree: Path, tests: list[str], mutant: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree / "mutants" / "src"))
    env.pop("MUTANT_UNDER_TEST", None)
    if mutant is not None:
        env["MUTANT_UNDER_TEST"] = mutant
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            *[str(ROOT / t) for t in tests],
        ],
        cwd=tree / "mutants",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__)
        return 2
    tree = ROOT / "build" / "mutation" / argv[0]
    tests, patterns = argv[1].split(","), argv[2:]
    names = [p for p in patterns if not any(c in p for c in "*?[")]
    globs = [p for p in patterns if p not in names]
    if globs:
        every = _all_mutants(tree)
        names += [m for m in every if any(fnmatch.fnmatchcase(m, g) for g in globs)]
    baseline = _pytest(tree, tests, None)
    if baseline.returncode != 0:
        print(baseline.stdout[-3000:])
        print("the tests fail without any mutant; fix them first")
        return 2
    survived = 0
    for name in names:
        killed = _pytest(tree, tests, name).returncode != 0
        survived += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} {name}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
