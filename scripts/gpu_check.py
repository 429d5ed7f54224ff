"""Driver of scripts/gpu_check.sh: check prenoise on one CUDA GPU, write OUTDIR/report.md.

    scripts/gpu_check.sh OUTDIR      # the entry point; it finds Python and runs this file

Refusals (exit 2, one line on stderr, OUTDIR left as it was) come first: no OUTDIR, OUTDIR not
empty or not creatable, no torch, a missing base dependency, no CUDA device. Then, each step under
its own time limit, logged to OUTDIR/logs/, and the next one run whatever the last one did:

1. install: `pip install --no-build-isolation --no-deps --no-index --target` of a copy of the
   source into a temporary directory. The C kernel is compiled there; the machine's Python
   environment is not changed and nothing is downloaded (the machine has no network).
2. kernel: does the installed copy import its C kernel, and which backend is active.
3. mix: scripts/gpu_mix_check.py, the exact mix on the GPU against the CPU reference, float32,
   float16 and bfloat16 (eager required; the torch.compile variant only reported).
3b. rollout-stream: scripts/gpu_rollout_stream_check.py, SGLang rollout noise of a CUDA generator
   in the named streams (drawn ahead on a CPU stand-in, copied to the GPU) against the streams'
   CPU draws, the CUDA generator untouched; the native stream left to upstream (SGLang not needed).
4. verify-demo, verify-seed: `prenoise verify --device cuda` on recipes/ref2va-demo.yaml and on
   the seed recipe recipes/ref2va-15s-1344x768.yaml.
5. bench-seed: `prenoise bench --device cuda` on the seed recipe, 1 warm-up and 1 pair.

Steps 4-5 need the `ref2va` extra; without it they are skipped (not failed) and say why.
report.md is rewritten after every step, so a run cut short still leaves what it had. Exit 0 when
every required step passed or was skipped for a missing extra, 1 otherwise.

Environment: PYTHON (bash wrapper) picks the interpreter; PRENOISE_GPU_CHECK_DEVICE=cpu runs the
same steps on the CPU (no GPU check: the tests use it); PRENOISE_GPU_CHECK_TINY=1 shrinks them
(the demo recipe for the seed steps, whose verify then is skipped as a repeat of verify-demo;
small mix inputs, no torch.compile, no bench warm-up).

Only the standard library is imported at the top: this file must run, and refuse clearly, on a
Python that has no torch. The step records and report.md live in scripts/gpu_check_report.py.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_check_report import (  # beside this file: the script's directory is on sys.path
    DEVICE_ENV,
    FAIL,
    NOT_RUN,
    PASS,
    REPO,
    SKIPPED,
    Context,
    Judge,
    Step,
    overall_ok,
    write_report,
)

DEMO_RECIPE = "recipes/ref2va-demo.yaml"
SEED_RECIPE = "recipes/ref2va-15s-1344x768.yaml"
#: prenoise's own dependencies (pyproject.toml): import name -> pip name. --no-deps installs none.
BASE_DEPS = {
    "torch": "torch",
    "numpy": "numpy",
    "pydantic": "pydantic",
    "yaml": "pyyaml",
    "rich": "rich",
}
#: The `ref2va` extra, which `prenoise verify` and `bench` need: import name -> pip name.
REF2VA_DEPS = {
    "av": "av",
    "PIL": "pillow",
    "transformers": "transformers",
    "safetensors": "safetensors",
    "sentencepiece": "sentencepiece",
}
#: All steps together stay inside this (the machine is lent for 15 minutes, starts included).
BUDGET_S = 480
#: A step is not started with less than this left of the budget.
MIN_STEP_S = 15
TINY_ENV = "PRENOISE_GPU_CHECK_TINY"
NO_CUDA = "no CUDA device: this script checks prenoise on a GPU; run it on a machine with one"

#: Run by the kernel step with the installed copy first on sys.path; argv[1]: where to write JSON.
KERNEL_PROBE = """
import importlib, json, sys
import prenoise
from prenoise.noise import kernel
try:
    importlib.import_module("prenoise.noise._noise_kernel")
    built, error = True, None
except ImportError as exc:
    built, error = False, str(exc)
status = kernel.backend_status()
info = {"prenoise": prenoise.__file__, "extension_built": built, "import_error": error,
        "backend": status.name, "active": status.active, "reason": status.reason}
print(status)
json.dump(info, open(sys.argv[1], "w"), indent=2)
"""


class Refusal(Exception):
    """Why the script will not run here: printed as one line, exit status 2."""


# -- refusals -------------------------------------------------------------------------------------


def check_outdir(outdir: Path) -> None:
    """OUTDIR must be absent or an empty directory: results never mix with an earlier run's."""
    if outdir.exists() and not outdir.is_dir():
        raise Refusal(f"OUTDIR {outdir} exists and is not a directory")
    if outdir.is_dir() and any(outdir.iterdir()):
        raise Refusal(f"OUTDIR {outdir} is not empty: give a new or empty directory")


