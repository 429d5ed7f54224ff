"""The demo's media play at sane levels (issue 34, item 3), measured from the MP4s with PyAV.

`make demo` writes an MP4 whose audio is the random-weights decoder's noise: it used to be
full-scale white noise that AAC decoded to peaks of +5.8 dBFS (clipping). Now it is quiet noise,
and the synthetic reference's tones stay below full scale too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import av
import numpy as np
import pytest

from prenoise.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "recipes" / "ref2va-demo.yaml"


def audio_levels(path: Path) -> tuple[float, float]:
    """(peak, RMS) in dBFS of the decoded audio track of `path`, all channels together."""
    with av.open(str(path)) as container:
        chunks = [frame.to_ndarray() for frame in container.decode(audio=0)]
    samples = np.concatenate(chunks, axis=1).astype(np.float64)
    peak = float(np.abs(samples).max())
    rms = math.sqrt(float((samples**2).mean()))
    return 20 * math.log10(peak), 20 * math.log10(rms)


@pytest.fixture(scope="module")
def demo_outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo recipe's outputs, generated once (its paths are relative to the directory)."""
    workdir = tmp_path_factory.mktemp("demo")
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        assert main(["generate", "--recipe", str(DEMO)]) == 0
    finally:
        os.chdir(cwd)
    return workdir / "outputs" / "ref2va-demo"


def test_the_demo_mp4_audio_peaks_below_minus_one_dbfs(demo_outputs: Path) -> None:
    peak, rms = audio_levels(demo_outputs / "ref2va-demo.mp4")
    assert peak <= -1.0, f"decoded peak {peak:.1f} dBFS"  # was +5.8 dBFS (clipping)
    assert rms <= -18.0, f"RMS {rms:.1f} dBFS"  # was -4.6 dBFS: full-scale noise
    assert rms >= -40.0, f"RMS {rms:.1f} dBFS"  # quiet, not silent: the track is still there


def test_the_synthetic_reference_tones_peak_below_minus_one_dbfs(demo_outputs: Path) -> None:
    peak, rms = audio_levels(demo_outputs / "reference.mp4")
    assert peak <= -1.0, f"decoded peak {peak:.1f} dBFS"
    assert -20.0 <= rms <= -10.0, f"RMS {rms:.1f} dBFS"  # two sines at amplitude 0.3: -13.5
