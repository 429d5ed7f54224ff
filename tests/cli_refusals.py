"""How a refused CLI invocation must look: exit 2 and exactly one line, no traceback."""

from __future__ import annotations

import pytest

from prenoise.cli.commands import main
from prenoise.observe.progress import PLAIN_PREFIX


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single line the last command printed (stdout and stderr together), stripped.

    Progress lines (`prenoise.observe.progress`: stderr, one per stage when not on a terminal) are
    not output: a command refused after its work started has printed where it got to."""
    captured = capsys.readouterr()
    err = "".join(
        line for line in captured.err.splitlines(True) if not line.startswith(PLAIN_PREFIX)
    )
    out = (captured.out + err).strip()
    assert "Traceback" not in out, out
    assert len(out.splitlines()) == 1, out
    return out


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run `prenoise argv`; assert exit 2 with one line; that line, whitespace collapsed."""
    capsys.readouterr()
    assert main(argv) == 2
    return " ".join(one_line(capsys).split())
