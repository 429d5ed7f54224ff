"""What a new user meets first: the base install, missing extras, a build without a C compiler.

Classes tested: (1) the CLI imports optional parts lazily, so `--help`, `doctor`, `demo` and
`compare` run on the base install, and a command needing an extra says which `pip install` fixes
it (the extras table matching pyproject.toml); (2) an unexpected error is one line with its own
exit status; (3) the C kernel is optional at build time, and without it draws fall back to torch.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from blocked_imports import OPTIONAL_MODULES, REPO, run_python
from prenoise.cli.commands import main
from prenoise.guards import extras
from prenoise.guards.extras import install_command
from source_tree import wheel_built_without_a_compiler
from waits import READY_CEILING_S

# -- (1) the base install ------------------------------------------------------------------------

_BASE_SCRIPT = """
import contextlib, io, json, sys
import torch
from prenoise.cli.commands import main

torch.save({"x": torch.arange(4)}, sys.argv[1])
results = {}
for argv in json.loads(sys.argv[2]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as stop:  # --help
            code = stop.code
    results[" ".join(argv)] = [code, out.getvalue()]
import prenoise.integrations.diffusers as integration  # importable without diffusers

try:
    integration.enable(object())
except Exception as error:
    results["enable"] = [type(error).__name__, str(error)]
print("RESULTS" + json.dumps(results))
"""


def _run_cli_script(argvs: list[list[str]], blocked: tuple[str, ...], tmp_path: Path) -> dict:
    saved = str(tmp_path / "saved.pt")
    argvs = [[saved if a == "SAVED" else a for a in argv] for argv in argvs]
    proc = run_python(["-c", _BASE_SCRIPT, saved, json.dumps(argvs)], blocked, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.split("RESULTS", 1)[1])


_BASE_COMMANDS = ["generate", "verify", "bench", "serve", "compare", "doctor", "vllm-omni-verify"]
_BASE_RUNS = [
    ["--help"],
    *([c, "--help"] for c in _BASE_COMMANDS),
    ["doctor"],
    ["demo", "--encode-seconds", "0.05"],
    ["compare", "SAVED", "SAVED"],
]
_NEEDS_EXTRA_RUNS = [
    [c, "--recipe", "recipes/ref2va-demo.yaml"] for c in ("generate", "verify", "bench", "serve")
]


@pytest.fixture(scope="module")
def base_install_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both tests' commands in one interpreter of the base install (the extras' modules blocked):
    each command's exit status and output are its own (`main` per command, as the CLI runs)."""
    return _run_cli_script(
        [*_BASE_RUNS, *_NEEDS_EXTRA_RUNS], OPTIONAL_MODULES, tmp_path_factory.mktemp("base")
    )


def test_the_base_install_runs_help_doctor_demo_and_compare(base_install_results: dict) -> None:
    theirs = {" ".join(argv) for argv in _NEEDS_EXTRA_RUNS}  # the other test's commands
    results = {k: v for k, v in base_install_results.items() if k not in theirs}
    assert len(results) == len(_BASE_RUNS) + 1
    assert results.pop("enable") == [
        "MissingExtraError",
        "prenoise.integrations.diffusers.enable() needs the 'diffusers' extra (diffusers not "
        f"installed): {install_command('diffusers')}",
    ]
    for argv, (code, output) in results.items():
        assert code == 0, f"prenoise {argv}: exit {code}\n{output}"
        assert "Traceback" not in output and "Error" not in output, output
    assert "noise backend" in results["doctor"][1]
    assert "bitwise equal" in results["demo --encode-seconds 0.05"][1]
    assert "--arm" in results["generate --help"][1]


def test_commands_needing_a_missing_extra_name_the_pip_install(
    base_install_results: dict,
) -> None:
    ran = {" ".join(argv) for argv in _NEEDS_EXTRA_RUNS}
    results = {k: v for k, v in base_install_results.items() if k in ran}
    assert len(results) == len(_NEEDS_EXTRA_RUNS)
    for argv, (code, output) in results.items():
        assert code == 2, f"prenoise {argv}: exit {code}\n{output}"
        command = argv.split()[0]
        lines = output.strip().splitlines()
        assert lines == [
            f"error: prenoise {command} needs the 'ref2va' extra (av, PIL, transformers, "
            f"safetensors not installed): {install_command('ref2va')}"
        ], output


def test_the_diffusers_extra_alone(tmp_path: Path) -> None:
    """`pip install 'prenoise[diffusers]'`: diffusers and what it installs (huggingface_hub,
    safetensors, Pillow), no transformers."""
    diffusers_deps = {"diffusers", "huggingface_hub", "safetensors", "PIL"}
    blocked = tuple(m for m in OPTIONAL_MODULES if m not in diffusers_deps)
    results = _run_cli_script(
        [["--help"], ["doctor"], ["generate", "--recipe", "recipes/ref2va-demo.yaml"]],
        blocked,
        tmp_path,
    )
    assert results["--help"][0] == results["doctor"][0] == 0
    assert results["generate --recipe recipes/ref2va-demo.yaml"] == [
        2,
        "error: prenoise generate needs the 'ref2va' extra (av, transformers not installed): "
        f"{install_command('ref2va')}\n",
    ]
    assert results["enable"] == [
        "TypeError",
        "enable() takes a diffusers pipeline instance (a diffusers.DiffusionPipeline, e.g. "
        "WanPipeline.from_pretrained(...), or a diffusers ModularPipeline, e.g. "
        "MiniMaxH3Blocks().init_pipeline(...)), got a builtins.object",
    ]


@pytest.mark.parametrize(
    ("argv", "absent", "extra"),
    [
        (["serve", "--recipe", "R"], {"uvicorn"}, "serve"),
        (["bench", "--recipe", "R", "--trace-dir", "T"], {"matplotlib"}, "bench"),
        (["generate", "--recipe", "R"], {"av"}, "ref2va"),
    ],
)
def test_each_command_checks_its_own_extras_first(
    argv: list[str],
    absent: set[str],
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(extras, "_importable", lambda module: module not in absent)
    # The recipe is never read: the extras are checked before the command starts.
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert install_command(extra) in " ".join(out.split()) and sorted(absent)[0] in out


def test_an_optional_import_failing_mid_command_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import prenoise.cli.commands as cli

    def needs_transformers(args: object) -> int:
        raise ModuleNotFoundError("No module named 'transformers'", name="transformers")

    monkeypatch.setattr(cli, "_cmd_doctor", needs_transformers)
    assert main(["doctor"]) == 2
    assert capsys.readouterr().out.strip() == (
        f"error: transformers is not installed: {install_command('ref2va')}"
    )


def test_extra_for_module() -> None:
    assert extras.extra_for_module("transformers.models.t5") == "ref2va"
    assert extras.extra_for_module("PIL") == "ref2va"
    assert extras.extra_for_module("fastapi") == "serve"
    assert extras.extra_for_module("diffusers.utils") == "diffusers"
    assert extras.extra_for_module("prenoise.noise._noise_kernel") is None
    assert extras.extra_for_module(None) is None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _requirements(extra: str, table: dict[str, list[str]]) -> set[str]:
    """Distribution names an extra pulls in, following `prenoise[other]` references."""
    names: set[str] = set()
    for requirement in table[extra]:
        name = _normalized(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0])
        if name == "prenoise":
            inner = requirement.split("[", 1)[1].split("]", 1)[0]
            for other in inner.split(","):
                names |= _requirements(other.strip(), table)
        else:
            names.add(name)
    return names


def test_every_module_an_extra_provides_is_declared_by_that_extra() -> None:
    """`prenoise.guards.extras.EXTRAS` and pyproject.toml agree: each module an extra is checked for
    comes from a distribution that extra installs (checked for the modules installed here)."""
    tomllib = pytest.importorskip("tomllib")
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = table["optional-dependencies"]
    provided_by = importlib.metadata.packages_distributions()
    checked = 0
    for extra, modules in extras.EXTRAS.items():
        declared = _requirements(extra, optional)
        for module in modules:
            dists = {_normalized(d) for d in provided_by.get(module, [])}
            if dists:  # installed here: it must come from a declared distribution
                assert dists & declared, f"{module} ({dists}) is not in the {extra!r} extra"
                checked += 1
    assert checked >= 8
    base = {re.split(r"[<>=!~; ]", r, maxsplit=1)[0] for r in table["dependencies"]}
    assert base == {"torch", "numpy", "pydantic", "pyyaml", "rich"}
    for extra in ("serve", "bench"):  # both commands run Ref2VA
        assert _requirements("ref2va", optional) <= _requirements(extra, optional)


# -- (2) unexpected errors: one line, a distinct exit status, the traceback under --debug ------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            KeyError("recipe"),
            "internal error: KeyError: 'recipe'; rerun with --debug for the traceback, "
            "please report it",
        ),
        (
            OSError(28, "No space left on device"),
            "error: OSError: [Errno 28] No space left on device (rerun with --debug for the "
            "traceback)",
        ),
    ],
)
def test_unexpected_errors_are_one_line_with_exit_70(
    error: Exception,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import prenoise.cli.commands as cli

    def broken(args: object) -> int:
        raise error

    monkeypatch.setattr(cli, "_cmd_doctor", broken)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["doctor"]) == cli.EXIT_INTERNAL == 70
    captured = capsys.readouterr()
    assert captured.out.strip() == expected and captured.err == ""
    with pytest.raises(type(error)):
        main(["doctor", "--debug"])
    monkeypatch.setenv("PRENOISE_DEBUG", "1")
    with pytest.raises(type(error)):
        main(["doctor"])


