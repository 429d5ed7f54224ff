"""The CLI prints paths, field names and error messages as they are, brackets and all.

rich read them as markup: `wrote [bold]{path}[/]` printed `x[bold]y[/]/clip.mp4` as `xy/clip.mp4`
and a field named `a[/x]` made `compare` fail with rich's `MarkupError` (`internal error`, exit
70) instead of printing its verdict (`prenoise.observe.console_text`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from prenoise.cli.commands import main

ODD = "x[bold]y[/]"
"""A directory name that is also rich markup."""


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_verify_json_under_a_bracketed_directory(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["verify", "--recipe", "tiny.yaml", "--json", f"{ODD}/v.json", "--quiet"]
    assert main(argv) == 0
    assert (workdir / ODD / "v.json").is_file()
    lines = _lines(capsys)
    assert f"created the directory {ODD} (--json)" in lines
    assert f"wrote the per-field report to {ODD}/v.json" in lines


def test_generate_out_under_a_bracketed_directory(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = f"{ODD}/[draft].mp4"
    argv = ["generate", "--recipe", "tiny.yaml", "--out", out, "--arm", "serial", "--quiet"]
    assert main(argv) == 0
    assert (workdir / out).is_file()
    assert f"wrote {out}" in _lines(capsys)


def test_an_error_message_holding_a_closing_tag_prints_whole(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["verify", "--recipe", "tiny.yaml", "--reference", "r[/x].mp4", "--quiet"]
    assert main(argv) == 2
    (line,) = _lines(capsys)
    assert line.startswith("error: ") and "r[/x].mp4: no such file" in line


def test_compare_names_a_bracketed_field(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save({"a[/x]": torch.zeros(3), "[rank 1]": torch.ones(2)}, "a.pt")
    torch.save({"a[/x]": torch.ones(3), "[rank 1]": torch.ones(2)}, "b.pt")
    assert main(["compare", "a.pt", "b.pt"]) == 1
    (line,) = _lines(capsys)
    assert line == "DIFFERENT: 1/2 fields differ — ['a[/x]']: values"
