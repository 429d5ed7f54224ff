"""Installing the plugin into a working SGLang environment adds prenoise and moves nothing.

The README's line, `pip install "$PRENOISE[sglang]"`, run as a dry run in this sglang 0.5.23 venv
(torch 2.14.1, sglang installed without its CUDA-only requirements) against a wheel built from
this tree: pip's report must list prenoise alone, and the venv's packages stay what they were.
The extra declares nothing of SGLang's stack, so a serving environment's torch build, sglang and
their pins are never resolved again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from install_dry_run import assert_readme_line_adds_prenoise_alone, wheel, wheel_requirements


@pytest.mark.slow
def test_the_readme_install_line_reports_prenoise_alone(wheel: Path, tmp_path: Path) -> None:
    # torch 2.14.1 and sglang 0.5.23 stay what they were
    assert_readme_line_adds_prenoise_alone("sglang", wheel, tmp_path / "report.json")


def test_the_extra_declares_nothing_of_the_serving_stack(wheel: Path) -> None:
    metadata, requires = wheel_requirements(wheel)
    assert "Provides-Extra: sglang" in metadata
    assert not [line for line in requires if "sglang" in line], requires


__all__ = ["wheel"]  # the fixture, imported
