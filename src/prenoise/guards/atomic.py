"""Writing a file whole or not at all: the one helper every file prenoise writes goes through.

A result (a `--json` report, an MP4, a trace, a PNG, a checkpoint's files) is written under a
temporary name in its own directory (`.NAME.PID-RANDOM.partial.EXT`), flushed to the disk
(`fsync`), and renamed onto its name only once it is complete; the directory is then synced so
the rename itself survives a crash. Until the rename, a previous file at that path is untouched;
on any error (a full disk, a kill, Ctrl-C) the temporary file is removed and nothing half-written
is left under the real name. A `kill -9` can still leave a temporary file behind: its name says
so (`PARTIAL_MARK`) and whose it was (the process id); the next write of the same file removes
it, and :func:`sweep_partials` removes every one in a directory whose writer is gone (`prenoise
serve` does at start).

A write the OS refuses (no space, quota, read-only file system, an I/O error) is a
:class:`OutputWriteError`: one line naming the path and the reason, and that nothing was written.

Only a regular file (or nothing) is ever replaced. A path that names a device node, a named pipe,
a socket or a directory, also through a symlink, or a loop of symlinks, is refused before the
temporary file is made and again just before the rename (:class:`OutputTargetError`): the rename
would swap the node itself for a regular file (as root, `prenoise compare a b --json /dev/null`
replaced the system's `/dev/null`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from prenoise.guards.path_checks import output_problem

__all__ = [
    "PARTIAL_MARK",
    "OutputTargetError",
    "OutputWriteError",
    "atomic_output",
    "is_partial",
    "refuse_special_target",
    "sweep_partials",
    "write_atomic",
]

PARTIAL_MARK = ".partial"
"""In every temporary name: `.NAME.PID-RANDOM.partial.EXT` (the extension kept last, so writers
that infer a format from it still do)."""

_PARTIAL = re.compile(r"^\..+\.(\d+)-[0-9a-f]{8}\.partial(\.[^.]*)?$")

DISK_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO, errno.EACCES, errno.EPERM}
)
"""What the disk, not the program, refused: these make an :class:`OutputWriteError`."""


class OutputWriteError(OSError):
    """A file could not be written (full disk, quota, read-only, I/O error); nothing was left."""

    def __init__(self, path: Path, error: OSError, what: str | None = None) -> None:
        reason = error.strerror or str(error) or type(error).__name__
        label = f"{what} {path}" if what else str(path)
        kept = "the previous file is unchanged" if path.exists() else "no file was left"
        super().__init__(error.errno, f"{label}: cannot write it ({reason.lower()}); {kept}")
        self.path = path
        self.what = what

    def __str__(self) -> str:
        return str(self.strerror)


class OutputTargetError(OutputWriteError):
    """The output path is not a regular file (a device, a named pipe, a directory, a symlink
    loop): it is never replaced, and nothing was written."""

    def __init__(self, path: Path, problem: str, what: str | None = None) -> None:
        label = f"{what} {path}" if what else str(path)
        OSError.__init__(
            self,
            errno.EEXIST,
            f"{label}: {problem}; give the path of a regular file (this one is left as it is)",
        )
        self.path = path
        self.what = what


def refuse_special_target(path: Path, what: str | None = None, shown: Path | None = None) -> None:
    """Raise :class:`OutputTargetError` unless `path` is a regular file or absent (see
    `prenoise.guards.path_checks.output_problem`); `shown` is the path the caller named."""
    problem = output_problem(path)
    if problem is not None:
        raise OutputTargetError(shown or path, problem, what)


def _suffix(target: Path) -> str:
    return target.suffix if 0 < len(target.suffix) <= 16 else ""


def _temporary_name(target: Path) -> Path:
    stem = target.name[: 200 - len(_suffix(target))]  # keep the name under NAME_MAX
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    return target.with_name(f".{stem}.{tag}{PARTIAL_MARK}{_suffix(target)}")


def is_partial(name: str) -> bool:
    """Whether `name` is one of this module's temporary names."""
    return _PARTIAL.match(name) is not None


def _fsync_path(path: Path, directory: bool = False) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    except OSError as error:  # some file systems refuse fsync on directories: not a failure
        if not directory or error.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike[str], *, what: str | None = None, make_parents: bool = True
) -> Iterator[Path]:
    """Yield a temporary path beside `path`; once the block ends without error it is synced and
    renamed onto `path`. On any exception the temporary file is removed and `path` is untouched.

    The temporary file exists (empty, mode 0666 less the umask) when the block starts; a writer
    may replace or truncate it. `what` (an option name, `--json`) starts the error's line.
    """
    named = Path(path)
    refuse_special_target(named, what)  # never rename a file onto a device, FIFO, loop, ...
    target = named
    if target.is_symlink():  # write where the link points, as writing through it did
        target = Path(os.path.realpath(target))
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        while True:
            tmp = _temporary_name(target)
            try:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                break
            except FileExistsError:  # pragma: no cover - 32 random bits collided
                continue
    except OSError as error:
        raise _wrapped(target, error, what) from None
    _sweep_earlier(target)
    try:
        yield tmp
        _fsync_path(tmp)
        with contextlib.suppress(OSError):  # a replaced file keeps its permissions
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        refuse_special_target(target, what, named)  # again: it may have appeared since
        os.replace(tmp, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(error, OSError) and not isinstance(error, OutputWriteError):
            raise _wrapped(target, error, what) from None
        raise
    with contextlib.suppress(OSError):  # the rename is done; syncing its directory is a bonus
        _fsync_path(target.parent, directory=True)


def _wrapped(target: Path, error: OSError, what: str | None) -> OSError:
    if error.errno in DISK_ERRNOS:
        return OutputWriteError(target, error, what)
    return error


def write_atomic(
    path: str | os.PathLike[str],
    data: str | bytes | Callable[[Path], object],
    *,
    what: str | None = None,
    make_parents: bool = True,
) -> Path:
    """Write `data` (text as UTF-8, bytes, or a function writing the path it is given) to `path`
    whole or not at all (see :func:`atomic_output`); returns `path` as a Path."""
    target = Path(path)
    with atomic_output(target, what=what, make_parents=make_parents) as tmp:
        if callable(data):
            data(tmp)
        else:
            raw = data.encode("utf-8") if isinstance(data, str) else data
            with open(tmp, "wb") as out:
                out.write(raw)
    return target


def sweep_partials(directory: str | os.PathLike[str], *, recursive: bool = True) -> list[Path]:
    """Remove the temporary files (:func:`is_partial`) under `directory` whose writing process is
    no longer alive; returns what was removed. A live writer's file (another process, or this
    one) is left alone."""
    root = Path(directory)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    walk = root.rglob(f".*{PARTIAL_MARK}*") if recursive else root.glob(f".*{PARTIAL_MARK}*")
    for candidate in walk:
        match = _PARTIAL.match(candidate.name)
        if match is None or not candidate.is_file() or candidate.is_symlink():
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            candidate.unlink()
            removed.append(candidate)
    return removed


def _sweep_earlier(target: Path) -> None:
    """Remove the temporary files an earlier, dead writer of `target` left beside it."""
    prefix = f".{target.name[: 200 - len(_suffix(target))]}."
    with contextlib.suppress(OSError):
        for candidate in target.parent.glob(f".*{PARTIAL_MARK}*"):
            match = _PARTIAL.match(candidate.name)
            if match is None or not candidate.name.startswith(prefix):
                continue
            pid = int(match.group(1))
            if pid != os.getpid() and not _alive(pid) and not candidate.is_symlink():
                with contextlib.suppress(OSError):
                    candidate.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # someone else's live process
        return True
    return True
