"""`vllm-omni-verify --upstream-overlap`: upstream's own overlap against its own serial path.

On vllm-omni 0.32.0rc1 (which draws a Ref2VA first output ahead itself) the three arms run:
upstream serial (its draw ahead disabled), upstream as shipped, prenoise on top; every field of
every output and the global RNG equal. Elsewhere the option is refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release import UPSTREAM_AHEAD

from cli_refusals import refused
from prenoise.cli.commands import main
from prenoise.integrations.vllm_omni.settings import NEXT_OUTPUT_ENV
from prenoise.integrations.vllm_omni.upstream_overlap import (
    upstream_draws_ahead,
    verify_upstream_overlap,
)
from prenoise.integrations.vllm_omni.verification import H3Request

needs_upstream_overlap = pytest.mark.skipif(
    not UPSTREAM_AHEAD, reason="upstream draws nothing ahead itself before vllm-omni 0.32.0rc1"
)


def test_upstream_draws_ahead_is_decided_by_the_code() -> None:
    assert upstream_draws_ahead() is UPSTREAM_AHEAD


@needs_upstream_overlap
def test_upstream_overlap_and_prenoise_on_top_equal_upstreams_serial_path(
    image_ref: Path, video_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NEXT_OUTPUT_ENV, "1")
    result = verify_upstream_overlap(H3Request((image_ref, video_ref), seed=6, outputs=2))
    assert result.verified, result.summary()
    serial, overlapped = result.upstream.off, result.upstream.on
    assert not serial.upstream_ahead and not serial.records
    assert {name for name, seed in overlapped.upstream_ahead if seed == 6} == {
        "initial_video_noise",
        "initial_audio_noise",
        "visual_condition_noise",
    }
    assert overlapped.drawn_on["initial_video_noise"].startswith("minimax_h3_initial_noise")
    assert serial.drawn_on["initial_video_noise"] == serial.forward_thread
    # prenoise on top: the second output drawn ahead by prenoise, the first left to upstream
    assert result.plugin.on.drawn_on["output1.initial_video_noise"].startswith("prenoise")
    assert {r.seed for r in result.plugin.on.records} == {7}


@needs_upstream_overlap
def test_a_serial_arm_that_drew_ahead_is_not_verified(
    image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness is not blind: with upstream's draw ahead left on in the serial arm, the
    verdict names it."""
    from contextlib import nullcontext

    from prenoise.integrations.vllm_omni import upstream_overlap

    monkeypatch.setattr(upstream_overlap, "upstream_serial", nullcontext)
    result = verify_upstream_overlap(H3Request((image_ref,), seed=2))
    assert result.upstream.equal and not result.upstream.verified
    assert result.upstream.not_prepared_reasons[0].startswith("the serial arm drew ahead: ")


def test_the_cli_option(
    tmp_path: Path, image_ref: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "verify.json"
    argv = ["vllm-omni-verify", "--upstream-overlap", "--steps", "1", "--reference", str(image_ref)]
    if not UPSTREAM_AHEAD:
        line = refused(capsys, [*argv, "--json", str(out)])
        assert line == (
            "error: --upstream-overlap: this vllm-omni draws nothing ahead itself (0.32.0rc1 on "
            "does): there is no upstream overlap to verify"
        )
        assert not out.exists()
        return
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["verified"] is True
    assert report["upstream_overlap"]["verified"] and report["plugin"]["verified"]
    assert report["upstream_overlap"]["summary"].startswith("verified: bitwise equal: ")
