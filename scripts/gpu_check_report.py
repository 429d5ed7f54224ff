"""The records and the report of scripts/gpu_check.py: each step, the run's context, report.md.

Only the standard library: like the driver, this runs on a Python without torch.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Verdicts. PASS and SKIPPED (a missing extra) count as passed.
PASS, FAIL, SKIPPED, NOT_RUN = "pass", "FAIL", "skipped", "not run"
DEVICE_ENV = "PRENOISE_GPU_CHECK_DEVICE"
"""Set to `cpu`, it runs the same steps on the CPU (the tests; no GPU check then)."""


@dataclasses.dataclass
class Step:
    """One command of the check and what came of it."""

    name: str
    what: str
    argv: list[str]
    timeout_s: int
    required: bool = True
    json: str | None = None  # file name under OUTDIR the command writes
    skip_reason: str | None = None  # set before the run: the step is skipped, not failed
    rc: int | None = None
    seconds: float | None = None
    verdict: str = NOT_RUN
    note: str = ""

    def command(self) -> str:
        """The command line as run."""
        return " ".join(self.argv)


@dataclasses.dataclass
class Context:
    """Where things are and how this run was asked for."""

    outdir: Path
    scratch: Path
    python: str
    device: str
    tiny: bool
    machine: dict[str, Any] = dataclasses.field(default_factory=dict)
    pythonpath: Path | None = None  # what the steps import prenoise from
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def site(self) -> Path:
        return self.scratch / "site"

    @property
    def source(self) -> Path:
        return self.scratch / "source"

    @property
    def workdir(self) -> Path:
        """The current directory of every step: recipes' relative outputs land here."""
        return self.scratch / "work"


#: Decides a finished step's verdict and note (it may read the step's JSON under OUTDIR).
Judge = Callable[[Context, Step], tuple[str, str]]


def overall_ok(steps: list[Step]) -> bool:
    """Every required step passed, or was skipped for a missing extra."""
    return all(s.verdict in (PASS, SKIPPED) for s in steps if s.required)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _short(ctx: Context, text: str) -> str:
    """`text` with OUTDIR, the temporary directory and the repository root abbreviated."""
    for path, short in ((ctx.outdir, "OUTDIR"), (ctx.scratch, "$TMP"), (REPO, ".")):
        text = text.replace(str(path), short)
    return text


def _load(ctx: Context, name: str) -> Any:
    try:
        return json.loads((ctx.outdir / name).read_text())
    except (OSError, ValueError):
        return None


def mix_section(ctx: Context) -> list[str]:
    report = _load(ctx, "mix.json")
    if not report:
        return ["No mix result (see the steps table)."]
    lines = [
        f"Device {report['device']} ({report.get('device_name') or 'CPU'}) against the CPU "
        "reference, bit for bit. Compiled: `torch.compile(mix_condition)`, tau 0.999, "
        "reported only (fused kernels may round differently).",
        "",
        "| dtype | eager | cases | compiled |",
        "| --- | --- | ---: | --- |",
    ]
    for name, entry in report["dtypes"].items():
        eager, compiled = entry["eager"], entry["compiled"]
        state = "equal" if eager["equal"] else f"DIFFERS: {', '.join(eager['failed_cases'])}"
        detail = compiled["status"]
        if compiled["status"] == "differs":
            detail += f" ({compiled['differing_elements']:,} of {compiled['numel']:,} elements)"
        elif compiled["status"] == "error":
            detail += f" ({compiled['error']})"
        lines.append(f"| {name} | {_cell(state)} | {eager['cases']} | {_cell(detail)} |")
    rules = report.get("upstream_rules")
    if rules:
        lines += [
            "",
            "vLLM-Omni 0.32.0rc1's mixing statements on this device (its NPU rule: coefficients "
            "rounded in CPU float32, then two products and one sum on the device; its guided "
            "recipe's Python-float statement), against prenoise's mix and the CPU:",
            "",
            "| case | equal |",
            "| --- | --- |",
            *(f"| {_cell(c['case'])} | {'yes' if c['equal'] else 'NO'} |" for c in rules["cases"]),
        ]
    return lines


