"""SGLang's own MiniMax-H3 unit tests pass identically with the plugin loaded (0.5.23).

The sglang 0.5.23 wheel ships its diffusion unit tests (`sglang/multimodal_gen/test/unit/`,
Apache-2.0, SGLang's authors), so nothing is vendored: this runs the installed copies, checked
byte for byte against the wheel's own `RECORD` (sha256), i.e. exactly the files of the PyPI
release `make setup-sglang` installs. Selected: every `test_minimax_h3_*.py`, the other H3
files (`test_comfyui_h3.py`, `test_vsa_h3_ref2va_regions.py`, `test_vsa_h3_attention.py`,
`test_hybrid_window_h3_attention.py`), and the plugin loader's own tests
(`test_diffusion_plugins.py`), less the two files below that cannot be imported here.

The selection runs twice, in two concurrent pytest processes with upstream's own
`conftest.py`: `off` (`PRENOISE_SGLANG=0`, no plugin loaded) and `on` (`PRENOISE_SGLANG=1`,
plugins loaded by SGLang's own loader before any test: `load_plugins(); apply_plugin_hooks()`);
`_upstream_arm` does the loading and the recording. Asserted: prenoise's hooks applied in
`on` and in no way in `off`; every test report identical (node id, phase, outcome, skip and
xfail reason: the same tests, none skipped or failed because of prenoise); the global CPU RNG
state after every test's call identical (both arms seed it the same before each test); no
prenoise thread left; upstream's suite passes on this machine (CUDA-only tests skip by
upstream's own marks). Upstream's tests mostly exercise the code around the hooked functions
(the denoise loop, admission, media, the DiT and VAE contracts, ComfyUI layouts, the plugin
loader): this proves that loading the plugin changes none of their results; the bitwise proofs
of the noise paths themselves are the other tests of this folder.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _upstream_arm import ARM_ENV, REPORT_ENV

from prenoise.integrations.sglang import plugin
from waits import READY_CEILING_S

RELEASE = "0.5.23"
UNIT = "sglang/multimodal_gen/test/unit"
NOT_IMPORTABLE = {
    "test_minimax_h3_pdd_offline.py": "imports sglang.test.test_utils, which imports the LLM "
    "benchmark's `datasets` (not installed); also needs a checkpoint",
    "test_minimax_h3_streamed_encode.py": "imports sglang.test.test_utils (`datasets`)",
}
OTHER_FILES = (
    "test_comfyui_h3.py",
    "test_vsa_h3_ref2va_regions.py",
    "test_vsa_h3_attention.py",
    "test_hybrid_window_h3_attention.py",
    "test_diffusion_plugins.py",
)


def _site() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))).parent


def _recorded_digests() -> dict[str, str]:
    """sha256 (RECORD's urlsafe base64, unpadded) of every file of the installed wheel."""
    record = importlib.metadata.distribution("sglang").read_text("RECORD") or ""
    rows = csv.reader(record.splitlines())
    return {row[0]: row[1].removeprefix("sha256=") for row in rows if len(row) > 1 and row[1]}


def _selected(site: Path) -> list[Path]:
    unit = site / UNIT
    names = sorted(p.name for p in unit.glob("test_minimax_h3_*.py")) + list(OTHER_FILES)
    files = [unit / name for name in names if name not in NOT_IMPORTABLE]
    recorded = _recorded_digests()
    for path in [*files, unit / "conftest.py"]:
        digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest())
        assert recorded.get(f"{UNIT}/{path.name}") == digest.decode().rstrip("="), path
    return files


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(arm: str, files: list[Path], folder: Path) -> subprocess.Popen[str]:
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n")  # not this repository's pytest settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    here = str(Path(__file__).parent)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p),
            plugin.ENABLE_ENV: {"on": "1", "off": "0"}[arm],
            ARM_ENV: arm,
            REPORT_ENV: str(folder / "report.json"),
            "HF_HUB_OFFLINE": "1",
            # upstream's component-accuracy helper (imported by test_comfyui_h3.py) binds
            # MASTER_PORT, 29505 when unset: one free port per arm, so the two arms (and any
            # other run on this machine) do not collide
            "MASTER_PORT": str(_free_port()),
        }
    )
    command = [sys.executable, "-m", "pytest", "-c", str(folder / "pytest.ini"),
               "--rootdir", str(files[0].parent), "-p", "no:cacheprovider",
               "-p", "_upstream_arm", "-q", "-rfE", *map(str, files)]  # fmt: skip
    with (folder / "output.txt").open("w") as out:  # the child keeps its own descriptor
        return subprocess.Popen(command, cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _result(arm: str, process: subprocess.Popen[str], folder: Path) -> dict[str, Any]:
    try:
        process.wait(timeout=READY_CEILING_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    tail = (folder / "output.txt").read_text(errors="replace")[-4000:]
    report = folder / "report.json"
    assert report.exists(), f"{arm}: rc {process.returncode}\n{tail}"
    result: dict[str, Any] = json.loads(report.read_text())
    result["tail"] = tail
    return result


def _counts(result: dict[str, Any]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for r in result["reports"]:
        if r["kind"] != "TestReport":
            continue  # subtests
        if r["when"] == "call" or r["outcome"] != "passed":
            counts["xfailed" if r["xfail"] is not None else r["outcome"]] += 1
    return counts


@pytest.mark.slow
def test_upstream_h3_suite_identical_with_plugin_loaded(tmp_path: Path) -> None:
    assert importlib.metadata.version("sglang") == RELEASE
    files = _selected(_site())
    started = {arm: _start(arm, files, tmp_path / arm) for arm in ("off", "on")}
    try:
        off, on = (_result(arm, p, tmp_path / arm) for arm, p in started.items())
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    ours = {target for target, _hook in plugin.HOOKS + plugin.CONDITION_HOOKS}
    assert off["applied"] == []
    assert ours <= set(on["applied"]), sorted(ours - set(on["applied"]))

    assert off["exitstatus"] == 0, off["tail"]  # upstream's suite passes here without prenoise
    counts = _counts(off)
    assert counts["passed"] >= 300 and counts["failed"] == 0, counts
    assert on["reports"] == off["reports"], on["tail"]
    assert on["exitstatus"] == 0
    assert on["rng_after_call"] == off["rng_after_call"]
    assert len(off["rng_after_call"]) >= counts["passed"]
    assert on["threads"] == [] and off["threads"] == []