def make_outdir(outdir: Path) -> list[Path]:
    """Create OUTDIR (and missing parents); return the directories created, deepest last."""
    missing = [p for p in (outdir, *outdir.parents) if not p.exists()][::-1]
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_created(missing)
        raise Refusal(f"cannot create OUTDIR {outdir}: {exc.strerror or exc}") from None
    if not os.access(outdir, os.W_OK):
        remove_created(missing)
        raise Refusal(f"OUTDIR {outdir} is not writable")
    return missing


def remove_created(created: list[Path]) -> None:
    for path in reversed(created):
        with contextlib.suppress(OSError):  # not empty after all: leave it
            path.rmdir()


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_python() -> Any:
    """Import torch (refusing without it) and check prenoise's other dependencies are present."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Refusal(
            f"no torch: {sys.executable} cannot import torch ({first}); set PYTHON to a "
            "Python with torch"
        ) from None
    missing = [pip for module, pip in BASE_DEPS.items() if not _importable(module)]
    if missing:
        raise Refusal(
            f"{sys.executable} lacks prenoise's dependencies {', '.join(missing)}: this script "
            "installs prenoise with --no-deps and cannot download them"
        )
    return torch


def requested_device() -> str:
    """cuda unless PRENOISE_GPU_CHECK_DEVICE says otherwise (cpu: the tests' dry run)."""
    device = os.environ.get(DEVICE_ENV, "cuda").strip() or "cuda"
    if device != "cpu" and device != "cuda" and not device.startswith("cuda:"):
        raise Refusal(f"{DEVICE_ENV}={device!r}: accepted: cuda, cuda:N, cpu")
    return device


def check_device(torch: Any, device: str) -> None:
    """A CUDA device must be there, unless the run was asked for on the CPU."""
    if device == "cpu":
        return
    import warnings

    with warnings.catch_warnings():  # a broken driver warns; the refusal says it in one line
        warnings.simplefilter("ignore")
        usable = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if not usable:
        raise Refusal(NO_CUDA)


# -- machine facts ------------------------------------------------------------------------------


def _first_line(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (done.stdout or done.stderr).strip()
    return text if done.returncode == 0 and text else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_facts(torch: Any, device: str) -> dict[str, Any]:
    """What the report says about the machine; none of it decides a verdict."""
    facts: dict[str, Any] = {
        "nvidia_smi": _first_line(["nvidia-smi", "-L"]),
        "driver": _first_line(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        ),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": f"{_cpu_model()}, {os.cpu_count()} logical CPUs",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "compiler": _first_line(["cc", "--version"]),
        "setuptools": _version("setuptools"),
        "pip": _version("pip"),
        "device": device,
    }
    if facts["compiler"]:
        facts["compiler"] = facts["compiler"].splitlines()[0]
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        facts["gpu"] = (
            f"{props.name}, compute capability {props.major}.{props.minor}, "
            f"{props.total_memory / 2**30:.0f} GiB"
        )
        facts["cudnn"] = torch.backends.cudnn.version()
    return facts


# -- running steps ------------------------------------------------------------------------------


def step_env(ctx: Context) -> dict[str, str]:
    """The steps' environment: prenoise from the throwaway install, no hub, caches in scratch."""
    env = dict(os.environ)
    if ctx.pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ctx.pythonpath), env.get("PYTHONPATH", "")) if p
        )
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # compiler caches stay in the scratch directory, removed at exit: nothing left behind
    env["TORCHINDUCTOR_CACHE_DIR"] = str(ctx.scratch / "inductor-cache")
    env["TRITON_CACHE_DIR"] = str(ctx.scratch / "triton-cache")
    env["PIP_NO_INPUT"] = "1"
    return env