def rollout_stream_section(ctx: Context) -> list[str]:
    report = _load(ctx, "rollout-stream.json")
    if not report:
        return ["No rollout-stream result (see the steps table)."]
    lines = [
        f"A rollout loop's per-step noise with a `torch.Generator(device={report['device']!r})`, "
        "through `prenoise.integrations.sglang.h3_rollout` (upstream's update stood in for by "
        "its one `torch.randn` call): in `x86` / `libm`, drawn ahead on a CPU stand-in and "
        "copied to the device, against the stream's CPU draws; `native`, upstream's draw "
        "untouched.",
        "",
        "| stream | steps | rows | served | bitwise equal | failures |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for loop in report.get("loops", []):
        lines.append(
            f"| {loop['stream']} | {loop['steps']} | {loop['rows']} | {loop['served']} | "
            f"{'yes' if loop['equal'] else 'NO'} | {_cell('; '.join(loop['failures']))} |"
        )
    if report.get("error"):
        lines += ["", f"Error: `{_cell(report['error'].strip().splitlines()[-1])}`"]
    return lines


def verify_section(ctx: Context, steps: list[Step]) -> list[str]:
    lines = [
        "| step | verdict | fields equal | global RNG | prepared noise used |",
        "| --- | --- | --- | --- | --- |",
    ]
    for step in steps:
        if not step.name.startswith("verify"):
            continue
        report = _load(ctx, step.json or "") if step.verdict != SKIPPED else None
        if not report:
            lines.append(f"| {step.name} | {step.verdict} | {_cell(step.note) or '-'} | - | - |")
            continue
        fields = report.get("fields", {})
        equal = sum(1 for f in fields.values() if f.get("equal"))
        rng = "unchanged" if report.get("rng_state_unchanged") else "CHANGED"
        used = "yes" if report.get("used_prepared_noise") else "no"
        lines.append(f"| {step.name} | {step.verdict} | {equal}/{len(fields)} | {rng} | {used} |")
    return lines


def bench_section(ctx: Context, steps: list[Step]) -> list[str]:
    step = next(s for s in steps if s.name == "bench-seed")
    summary = _load(ctx, "bench-seed.json") if step.verdict != SKIPPED else None
    if not summary:
        return [f"No bench result: {step.verdict} {step.note}".rstrip()]
    lines = [
        f"{summary['recipe']}: {summary['pairs']} pair(s) after {summary['warmup']} warm-up, "
        f"{summary['timed']}; medians.",
        "",
        "| metric | serial | overlapped | Δ per pair |",
        "| --- | ---: | ---: | ---: |",
    ]
    for metric, stats in summary["serial"].items():
        other = summary["overlapped"][metric]["median"]
        delta = summary["delta"].get(metric, {}).get("median", 0.0)
        if metric == "peak_rss_bytes":
            cells = [f"{v / 2**20:.0f} MiB" for v in (stats["median"], other)]
            cells.append(f"{delta / 2**20:+.0f} MiB")
        else:
            cells = [f"{v:.4f} s" for v in (stats["median"], other)] + [f"{delta:+.4f} s"]
        lines.append(f"| {metric} | {' | '.join(cells)} |")
    return lines


def render_report(ctx: Context, steps: list[Step], state: str) -> str:
    """report.md: the machine, the kernel build, every step, the key results, the files."""
    done = [s for s in steps if s.verdict != NOT_RUN or s.note]
    if state == "finished":
        verdict = "PASSED" if overall_ok(steps) else "FAILED"
        headline = f"**{verdict}**: " + (
            "every required check passed." if verdict == "PASSED" else "see the FAIL rows below."
        )
    else:
        headline = f"**{state}** after {len(done)} of {len(steps)} steps."
    m = ctx.machine
    lines = [
        "# prenoise GPU check",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"`scripts/gpu_check.sh`, device `{ctx.device}`" + (", tiny settings" if ctx.tiny else ""),
        "",
        headline,
    ]
    if not ctx.device.startswith("cuda"):
        lines += [
            "",
            f"{DEVICE_ENV}={ctx.device}: a run of the script's own logic on the CPU, "
            "not a GPU check.",
        ]
    lines += [
        "",
        "## Machine",
        "",
        f"- GPU: {m.get('nvidia_smi') or 'nvidia-smi not found'}",
        f"- GPU (torch): {m.get('gpu', '-')}; driver {m.get('driver') or '-'}",
        f"- torch {m.get('torch')}, CUDA {m.get('torch_cuda')}, cuDNN {m.get('cudnn', '-')}, "
        f"CPU capability {m.get('cpu_capability')}",
        f"- Python {m.get('python')}",
        f"- {m.get('platform')}; {m.get('cpu')}",
        f"- C compiler: {m.get('compiler') or 'none found (cc)'}; "
        f"setuptools {m.get('setuptools')}, pip {m.get('pip')}",
        "",
        "## C kernel build",
        "",
    ]
    install = next(s for s in steps if s.name == "install")
    kernel = m.get("kernel")
    lines.append(f"- pip install: {install.verdict} {install.note}".rstrip())
    if kernel:
        built = "built" if kernel["extension_built"] else f"NOT built ({kernel['import_error']})"
        lines.append(
            f"- extension {built}; backend `{kernel['backend']}`, active "
            f"{kernel['active']}: {kernel['reason']}"
        )
    else:
        kstep = next(s for s in steps if s.name == "kernel")
        lines.append(f"- kernel probe: {kstep.verdict} {kstep.note}".rstrip())
    lines += [
        "",
        "## Steps",
        "",
        "| step | command | exit | seconds | verdict | note |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for s in steps:
        command = s.command()
        if s.name == "kernel":  # the probe's source, not its text
            command = f"{s.argv[0]} -c <import prenoise.noise.kernel> {s.argv[-1]}"
        command = _short(ctx, command)
        rc = "-" if s.rc is None else str(s.rc)
        secs = "-" if s.seconds is None else f"{s.seconds:.1f}"
        lines.append(
            f"| {s.name} | `{_cell(command)}` | {rc} | {secs} | {s.verdict} | "
            f"{_cell(_short(ctx, s.note))} |"
        )
    lines += [
        "",
        "Exit 124: the step hit its time limit. Skipped steps are not failures, but what they",
        "check was not checked.",
        "",
        "## Results",
        "",
        "### Exact mix",
        "",
        *mix_section(ctx),
        "",
        "### Rollout noise of a device generator in the named streams",
        "",
        *rollout_stream_section(ctx),
        "",
        "### prenoise verify",
        "",
        *verify_section(ctx, steps),
        "",
        "### prenoise bench",
        "",
        *bench_section(ctx, steps),
        "",
        "## Files",
        "",
    ]
    files = sorted(
        p.relative_to(ctx.outdir).as_posix()
        for p in ctx.outdir.rglob("*")
        if p.is_file() and p.name != "report.md"
    )
    lines += [f"- `{f}`" for f in files] or ["- (none)"]
    return "\n".join(lines) + "\n"


def write_report(ctx: Context, steps: list[Step], state: str) -> None:
    """steps.json, then report.md (which lists it), each written whole by a rename."""
    records = [dataclasses.asdict(s) for s in steps]
    _write_whole(
        ctx.outdir / "steps.json", json.dumps({"state": state, "steps": records}, indent=2)
    )
    _write_whole(ctx.outdir / "report.md", render_report(ctx, steps, state))


def _write_whole(path: Path, text: str) -> None:
    """A reader (or a kill mid-write) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text if text.endswith("\n") else text + "\n")
    tmp.replace(path)
