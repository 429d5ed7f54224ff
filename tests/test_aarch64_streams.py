"""The noise streams on aarch64, emulated: the kernel's C core cross-compiled for aarch64
(`make build/aarch64/stream_dump`, static, the extension's flags) and run under qemu-user for
several CPU models must reproduce the golden digests of real torch, bit for bit.

`make test` installs the Debian cross tools first (`make aarch64-tools`); where they are missing
(no apt, or not root) these tests skip and say so. Emulation proves the arithmetic, not speed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from prenoise.noise.streams import load_goldens, stream_digest
from waits import READY_CEILING_S

ROOT = Path(__file__).resolve().parents[1]
DUMP = ROOT / "build" / "aarch64" / "stream_dump"
TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64-static", "make")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"aarch64 emulation unavailable ({', '.join(MISSING)} missing): run `make "
    "aarch64-tools` as root on Debian/Ubuntu (apt) to install gcc-aarch64-linux-gnu and "
    "qemu-user-static",
)
# cortex-a57: baseline ARMv8.0; neoverse-n1: ARMv8.2 server cores; max: everything incl. SVE.
CPUS = ("cortex-a57", "neoverse-n1", "max")


@pytest.fixture(scope="module")
def dump() -> Path:
    subprocess.run(["make", "-s", str(DUMP.relative_to(ROOT))], cwd=ROOT, check=True)
    return DUMP


def _emulated_digest(dump: Path, cpu: str, stream: str, case: dict[str, Any]) -> str:
    counts = ",".join(str(n) for n in case["counts"])
    out = subprocess.run(
        ["qemu-aarch64-static", str(dump), stream, str(case["seed"]), counts, case["dtype"]],
        env={**os.environ, "QEMU_CPU": cpu},
        capture_output=True,
        check=True,
        timeout=READY_CEILING_S,
    ).stdout
    return hashlib.sha256(out).hexdigest()


def _cases(stream: str, cpu: str) -> list[dict[str, Any]]:
    """Every golden case on `max`; on the other models the ones under 100k values (time)."""
    cases = [c for c in load_goldens()["streams"][stream]["cases"] if not c.get("scalar")]
    if cpu != "max":
        cases = [c for c in cases if sum(c["counts"]) < 100_000]
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("stream", ["x86", "libm"])
@pytest.mark.parametrize("cpu", CPUS)
def test_emulated_aarch64_build_reproduces_the_goldens(dump: Path, cpu: str, stream: str) -> None:
    cases = _cases(stream, cpu)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        digests = list(pool.map(lambda c: _emulated_digest(dump, cpu, stream, c), cases))
    wrong = [
        f"seed={c['seed']} {c['dtype']} {c['counts']}"
        for c, d in zip(cases, digests, strict=True)
        if d != c["sha256"]
    ]
    assert not wrong, f"aarch64 ({cpu}) {stream} stream differs from torch's for: {wrong}"
    assert len(cases) >= 30


@pytest.mark.parametrize("stream", ["x86", "libm"])
def test_make_target_prints_the_same_digest_as_the_cli(dump: Path, stream: str) -> None:
    settings = [f"STREAM={stream}", "SEED=77", "COUNT=4099,16", "DTYPE=bfloat16"]
    out = subprocess.run(
        ["make", "-s", "aarch64-stream-digest", *settings, "QEMU_CPU=neoverse-n1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == stream_digest(stream, 77, [4099, 16], "bfloat16")
