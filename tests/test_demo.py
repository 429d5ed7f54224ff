from __future__ import annotations

from prenoise.cli import main
from prenoise.demo import run_demo


def test_demo_arms_are_bitwise_equal() -> None:
    result = run_demo(seed=3, encode_seconds=0.05)
    assert result.report.equal, result.report.summary()
    assert set(result.report.fields) == {"video", "audio", "condition", "condition_anchor"}


def test_cli_demo_exit_code() -> None:
    assert main(["demo", "--encode-seconds", "0.05"]) == 0
