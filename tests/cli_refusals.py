"""How a refused CLI invocation must look: exit 2 and exactly one line, no traceback."""

from __future__ import annotations

import pytest

from prenoise.cli.commands import main


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single line the last command printed (stdout and stderr together), stripped."""
    captured = capsys.readouterr()
    out = (captured.out + captured.err).strip()
    assert "Traceback" not in out, out
    assert len(out.splitlines()) == 1, out
    return out


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run `prenoise argv`; assert exit 2 with one line; that line, whitespace collapsed."""
    capsys.readouterr()
    assert main(argv) == 2
    return " ".join(one_line(capsys).split())
