"""scripts/gpu_check.sh without a GPU: its refusals, its report, and its steps driven on the CPU.

The script is for a machine with a CUDA GPU. Here torch is the CPU build, so the real check can
only refuse; `PRENOISE_GPU_CHECK_DEVICE=cpu PRENOISE_GPU_CHECK_TINY=1` runs every step on the
CPU with small inputs, which is what the end-to-end test does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from waits import READY_CEILING_S

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
MIX_CHECK = REPO / "scripts" / "gpu_mix_check.py"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
NO_CUDA = "no CUDA device: this script checks prenoise on a GPU; run it on a machine with one"

needs_no_gpu = pytest.mark.skipif(
    torch.cuda.is_available(), reason="a CUDA device is present: the script would really run"
)


def run_script(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHON": PYTHON, **env}
    for name in ("PRENOISE_GPU_CHECK_DEVICE", "PRENOISE_GPU_CHECK_TINY"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        [str(SCRIPT), *map(str, args)],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )


def refusal_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a refusal (exit 2, nothing on stdout)."""
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gpu_check.sh: ")
    return lines[0]


def test_script_is_executable() -> None:
    assert os.access(SCRIPT, os.X_OK)


def test_refuses_without_outdir() -> None:
    assert "usage: scripts/gpu_check.sh OUTDIR" in refusal_line(run_script())
    assert "usage" in refusal_line(run_script("a", "b"))


def test_refuses_a_non_empty_outdir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "earlier.json").write_text("{}")
    assert "is not empty" in refusal_line(run_script(out))
    assert [p.name for p in out.iterdir()] == ["earlier.json"]