def run_command(
    argv: list[str], log: Path, timeout_s: float, env: dict[str, str], cwd: Path
) -> int:
    """Run `argv` in its own process group, output to `log`; 124 when it ran out of time.

    The whole group is killed on a timeout or an interrupt, so no child outlives its step.
    """
    with log.open("w") as out:
        out.write(f"$ {' '.join(argv)}\n(cwd {cwd}, time limit {timeout_s:.0f} s)\n\n")
        out.flush()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out.write(f"\n[gpu_check: killed after the {timeout_s:.0f} s time limit]\n")
            return 124
        except BaseException:
            _kill_group(proc)
            raise


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_step(ctx: Context, step: Step, judge: Judge) -> None:
    """Run one step (unless skipped or out of budget) and set its verdict with `judge`."""
    if step.skip_reason:
        step.verdict, step.note = SKIPPED, step.skip_reason
        return
    left = BUDGET_S - (time.monotonic() - ctx.started)
    if left < MIN_STEP_S:
        step.verdict, step.note = NOT_RUN, f"not started: {left:.0f} s left of the {BUDGET_S} s"
        return
    timeout_s = min(step.timeout_s, left)
    print(f"gpu_check: {step.name}: {step.what} (limit {timeout_s:.0f} s)", flush=True)
    began = time.monotonic()
    try:
        step.rc = run_command(
            step.argv,
            ctx.outdir / "logs" / f"{step.name}.log",
            timeout_s,
            step_env(ctx),
            ctx.workdir,
        )
    except KeyboardInterrupt:
        step.verdict, step.note = FAIL, "interrupted (the script was stopped)"
        raise
    finally:
        step.seconds = time.monotonic() - began
    if step.rc == 124:
        step.verdict, step.note = FAIL, f"timed out after {timeout_s:.0f} s"
    else:
        try:
            step.verdict, step.note = judge(ctx, step)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a missing or odd JSON file
            step.verdict, step.note = FAIL, f"could not read the result: {exc}"
    print(f"gpu_check: {step.name}: {step.verdict} {step.note}".rstrip(), flush=True)


def _json(ctx: Context, step: Step) -> Any:
    assert step.json is not None
    return json.loads((ctx.outdir / step.json).read_text())


def judge_install(ctx: Context, step: Step) -> tuple[str, str]:
    if step.rc == 0:
        ctx.pythonpath = ctx.site
        return PASS, f"installed into a temporary --target ({ctx.site.name}/)"
    # Later steps still run, from a plain copy of src/ (pure Python, no C kernel).
    ctx.pythonpath = ctx.source / "src"
    return FAIL, "pip failed (see logs/install.log); later steps import prenoise from src/"


def judge_kernel(ctx: Context, step: Step) -> tuple[str, str]:
    if step.rc != 0:
        return FAIL, f"exit status {step.rc}"
    info = _json(ctx, step)
    ctx.machine["kernel"] = info
    where = Path(info["prenoise"]).resolve()
    if ctx.pythonpath is None or ctx.pythonpath.resolve() not in where.parents:
        return FAIL, f"imported prenoise from {where}, not from the throwaway install"
    if not info["extension_built"]:
        return FAIL, f"C kernel not built: {info['import_error']}"
    if not info["active"]:
        return FAIL, f"C kernel built but not active: {info['reason']}"
    return PASS, f"C kernel built; backend {info['backend']} active"


def judge_mix(ctx: Context, step: Step) -> tuple[str, str]:
    report = _json(ctx, step)
    compiled = ", ".join(f"{k} {v['compiled']['status']}" for k, v in report["dtypes"].items())
    eager = "eager equal for every dtype" if report["equal"] else "eager MISMATCH"
    verdict = PASS if step.rc == 0 and report["equal"] else FAIL
    return verdict, f"{eager}; compiled (reported only): {compiled}"


def judge_rollout_stream(ctx: Context, step: Step) -> tuple[str, str]:
    report = _json(ctx, step)
    loops = ", ".join(
        f"{loop['stream']} {'equal' if loop['equal'] else 'DIFFERS'} "
        f"(served {loop['served']}/{loop['steps']})"
        for loop in report.get("loops", [])
    )
    verdict = PASS if step.rc == 0 and report.get("equal") else FAIL
    return verdict, loops or "no loop ran (see the log)"


def judge_verify(ctx: Context, step: Step) -> tuple[str, str]:
    report = _json(ctx, step)
    fields = report.get("fields", {})
    equal = sum(1 for f in fields.values() if f.get("equal"))
    note = (
        f"{equal}/{len(fields)} fields bitwise equal; "
        f"global RNG {'unchanged' if report.get('rng_state_unchanged') else 'CHANGED'}"
    )
    return (PASS if step.rc == 0 and report.get("equal") else FAIL), note


def judge_bench(ctx: Context, step: Step) -> tuple[str, str]:
    if step.rc != 0:
        return FAIL, f"exit status {step.rc}"
    summary = _json(ctx, step)
    serial = summary["serial"]["prep_window_s"]["median"]
    overlapped = summary["overlapped"]["prep_window_s"]["median"]
    return PASS, f"preparation window serial {serial:.3f} s, overlapped {overlapped:.3f} s"


