"""Run mutmut one module at a time, each against the tests that own it.

    .venv/bin/python scripts/mutation.py draws verify      # or: all (the default)

mutmut runs every test that reaches a mutant, and a surviving mutant runs all of them. With the
whole suite selected, a survivor in `draws` ran the diffusers pipelines too (about two minutes
each on 2 cores). So each module gets its own work tree, `build/mutation/<module>/`, holding a
copy of `src/`, `tests/` and `pyproject.toml` whose `[tool.mutmut]` names that module and its
tests (`MODULES` below). mutmut's state stays in that tree, so a module can be resumed, and one
module's configuration never resets another's results. Results are written to
`build/mutation/<module>/results.txt` (`mutmut results --all true`) and summarised on stdout.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "mutation"

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
    "draws": Module(["src/prenoise/draws.py"], [*_DRAW_TESTS, "tests/test_kernel*.py"]),
    "kernel": Module(["src/prenoise/kernel.py"], ["tests/test_kernel*.py", *_DRAW_TESTS]),
    "mixing": Module(["src/prenoise/mixing.py"], ["tests/test_mixing*.py"]),
    "verify": Module(["src/prenoise/verify.py"], ["tests/test_verify*.py"]),
    "executor": Module(
        ["src/prenoise/executor.py"], ["tests/test_executor*.py", "tests/test_cancel_points.py"]
    ),
    "prediction": Module(
        ["src/prenoise/prediction.py", "src/prenoise/rng_guard.py"],
        ["tests/test_rng_guard_prediction*.py", "tests/test_executor*.py"],
    ),
    "ref2va_verification": Module(
        ["src/prenoise/ref2va/verification.py"], ["tests/ref2va/test_verify_verdicts*.py"]
    ),
    "diffusers": Module(
        [
            "src/prenoise/integrations/diffusers/queue.py",
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


def run(module: str, max_children: int) -> collections.Counter[str]:
    tree = _prepare(module)
    mutmut = ROOT / MODULES[module].venv / "bin" / "mutmut"
    print(f"== {module}: {tree}", flush=True)
    subprocess.run(
        [str(mutmut), "run", "--max-children", str(max_children)],
        cwd=tree,
        check=False,
        stdout=subprocess.DEVNULL,
    )
    results = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    (tree / "results.txt").write_text(results)
    counts = collections.Counter(
        m.group(2) for line in results.splitlines() if (m := _STATUS.match(line))
    )
    print(f"   {module}: {dict(counts)}", flush=True)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "modules", nargs="*", default=["all"], help=f"any of {', '.join(MODULES)} (default: all)"
    )
    parser.add_argument("--max-children", type=int, default=2)
    args = parser.parse_args()
    modules = list(MODULES) if args.modules in (["all"], []) else args.modules
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    for module in modules:
        run(module, args.max_children)
    return 0


if __name__ == "__main__":
    sys.exit(main())
