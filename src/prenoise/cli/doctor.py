"""`prenoise doctor`: what is active on this install and why, per part: the noise backend and
torch's self-checks, the noise streams, the diffusers integration, the vLLM-Omni plugin."""

from __future__ import annotations

import os

from rich.table import Table

from prenoise.cli import omp_policy
from prenoise.observe.console_text import cell
from prenoise.observe.progress import CommandProgress

__all__ = ["doctor_table"]


def doctor_table(progress: CommandProgress | None = None) -> Table:
    """The doctor's report: noise backend, torch, noise streams, diffusers, the vLLM-Omni and
    SGLang plugins.

    `progress` (the command's): one stage per part, so that a slow part (diffusers' source
    digests, several seconds in a vLLM-Omni environment) shows where the command is."""
    stage = progress.stage if progress is not None else (lambda name: None)
    stage("torch and the noise backend's self-checks")
    import torch

    from prenoise.noise import kernel

    status = kernel.backend_status()
    table = Table(title="prenoise doctor", show_header=False)
    # Labels wrap at spaces within 26 columns, leaving the status column room for a whole
    # `PRENOISE_…=VALUE` at 80 columns: only a token longer than that column is folded.
    table.add_column("what", max_width=26)
    table.add_column("status", overflow="fold")  # paths and variables stay whole, never "…"
    active = "active" if status.active else "inactive"
    table.add_row("noise backend", cell(f"{status.name} ({active})"))
    table.add_row("why", cell(status.reason))
    table.add_row(cell(kernel.ENV_VAR), cell(os.environ.get(kernel.ENV_VAR, "(unset)")))
    table.add_row("2 MiB pages for big buffers", cell(kernel.huge_page_status()))
    tested = ", ".join(kernel.TESTED_TORCH_RELEASES)
    table.add_row(
        "torch", cell(f"{torch.__version__} (tested: {tested}; any torch is self-checked here)")
    )
    half = kernel.half_rule_status()
    table.add_row("torch bf16/f16 rule", cell("ok: " if half.holds else "REFUSED: ", half.reason))
    table.add_row("torch CPU capability", cell(torch.backends.cpu.get_cpu_capability()))
    table.add_row("torch intra-op threads", cell(str(torch.get_num_threads())))
    table.add_row("OpenMP wait policy", cell(omp_policy.describe()))
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    table.add_row("CUDA", cell(cuda))
    stage("the noise streams' self-checks")
    _noise_stream_rows(table)
    stage("diffusers: the source digests of the code each plan relies on")
    _diffusers_rows(table)
    stage("vLLM-Omni: the source digests of the code each path relies on")
    _vllm_omni_rows(table)
    stage("SGLang: the source digests of the code each path relies on")
    _sglang_rows(table)
    return table


def _diffusers_rows(table: Table) -> None:
    """The diffusers integration: which classes, schedulers, windows and modular plans are used
    here, and for each one that runs plain the changed function (source digests)."""
    from prenoise.integrations.diffusers.status import diffusers_status

    for name, value in diffusers_status().rows():
        table.add_row(cell(name), cell(value))


def _noise_stream_rows(table: Table) -> None:
    """Which stream local torch draws; which streams this build can draw, self-checked."""
    from prenoise.noise import streams as noise_streams

    table.add_row("local torch draws stream", cell(noise_streams.local_torch_stream()))
    usable = ["native"]
    for stream in noise_streams.NON_NATIVE_STREAMS:
        status = noise_streams.stream_status(stream)
        table.add_row(cell(f"stream {stream!r} self-check"), cell(status.summary()))
        if status.usable:
            usable.append(stream)
    table.add_row("streams this build can draw", cell(", ".join(usable)))


def _vllm_omni_rows(table: Table) -> None:
    """The vLLM-Omni plugin as the next vLLM-Omni process here would load it (metadata only)."""
    from prenoise.integrations.vllm_omni.status import plugin_status

    for name, value in plugin_status().rows():
        table.add_row(cell(name), cell(value))


def _sglang_rows(table: Table) -> None:
    """The SGLang plugin as the next SGLang diffusion process here would load it (metadata and
    source files only)."""
    from prenoise.integrations.sglang.status import sglang_status

    for name, value in sglang_status().rows():
        table.add_row(cell(name), cell(value))
