"""The table of diffusers' video/audio pipeline classes in docs/diffusers.md is what the script
prints."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

diffusers = pytest.importorskip("diffusers")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(diffusers.__version__ != "0.42.1", reason="the table is of diffusers 0.42.1")
def test_the_readme_table_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(
        "diffusers_video_table", REPO / "scripts" / "diffusers_video_table.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["diffusers_video_table"] = script
    spec.loader.exec_module(script)
    script.main()
    table = capsys.readouterr().out.strip()
    assert table.count("\n") > 60  # every class, not an empty listing
    assert "| cogvideo | `CogVideoXPipeline` | planned |" in table
    readme = (REPO / "docs" / "diffusers.md").read_text()
    assert table in readme, (
        "docs/diffusers.md's pipeline table is stale: rerun scripts/diffusers_video_table.py"
    )
