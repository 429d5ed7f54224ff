"""Run mutmut one module at a time, each against the tests that own it.

    .venv/bin/python scripts/mutation.py draws verify      # or: all (the default)

mutmut runs every test that reaches a mutant, and a surviving mutant runs all of them. With the
whole suite selected, a survivor in `draws` ran the diffusers pipelines too (about two minutes
each on 2 cores). So each module gets its own work tree, `build/mutation/<module>/`, holding a
copy of `src/`, `tests/` and `pyproject.toml` whose `[tool.mutmut]` names that module and its
tests (`MODULES` below). mutmut's state stays in that tree, so a module can be resumed, and one
module's configuration never resets another's results. Results are written to
`build/mutation/<module>/results.txt` (`mutmut results --all true`) and summarised on stdout.

The run fails (exit 1), naming the module and the mutants, when mutmut itself fails (a non-zero
exit, e.g. 1 when the unmutated tests fail or 137 when it was killed), when its results list no
mutant, or when a mutant that no test detected is not explained in `EXPLAINED`
(`scripts/mutation_explained.txt`: lines of `module mutant-name why`). A missing mutmut is one
line and exit 2.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "mutation"
EXPLAINED = ROOT / "scripts" / "mutation_explained.txt"
DETECTED = frozenset({"killed", "timeout", "segfault", "caught by type check"})
"""mutmut statuses that mean a test noticed the mutant; every other one needs an explanation."""

_DRAW_TESTS = [
    "tests/test_draws*.py",
    "tests/test_noise_streams.py",
    "tests/test_budget.py",
    "tests/test_layouts.py",
    "tests/test_cancel_points.py",
]


@dataclasses.dataclass(frozen=True)
class Module:
    files: list[str]  # what mutmut mutates
    tests: list[str]  # globs of the test files selected for it
    venv: str = ".venv"  # the vLLM-Omni plugin needs its own venv (upstream pins diffusers)


MODULES: dict[str, Module] = {
    "draws": Module(
        ["src/prenoise/preparation/draws.py", "src/prenoise/noise/chunks.py"],
        [*_DRAW_TESTS, "tests/test_kernel*.py"],
    ),
    "kernel": Module(
        ["src/prenoise/noise/kernel.py", "src/prenoise/noise/normal.py"],
        ["tests/test_kernel*.py", *_DRAW_TESTS],
    ),
    "mixing": Module(["src/prenoise/preparation/mixing.py"], ["tests/test_mixing*.py"]),
    "verify": Module(
        [
            "src/prenoise/verify/__init__.py",
            "src/prenoise/verify/bits.py",
            "src/prenoise/verify/files.py",
            "src/prenoise/verify/leaves.py",
            "src/prenoise/verify/reports.py",
            "src/prenoise/verify/tensors.py",
        ],
        ["tests/test_verify*.py"],
    ),
    "executor": Module(
        ["src/prenoise/preparation/executor.py"],
        ["tests/test_executor*.py", "tests/test_cancel_points.py"],
    ),
    "prediction": Module(
        ["src/prenoise/preparation/prediction.py", "src/prenoise/verify/rng_guard.py"],
        ["tests/test_rng_guard_prediction*.py", "tests/test_executor*.py"],
    ),
    "ref2va_verification": Module(
        ["src/prenoise/ref2va/verification.py"], ["tests/ref2va/test_verify_verdicts*.py"]
    ),
    "served": Module(
        ["src/prenoise/preparation/served.py", "src/prenoise/preparation/lookahead.py"],
        ["tests/test_served_draws.py"],
    ),
    "diffusers": Module(
        [
            "src/prenoise/integrations/diffusers/served_calls.py",
            "src/prenoise/integrations/diffusers/call.py",
        ],
        # the pipeline tests take minutes per surviving mutant; the units drive the same code
        ["tests/integrations/test_diffusers_units*.py"],
    ),
    "vllm_omni": Module(
        [
            "src/prenoise/integrations/vllm_omni/plugin.py",
            "src/prenoise/integrations/vllm_omni/request.py",
            "src/prenoise/integrations/vllm_omni/settings.py",
        ],
        # the end-to-end tests run upstream's real forward (about 14 s per mutant); the units
        # drive the same code with fakes, and test_contract/test_loading take a second
        [
            "tests/vllm_omni_plugin/test_*units.py",
            "tests/vllm_omni_plugin/test_contract.py",
            "tests/vllm_omni_plugin/test_loading.py",
        ],
        venv=".venv-vllm-omni",
    ),
}

_STATUS = re.compile(r"^\s*(\S+): (.+)$")


def _config(files: list[str], tests: list[str]) -> str:
    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(f'"{i}"' for i in items) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {toml_list(files)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:warnings"]\n'
        'process_isolation = "forkserver"\n'
    )


def _stale_extension(tree: Path) -> bool:
    """True if the C kernel was rebuilt since mutmut copied it into `tree/mutants/`.

    mutmut keeps its cached verdicts, and its copy of the built extension, when only non-Python
    files change; the tests would then run against the old kernel.
    """
    for built in (ROOT / "src").rglob("*.so"):
        copy = tree / "mutants" / built.relative_to(ROOT)
        if copy.exists() and copy.read_bytes() != built.read_bytes():
            return True
    return False


def _prepare(module: str) -> Path:
    spec = MODULES[module]
    tree = BUILD / module
    tree.mkdir(parents=True, exist_ok=True)
    if _stale_extension(tree):
        print(f"   {module}: the C kernel was rebuilt; starting a fresh run", flush=True)
        shutil.rmtree(tree / "mutants")
    for name in ("src", "tests"):
        # dirs_exist_ok keeps mutmut's `mutants/` (and its resumable state) beside the copies
        shutil.copytree(
            ROOT / name,
            tree / name,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    tests = sorted({p for g in spec.tests for p in glob.glob(g, root_dir=ROOT)})
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject = re.sub(r"\n\[tool\.mutmut\]\n(?:[^\[].*\n|\n)*", "\n", pyproject)
    (tree / "pyproject.toml").write_text(pyproject + _config(spec.files, tests))
    return tree


class MutmutMissing(Exception):
    """mutmut is not installed in the venv a module runs in."""


def run(module: str, max_children: int) -> list[str]:
    """Run mutmut on `module`; returns the problems found (empty: every mutant accounted for)."""
    mutmut = ROOT / MODULES[module].venv / "bin" / "mutmut"
    if not mutmut.is_file():
        raise MutmutMissing(
            f"mutmut not found at {mutmut}; install it ({MODULES[module].venv}/bin/python -m pip "
            "install mutmut==3.8.1, as `make mutation` does)"
        )
    tree = _prepare(module)
    print(f"== {module}: {tree}", flush=True)
    ran = subprocess.run(
        [str(mutmut), "run", "--max-children", str(max_children)],
        cwd=tree,
        check=False,
        stdout=subprocess.DEVNULL,
    )
    if ran.returncode != 0:
        return [f"{module}: `mutmut run` failed ({_exit_reason(ran.returncode)}); see {tree}"]
    listed = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        return [f"{module}: `mutmut results` failed ({_exit_reason(listed.returncode)})"]
    (tree / "results.txt").write_text(listed.stdout)
    statuses = parse_results(listed.stdout)
    print(f"   {module}: {dict(collections.Counter(statuses.values()))}", flush=True)
    return judge(module, statuses, load_explained().get(module, {}))


def _exit_reason(code: int) -> str:
    """`exit 137, killed by signal 9`: a shell's 128 + n and subprocess's -n both name a signal."""
    signal = -code if code < 0 else code - 128 if code > 128 else None
    return f"exit {code}" + (f", killed by signal {signal}" if signal else "")


def parse_results(text: str) -> dict[str, str]:
    """`mutmut results --all true` lines (`    name: status`) as {mutant name: status}."""
    return {m.group(1): m.group(2) for line in text.splitlines() if (m := _STATUS.match(line))}


def load_explained(path: Path | None = None) -> dict[str, dict[str, str]]:
    """{module: {mutant name: why it cannot be detected}} from `module name why...` lines.

    Blank lines and `#` comments are skipped; a missing file explains nothing. A line without a
    reason raises `ValueError` naming it: an explanation must say why.
    """
    path = path or EXPLAINED
    explained: dict[str, dict[str, str]] = {}
    if not path.exists():
        return explained
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            raise ValueError(f"{path.name}:{number}: expected `module mutant-name why`: {line!r}")
        module, name, why = parts
        explained.setdefault(module, {})[name] = why
    return explained


def judge(module: str, statuses: Mapping[str, str], explained: Mapping[str, str]) -> list[str]:
    """The problems of one module's results: none listed, or undetected mutants not explained."""
    if not statuses:
        return [f"{module}: mutmut listed no mutants; nothing was checked"]
    unexplained = sorted(
        (name, status)
        for name, status in statuses.items()
        if status not in DETECTED and name not in explained
    )
    return [f"{module}: {status} and not explained: {name}" for name, status in unexplained]


def main(argv: list[str] | None = None) -> int:
    """Run the modules; 0 when every mutant is detected or explained, 1 otherwise, 2 when
    mutmut is missing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "modules", nargs="*", default=["all"], help=f"any of {', '.join(MODULES)} (default: all)"
    )
    parser.add_argument("--max-children", type=int, default=2)
    args = parser.parse_args(argv)
    modules = list(MODULES) if args.modules in (["all"], []) else args.modules
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    problems: list[str] = []
    for module in modules:
        try:
            problems += run(module, args.max_children)
        except MutmutMissing as missing:
            print(f"error: {missing}", file=sys.stderr)
            return 2
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if problems:
        print(
            f"mutation check failed: {len(problems)} problem(s) in "
            f"{', '.join(sorted({p.split(':', 1)[0] for p in problems}))}; kill each survivor "
            f"with a test or explain it in {os.path.relpath(EXPLAINED, ROOT)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
