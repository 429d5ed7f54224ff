"""The memory budget's estimate bounds what a real request grows to (issue 42, class 7).

The estimate was about half the real peak (1344x768, 4 s, 1 step: 478 MiB estimated, ~870 MiB
reached), so a request the budget admitted in a cgroup just big enough was OOM-killed. Each
configuration here runs a real `prenoise generate` in a fresh interpreter (`request_memory.py`:
the kernel's resident high-water mark per stage, which sees every allocation torch makes) and
checks that its peak growth over the resident set at the budget check is at most the estimate.
Memory is deterministic enough for this; the sizes are kept small (one 1344x768 second).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from waits import READY_CEILING_S

PROBE = Path(__file__).with_name("request_memory.py")
MIB = 2**20

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs"
    ),
]


def _measure(tmp_path: Path, *argv: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PRENOISE_DEBUG"}
    env.update(OMP_WAIT_POLICY="PASSIVE", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(PROBE), *argv, "--out", str(tmp_path / "out.mp4")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [
        # a video and an image reference, 672x384, 2 s, 2 steps (it covers the small image case
        # too: an image reference, several decode groups)
        ["--recipe", "ref2va-demo", "--width", "672", "--height", "384", "--duration", "2",
         "--steps", "2"],
        # the size, one second: the decode of a 1344x768 temporal group is the peak
        ["--recipe", "ref2va-image-1344x768", "--duration", "1", "--steps", "1"],
    ],
    ids=["demo-672x384-2s-2steps", "image-1344x768-1s"],
)  # fmt: skip
def test_a_real_request_stays_within_its_estimate(tmp_path: Path, argv: list[str]) -> None:
    record = _measure(tmp_path, *argv)
    estimate, peak = record["estimate"], record["peak"]
    stages = record["stages"]
    print(
        f"{' '.join(argv)}: estimate {estimate['peak'] / MIB:.1f} MiB, measured peak "
        f"{peak / MIB:.1f} MiB ({peak / estimate['peak']:.2f})"
    )
    assert record["status"] == 0
    assert peak > 0 and any(label.endswith("decode/group") for label in record["segments"])
    assert peak <= estimate["peak"], (peak / MIB, estimate["peak"] / MIB, stages)
