"""The table of diffusers' modular pipeline classes in docs/diffusers.md is what
scripts/diffusers_modular_table.py prints."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

diffusers = pytest.importorskip("diffusers")

REPO = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "diffusers_modular_table", REPO / "scripts" / "diffusers_modular_table.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["diffusers_modular_table"] = script
    spec.loader.exec_module(script)
    return script


def _has_modular_minimax_h3() -> bool:
    try:
        return importlib.util.find_spec("diffusers.modular_pipelines.minimax_h3") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(
    not _has_modular_minimax_h3(),
    reason=f"diffusers {diffusers.__version__} has no modular_pipelines/minimax_h3 "
    "(the table is of diffusers 0.42.1)",
)
@pytest.mark.skipif(diffusers.__version__ != "0.42.1", reason="the table is of diffusers 0.42.1")
def test_the_modular_table_is_current() -> None:
    script = _script()
    table = script.table()
    assert table.count("\n") > 30  # every class of every family, not an empty listing
    assert "| wan | `WanModularPipeline` | `WanPrepareLatentsStep` |" in table
    assert "| minimax_h3 | `MiniMaxH3ModularPipeline` |" in table
    doc = (REPO / "docs" / "diffusers.md").read_text()
    start, end = doc.find(script.BEGIN), doc.find(script.END)
    assert 0 <= start < end, "docs/diffusers.md lacks the modular table's marker comments"
    in_doc = doc[start + len(script.BEGIN) : end].strip()
    assert in_doc == table, (
        "docs/diffusers.md's modular pipeline table is stale: rerun "
        "`.venv/bin/python scripts/diffusers_modular_table.py --write`"
    )


def test_replace_in_doc_keeps_everything_outside_the_markers() -> None:
    script = _script()
    text = f"before\n{script.BEGIN}\nold | table\n{script.END}\nafter\n"
    replaced = script.replace_in_doc(text, "| new |")
    assert replaced == f"before\n{script.BEGIN}\n| new |\n{script.END}\nafter\n"
    with pytest.raises(SystemExit):
        script.replace_in_doc("no markers here", "| new |")
