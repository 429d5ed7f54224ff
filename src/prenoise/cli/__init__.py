"""The `prenoise` command line: `main` (the console script, `prenoise.cli:main`), each command's
wiring (`commands`), the parser (`parser`), argument checks (`args`), `doctor` and `demo`."""

from prenoise.cli.commands import main

__all__ = ["main"]
