"""Progress of the commands that can run for minutes (`generate`, `verify`, `bench`).

On a terminal: one rich line, a spinner with the stage, a bar with `i/N` where the stage counts
(denoise steps, bench pairs), and the elapsed time; it disappears when the command ends. Not on
a terminal (a pipe, a log, CI): one plain line per stage on stderr, `[prenoise generate 12.3s]
denoise output 0 (8 steps)`, so a log shows where a long run is; results stay on stdout. With
`--quiet`: nothing at all. Progress never changes what a command computes or prints as results.

Under `torchrun` (`prenoise.distributed.commands`) rank 0 shows the same progress and every other
rank is quiet, so N ranks print one set of lines, not N. Here in `observe/` (not `cli/`) so that
both the CLI and `distributed/` can use it.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["PLAIN_PREFIX", "CommandProgress"]

PLAIN_PREFIX = "[prenoise "
"""How every plain (not-a-terminal) progress line starts."""


class CommandProgress:
    """`stage(name, total=None)` starts a stage (with `total` counted steps), `advance(done)`
    moves its count; see the module docstring for what is shown where."""

    def __init__(
        self, console: Console, command: str, *, quiet: bool = False, stream: TextIO | None = None
    ) -> None:
        self.command = command
        self._stream = stream
        self._mode = "quiet" if quiet else ("live" if console.is_terminal else "plain")
        self._console = console
        self._start = time.perf_counter()
        self._stage: str | None = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> CommandProgress:
        if self._mode == "live":
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),  # stage names are literal
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("starting", total=None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def stage(self, name: str, total: int | None = None) -> None:
        """Start stage `name` (a repeat of the current one is ignored)."""
        if name == self._stage:
            return
        self._stage = name
        if self._progress is not None and self._task is not None:
            self._progress.reset(self._task, total=total, description=name)
        elif self._mode == "plain":
            counted = f" ({total} steps)" if total else ""
            elapsed = time.perf_counter() - self._start
            stream = self._stream or sys.stderr
            print(f"{PLAIN_PREFIX}{self.command} {elapsed:.1f}s] {name}{counted}", file=stream)
            stream.flush()

    def advance(self, completed: int) -> None:
        """`completed` steps of the current stage are done (shown on a terminal only)."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=completed)