def test_refuses_an_outdir_it_cannot_create(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    assert "cannot create OUTDIR" in refusal_line(run_script(tmp_path / "a-file" / "out"))


def test_refuses_a_missing_python(tmp_path: Path) -> None:
    done = run_script(tmp_path / "out", PYTHON=str(tmp_path / "no-such-python"))
    assert "no python" in refusal_line(done)
    assert not (tmp_path / "out").exists()


def test_refuses_a_python_without_torch(tmp_path: Path) -> None:
    no_site = tmp_path / "python-without-site-packages"
    no_site.write_text(f'#!/bin/sh\nexec "{PYTHON}" -S "$@"\n')
    no_site.chmod(0o755)
    done = run_script(tmp_path / "new" / "out", PYTHON=str(no_site))
    assert "no torch" in refusal_line(done)
    assert not (tmp_path / "new").exists()  # created for the check, removed with the refusal


@needs_no_gpu
def test_refuses_without_a_cuda_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "new" / "out"
    assert refusal_line(run_script(out)) == f"gpu_check.sh: {NO_CUDA}"
    assert not (tmp_path / "new").exists()
    # an empty OUTDIR is kept, and kept empty: the driver's `main` in this process (the script
    # run above is the wrapper's path to it; torch is imported here already)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.delenv("PRENOISE_GPU_CHECK_DEVICE", raising=False)
    assert load_driver().main([str(empty)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"gpu_check.sh: {NO_CUDA}\n"
    assert list(empty.iterdir()) == []
    assert "accepted: cuda" in refusal_line(run_script(out, PRENOISE_GPU_CHECK_DEVICE="tpu"))


def load_mix_check() -> ModuleType:
    """scripts/gpu_mix_check.py in this process: its `main` is the script's whole behaviour (the
    end-to-end test runs it as a script, in gpu_check's mix step)."""
    spec = importlib.util.spec_from_file_location("gpu_mix_check", MIX_CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mix_check_on_cpu_is_equal_for_every_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "mix.json"
    argv = ["--device", "cpu", "--json", str(report_path), "--numel", "50000", "--no-compile"]
    assert load_mix_check().main(argv) == 0, capsys.readouterr()
    report = json.loads(report_path.read_text())
    assert report["equal"] is True
    assert set(report["dtypes"]) == {"float32", "float16", "bfloat16"}
    for entry in report["dtypes"].values():
        eager = entry["eager"]
        assert eager["equal"] and eager["failed_cases"] == [] and eager["cases"] >= 30
        assert all(c["differing_elements"] == 0 for c in eager["details"])
        names = " ".join(c["case"] for c in eager["details"])
        assert "noise=cpu" in names and "noise=device" in names and "out=" in names
        assert entry["compiled"]["status"] == "skipped"


@needs_no_gpu
def test_mix_check_refuses_cuda_without_a_device(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_mix_check().main(["--device", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == "error: --device cuda but torch sees no CUDA device"


# -- the driver's report and steps, on fake results ---------------------------------------------


def load_driver() -> ModuleType:
    if (
        str(REPO / "scripts") not in sys.path
    ):  # as when run as a script: its report module beside it
        sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def fake_run(gc: ModuleType, tmp_path: Path) -> tuple[object, list[object]]:
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    ctx = gc.Context(out, tmp_path / "scratch", "python3", "cuda", False)
    ctx.machine = {"nvidia_smi": "GPU 0: NVIDIA H200 (UUID: x)", "torch": "2.x", "gpu": "H200"}
    mix = {
        "device": "cuda:0",
        "device_name": "NVIDIA H200",
        "equal": True,
        "dtypes": {
            name: {
                "eager": {"equal": True, "cases": 38, "failed_cases": []},
                "compiled": {"status": "differs", "differing_elements": 7, "numel": 100},
            }
            for name in ("float32", "float16", "bfloat16")
        },
    }
    (out / "mix.json").write_text(json.dumps(mix))

    def step(name: str, verdict: str, note: str = "", **fields: object) -> object:
        return gc.Step(name, name, ["python3", name], 60, verdict=verdict, note=note, **fields)

    steps = [
        step("install", "pass", rc=0, seconds=3.0),
        step("kernel", "pass", rc=0),
        step("mix", "pass", json="mix.json", rc=0),
        step("verify-demo", "FAIL", "2/9 fields bitwise equal", json="verify-demo.json", rc=1),
        step("verify-seed", "skipped", "the ref2va extra is missing (av)"),
        step("bench-seed", "skipped", "the ref2va extra is missing (av)"),
    ]
    return ctx, steps


def test_report_lists_every_step_and_fails_on_a_failed_one(tmp_path: Path) -> None:
    gc = load_driver()
    ctx, steps = fake_run(gc, tmp_path)
    assert not gc.overall_ok(steps)
    gc.write_report(ctx, steps, "finished")
    report = (ctx.outdir / "report.md").read_text()
    assert "**FAILED**" in report and "GPU 0: NVIDIA H200" in report
    for step in steps:
        assert f"| {step.name} | `" in report
    assert (
        "| verify-demo | `python3 verify-demo` | 1 | - | FAIL | 2/9 fields bitwise equal |"
        in report
    )
    assert "| bfloat16 | equal | 38 | differs (7 of 100 elements) |" in report
    assert "the ref2va extra is missing (av)" in report
    assert "- `mix.json`" in report and "- `steps.json`" in report
    recorded = json.loads((ctx.outdir / "steps.json").read_text())
    assert recorded["state"] == "finished" and len(recorded["steps"]) == len(steps)

    # a compiled mismatch and skipped steps do not fail the run; a failed verify does
    steps[3].verdict = "pass"
    assert gc.overall_ok(steps)
    gc.write_report(ctx, steps, "finished")
    assert "**PASSED**" in (ctx.outdir / "report.md").read_text()
    steps[5].verdict = "not run"  # out of time is not a pass
    assert not gc.overall_ok(steps)
    gc.write_report(ctx, steps, "interrupted")
    assert "**interrupted** after" in (ctx.outdir / "report.md").read_text()


def test_a_step_that_runs_too_long_is_killed_and_failed(tmp_path: Path) -> None:
    gc = load_driver()
    ctx, _ = fake_run(gc, tmp_path)
    ctx.workdir.mkdir(parents=True)
    step = gc.Step("slow", "sleeps", ["sh", "-c", "sleep 60; echo never"], 1)
    gc.run_step(ctx, step, lambda _ctx, _step: ("pass", ""))
    # killed by its own limit: exit 124, and the command never reached its echo
    assert (step.rc, step.verdict) == (124, "FAIL") and "timed out" in step.note
    log = (ctx.outdir / "logs" / "slow.log").read_text()
    assert "killed after the 1 s time limit" in log and "never" not in log.splitlines()
    skipped = gc.Step("extra", "needs av", ["false"], 1, skip_reason="the ref2va extra is missing")
    gc.run_step(ctx, skipped, lambda _ctx, _step: ("FAIL", ""))
    assert (skipped.rc, skipped.verdict) == (None, "skipped")


# -- the whole script on the CPU ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: the kernel cannot build")
def test_every_step_runs_on_the_cpu_end_to_end(tmp_path: Path) -> None:
    out, scratch_parent = tmp_path / "out", tmp_path / "tmp"
    scratch_parent.mkdir()
    done = run_script(
        out,
        PRENOISE_GPU_CHECK_DEVICE="cpu",
        PRENOISE_GPU_CHECK_TINY="1",
        TMPDIR=str(scratch_parent),
    )
    assert done.returncode == 0, done.stdout + done.stderr + (out / "report.md").read_text()
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert [s["name"] for s in steps] == [
        "install",
        "kernel",
        "mix",
        "rollout-stream",
        "verify-demo",
        "verify-seed",
        "bench-seed",
    ]
    ran = [s for s in steps if s["name"] != "verify-seed"]
    assert all(s["verdict"] == "pass" and s["rc"] == 0 for s in ran), steps
    # tiny settings give the seed steps the demo recipe: its verify would repeat verify-demo
    (seed,) = [s for s in steps if s["name"] == "verify-seed"]
    assert (seed["verdict"], seed["rc"]) == ("skipped", None), seed
    assert seed["note"] == "tiny settings: verify-demo ran this recipe"
    kernel = json.loads((out / "kernel.json").read_text())
    assert kernel["extension_built"] and str(scratch_parent) in kernel["prenoise"]
    assert json.loads((out / "mix.json").read_text())["equal"] is True
    rollout = json.loads((out / "rollout-stream.json").read_text())
    assert [(r["stream"], r["served"], r["equal"]) for r in rollout["loops"]] == [
        ("x86", 4, True),
        ("libm", 4, True),
    ]
    assert json.loads((out / "verify-demo.json").read_text())["equal"] is True
    assert not (out / "verify-seed.json").exists()
    assert "prep_window_s" in json.loads((out / "bench-seed.json").read_text())["serial"]
    report = (out / "report.md").read_text()
    assert "**PASSED**" in report and "not a GPU check" in report
    assert list(scratch_parent.iterdir()) == []  # the throwaway install is gone