def test_error_text_is_printed_verbatim(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Brackets in a message are text, not rich markup (`prenoise[ref2va]`, `scores[1]`)."""
    import prenoise.cli.commands as cli
    from prenoise.cli.args import UsageError

    def refuse(args: object) -> int:
        raise UsageError("field scores[1] and [bold]x[/bold]")

    monkeypatch.setattr(cli, "_cmd_doctor", refuse)
    assert main(["doctor"]) == 2
    assert capsys.readouterr().out.strip() == "error: field scores[1] and [bold]x[/bold]"


# -- (3) without the C kernel --------------------------------------------------------------------

_NO_KERNEL_SCRIPT = """
import contextlib, io, sys
import torch
from prenoise.noise import kernel
from prenoise.cli.commands import main

assert kernel._ext is None
g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
got = kernel.randn((3, 1000), generator=g1)
expected = torch.randn((3, 1000), generator=g2)
assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
assert torch.equal(g1.get_state(), g2.get_state())
kept = kernel.randn_keep_prefix((4, 700), (2,), generator=g1)
assert torch.equal(kept, torch.randn((4, 700), generator=g2)[:2])
status = kernel.backend_status()
assert (status.name, status.active) == ("torch", False), status
print("HUGE", kernel.huge_page_status())
print("FILE", kernel.__file__)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["doctor"])
print("DOCTOR", code, out.getvalue())
"""


def _check_no_kernel_output(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HUGE off (C extension not built)" in proc.stdout
    doctor = proc.stdout.split("DOCTOR", 1)[1]
    assert doctor.startswith(" 0 ")
    assert "C kernel not built (no C compiler at install time?)" in doctor
    assert "torch (inactive)" in doctor
    # The one warning of the fallback, on logger prenoise.noise.kernel (stderr, no logging config).
    assert "prenoise noise kernel unavailable, using torch: C kernel not built" in proc.stderr
    return proc.stdout


def test_without_the_kernel_draws_fall_back_to_torch_and_doctor_says_why(tmp_path: Path) -> None:
    proc = run_python(["-c", _NO_KERNEL_SCRIPT], ["prenoise.noise._noise_kernel"], tmp_path)
    _check_no_kernel_output(proc)


@pytest.mark.slow
def test_a_build_without_a_c_compiler_installs_without_the_kernel(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`CC=/bin/false pip wheel .` succeeds (the extension is optional) and leaves the kernel
    out; the installed wheel runs on torch. No network: no build isolation, no dependencies."""
    pytest.importorskip("setuptools")
    # the same build as test_shipped_recipes' (built once: source_tree)
    wheels, build = wheel_built_without_a_compiler(tmp_path_factory.mktemp("no-compiler"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert 'building extension "prenoise.noise._noise_kernel" failed' in build.stdout + build.stderr
    (wheel,) = wheels.glob("prenoise-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "prenoise/noise/kernel.py" in names
    assert not [n for n in names if "_noise_kernel" in n], names
    target = tmp_path / "installed"
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # PYTHONPATH comes before the editable install's path: the wheel's prenoise is imported.
    proc = subprocess.run(
        [sys.executable, "-c", _NO_KERNEL_SCRIPT],
        env={**_env_without_pythonpath(), "PYTHONPATH": str(target), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )
    stdout = _check_no_kernel_output(proc)
    assert f"FILE {target / 'prenoise' / 'noise' / 'kernel.py'}" in stdout


def _env_without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRENOISE_DEBUG")}
