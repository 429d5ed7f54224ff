"""`compare` refuses names the OS refuses and paths that are no regular file, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from prenoise.cli.commands import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["a" * 300 + ".pt", "B"], "the path has a 303-byte component"),
        (["/dev/zero", "B"], "error: /dev/zero: not a regular file (a character device)"),
        (["B", "B", "--json", "j" * 300 + ".json"], "error: --json: the path has a 305-byte"),
    ],
)
def test_unusable_paths_are_one_line_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    torch.save({"x": torch.zeros(2)}, tmp_path / "B")
    assert main(["compare", *argv]) == 2
    out = capsys.readouterr().out.strip()
    assert "\n" not in out and message in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["B"]
