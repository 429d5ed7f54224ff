"""Usage errors and the output-path checks every command runs before any heavy work.

A value or path that cannot work is a :class:`UsageError`: one line naming the option, exit
status 2. Output paths are checked up front, so a run never fails to write its result at its end
(a directory where a file goes, an unwritable parent, an output that is one of the inputs, a
device node, named pipe or socket that writing the result would replace, a symlink loop).
Writability is proven, not inferred: `os.access` says yes to root everywhere, also on `/proc`
and read-only mounts, so the check also creates (and removes at once) a probe file in the
directory, or a probe directory in the nearest existing ancestor. A missing parent directory is
created when the result is written; :func:`missing_directory` records it up front, so the
command can say what it created beside what it wrote.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from prenoise.guards.path_checks import output_problem, path_problem

__all__ = [
    "UsageError",
    "check_output_dir",
    "check_output_file",
    "check_outputs_are_not_inputs",
    "missing_directory",
]


class UsageError(ValueError):
    """A command-line value or output path that cannot work; one line, exit status 2."""


def check_output_file(path: str | os.PathLike[str], option: str) -> Path:
    """`path` as a Path if a file can be written there (missing parents are creatable).

    Raises :class:`UsageError` naming `option` when it is a directory, something else that is
    not a regular file (a device, a named pipe, a socket: the result is renamed onto its path,
    which would replace it; also through a symlink), a symlink loop, or when it or its nearest
    existing parent is not writable.
    """
    p = _os_path(path, option)
    if p.is_dir():
        raise UsageError(f"{option} {p}: is a directory; give a file path")
    problem = output_problem(p)
    if problem is not None:
        raise UsageError(f"{option} {p}: {problem}; give the path of a regular file")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise UsageError(f"{option} {p}: not writable")
        if p.is_file():
            _probe(option, p, lambda: os.close(os.open(p, os.O_WRONLY | os.O_APPEND)))
    _check_creatable(p.parent, option, p)
    return p


def check_output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """`path` as a Path if it is (or can be created as) a writable directory; else
    :class:`UsageError` naming `option`."""
    p = _os_path(path, option)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {p}: exists and is not a directory")
    _check_creatable(p, option, p)
    return p


def _os_path(path: str | os.PathLike[str], option: str) -> Path:
    """`path` as a Path, or a :class:`UsageError` naming `option` when the OS would refuse the
    name (a NUL byte, a component over 255 bytes: `stat` raised ENAMETOOLONG, exit 70)."""
    problem = path_problem(path)
    if problem is not None:
        raise UsageError(f"{option}: the path {problem}")
    return Path(path)


def _check_creatable(directory: Path, option: str, target: Path) -> None:
    """`directory` exists and is writable, or its nearest existing ancestor is."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {target}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {target}: directory {existing} is not writable")
    if existing == directory:  # a file will be written in it

        def probe() -> None:
            fd, name = tempfile.mkstemp(dir=existing, prefix=".prenoise-write-check-")
            os.close(fd)
            os.unlink(name)

    else:  # directories will be made in it

        def probe() -> None:
            os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".prenoise-write-check-"))

    _probe(option, target, probe, existing)


def _probe(option: str, target: Path, probe: Callable[[], None], where: Path | None = None) -> None:
    """Run `probe` (a write that leaves nothing behind); its `OSError` is a :class:`UsageError`."""
    try:
        probe()
    except OSError as error:
        reason = error.strerror or str(error)
        if error.errno == errno.ENOENT and where is not None:  # /proc: the dir refuses new names
            reason = "no file can be created there"
        place = f"directory {where}" if where is not None else "the file"
        raise UsageError(f"{option} {target}: {place} is not writable ({reason})") from None


def missing_directory(
    path: str | os.PathLike[str], option: str, *, is_dir: bool = False
) -> tuple[str, Path] | None:
    """`(option, directory)` when writing `path` will create `directory` (the file's parent, or
    `path` itself when `is_dir`), so the command can say so once it has; None when it exists."""
    directory = Path(path) if is_dir else Path(path).parent
    return None if directory.exists() else (option, directory)


def check_outputs_are_not_inputs(
    outputs: list[tuple[str, Path]], inputs: list[tuple[str, Path]]
) -> None:
    """Refuse (`UsageError`) an output that is an input, or the same file as another output.

    Two paths are the same file when both exist and `os.path.samefile` says so (symlinks and
    hard links included), or when they resolve to the same absolute path.
    """
    seen: list[tuple[str, Path]] = []
    for option, path in outputs:
        for other_option, other in [*inputs, *seen]:
            if _same_file(path, other):
                role = "input" if (other_option, other) in inputs else "output"
                raise UsageError(
                    f"{option} {path}: is the {role} {other_option} {other}; "
                    f"writing it would overwrite the {role}"
                )
        seen.append((option, path))


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # a path that cannot be resolved (RuntimeError: a symlink
        return False  # loop, Python < 3.13) is refused by its own check
