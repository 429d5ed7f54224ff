"""What a service finds in its output directory when it starts, and one service per directory.

Jobs live in memory only, so a restarted service knows none of the MP4s an earlier process
wrote: the API would answer 404 for them while they stay on disk for ever. `sweep_orphans`
removes, when the service starts, what no job of it can own: the upload folder, the job outputs
(`<32 hex digits>[-N].mp4`: no other file is touched) and temporary files a killed writer left
(`prenoise.guards.atomic`'s `.NAME.PID-RANDOM.partial.EXT`, its process gone).

`OutputDirLock` makes that safe: a service holds an exclusive `flock` on its output directory
itself (no file is added to it) for as long as it runs, and a second service started on the
same directory is refused (one line, exit 2) instead of deleting the first one's outputs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from pathlib import Path

from prenoise.guards.atomic import sweep_partials
from prenoise.guards.usage import UsageError

__all__ = ["OutputDirLock", "is_job_output", "sweep_orphans"]

_JOB_OUTPUT = re.compile(r"[0-9a-f]{32}(-[0-9]+)?\.mp4")


def is_job_output(name: str) -> bool:
    """Whether `name` is a job's output file (`Service.new_job_id()`, `runner.output_path`)."""
    return _JOB_OUTPUT.fullmatch(name) is not None


class OutputDirLock:
    """An exclusive `flock` on the output directory, held while a service runs."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    @classmethod
    def take(cls, directory: Path) -> OutputDirLock:
        """Lock `directory` (created if missing) or raise `UsageError`."""
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(
                f"output directory {directory}: another prenoise serve uses it; give each "
                "service its own --output-dir"
            ) from None
        return cls(fd)

    def release(self) -> None:
        """Give the lock back (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __del__(self) -> None:
        self.release()


def sweep_orphans(output_dir: Path) -> list[Path]:
    """Remove what an earlier service left in `output_dir` and no job of this one owns: its
    upload folder, job outputs and dead writers' temporary files. Returns the removed files."""
    removed: list[Path] = []
    uploads = output_dir / ".uploads"
    if uploads.is_dir():
        shutil.rmtree(uploads, ignore_errors=True)
        removed.append(uploads)
    removed.extend(sweep_partials(output_dir, recursive=False))
    with contextlib.suppress(OSError):
        for entry in output_dir.iterdir():
            if is_job_output(entry.name) and entry.is_file() and not entry.is_symlink():
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed.append(entry)
    return removed