def copy_source(ctx: Context) -> None:
    """What pip builds from: the tracked layout, without built or cached files, so the repository
    gets no build/ or egg-info and no extension built elsewhere is reused."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.egg-info", "*.pyc")
    ctx.source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, ctx.source / name)
    shutil.copytree(REPO / "src", ctx.source / "src", ignore=ignore)


def plan(ctx: Context) -> list[tuple[Step, Judge]]:
    """Every step, in order, with the function that decides its verdict."""
    py, device, out = ctx.python, ctx.device, ctx.outdir
    seed = DEMO_RECIPE if ctx.tiny else SEED_RECIPE
    missing = [pip for module, pip in REF2VA_DEPS.items() if not _importable(module)]
    no_extra = f"the ref2va extra is missing ({', '.join(missing)})" if missing else None
    warmup = "0" if ctx.tiny else "1"
    # Tiny settings use the demo recipe for the seed steps: verify-demo already ran that verify.
    tiny_twice = "tiny settings: verify-demo ran this recipe" if ctx.tiny else None

    pip = "-m pip install --no-build-isolation --no-deps --no-index --no-cache-dir"
    install = [py, *pip.split(), "--disable-pip-version-check"]
    install += ["--target", str(ctx.site), str(ctx.source)]
    probe = [py, "-c", KERNEL_PROBE, str(out / "kernel.json")]
    mix = [py, str(REPO / "scripts" / "gpu_mix_check.py"), "--device", device]
    mix += ["--json", str(out / "mix.json")]
    mix += ["--numel", "50000", "--no-compile"] if ctx.tiny else []
    rollout = [py, str(REPO / "scripts" / "gpu_rollout_stream_check.py"), "--device", device]
    rollout += ["--json", str(out / "rollout-stream.json")]
    rollout += ["--rows", "1008"] if ctx.tiny else []

    def prenoise(command: str, recipe: str, json_name: str, *extra: str) -> list[str]:
        return [py, "-m", "prenoise", command, "--recipe", str(REPO / recipe), "--device", device,
                *extra, "--json", str(out / json_name)]  # fmt: skip

    bench = prenoise("bench", seed, "bench-seed.json", "--pairs", "1", "--warmup", warmup)
    return [
        (Step("install", "build and install prenoise into a temporary --target", install, 300),
         judge_install),
        (Step("kernel", "import the installed copy; C kernel backend", probe, 60,
              json="kernel.json"), judge_kernel),
        (Step("mix", f"exact mix on {device} vs the CPU reference", mix, 240, json="mix.json"),
         judge_mix),
        (Step("rollout-stream", f"SGLang rollout noise of a {device} generator in the named "
              "streams", rollout, 120, json="rollout-stream.json"), judge_rollout_stream),
        (Step("verify-demo", f"prenoise verify {DEMO_RECIPE}",
              prenoise("verify", DEMO_RECIPE, "verify-demo.json"), 180,
              json="verify-demo.json", skip_reason=no_extra), judge_verify),
        (Step("verify-seed", f"prenoise verify {seed}",
              prenoise("verify", seed, "verify-seed.json"), 300,
              json="verify-seed.json", skip_reason=no_extra or tiny_twice), judge_verify),
        (Step("bench-seed", f"prenoise bench {seed}, {warmup} warm-up, 1 pair", bench, 300,
              json="bench-seed.json", skip_reason=no_extra), judge_bench),
    ]  # fmt: skip


# -- main -----------------------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    created: list[Path] = []
    try:
        if len(argv) != 1 or not argv[0]:
            raise Refusal("usage: scripts/gpu_check.sh OUTDIR (OUTDIR must not exist or be empty)")
        outdir = Path(argv[0]).expanduser().absolute()
        check_outdir(outdir)
        created = make_outdir(outdir)
        device = requested_device()
        torch = check_python()
        check_device(torch, device)
    except Refusal as exc:
        remove_created(created)
        print(f"gpu_check.sh: {exc}", file=sys.stderr)
        return 2

    signal.signal(signal.SIGTERM, _on_sigterm)
    tiny = os.environ.get(TINY_ENV, "").strip() not in ("", "0")
    scratch = Path(tempfile.mkdtemp(prefix="prenoise-gpu-check-"))
    ctx = Context(outdir, scratch, sys.executable, device, tiny)
    steps: list[Step] = []
    state = "interrupted"
    try:
        (outdir / "logs").mkdir()
        ctx.workdir.mkdir()
        ctx.machine = machine_facts(torch, device)
        copy_source(ctx)
        planned = plan(ctx)
        steps = [step for step, _ in planned]
        write_report(ctx, steps, "in progress")
        for step, judge in planned:
            run_step(ctx, step, judge)
            write_report(ctx, steps, "in progress")
        state = "finished"
    except KeyboardInterrupt:
        print("gpu_check: interrupted; report.md has the steps run so far", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if steps:
            write_report(ctx, steps, state)
    ok = state == "finished" and overall_ok(steps)
    print(f"gpu_check: {'PASSED' if ok else 'FAILED'}; report: {outdir / 'report.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
