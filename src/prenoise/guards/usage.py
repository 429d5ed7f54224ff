"""Usage errors and the output-path checks every command runs before any heavy work.

A value or path that cannot work is a :class:`UsageError`: one line naming the option, exit
status 2. Output paths are checked up front, so a run never fails to write its result at its end
(a directory where a file goes, an unwritable parent, an output that is one of the inputs).
"""

from __future__ import annotations

import os
from pathlib import Path

from prenoise.guards.path_checks import path_problem

__all__ = ["UsageError", "check_output_dir", "check_output_file", "check_outputs_are_not_inputs"]


class UsageError(ValueError):
    """A command-line value or output path that cannot work; one line, exit status 2."""


def check_output_file(path: str | os.PathLike[str], option: str) -> Path:
    """`path` as a Path if a file can be written there (missing parents are creatable).

    Raises :class:`UsageError` naming `option` when it is a directory, or when it or its
    nearest existing parent is not writable.
    """
    p = _os_path(path, option)
    if p.is_dir():
        raise UsageError(f"{option} {p}: is a directory; give a file path")
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(f"{option} {p}: not writable")
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
    except OSError:  # a path that cannot even be resolved is refused by its own check
        return False
