"""Path names the operating system refuses, and what a path that is not a regular file is.

`open()` and `stat()` raise on a name with a NUL byte (`ValueError: embedded null byte`) or a
component over 255 bytes (`OSError: ENAMETOOLONG`), far from the option or recipe field that
gave it; :func:`path_problem` says so up front, naming nothing but the path itself.
:func:`not_a_file` says what a path that is no regular file is instead ("no such file" for
`/dev/zero` was wrong: it exists). :func:`output_problem` says why a path must not be written
by renaming a file onto it (a device, a named pipe, a socket, a directory, a symlink loop): the
rename would replace the node itself, and as root `/dev/null` with it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "check_path",
    "file_kind",
    "not_a_file",
    "output_problem",
    "path_problem",
]

NAME_MAX = 255
"""Bytes of one path component (Linux, macOS and Windows file systems alike)."""
PATH_MAX = 4096
"""Bytes of a whole path the Linux kernel accepts in one system call."""

_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the OS would refuse `path` as a name (NUL byte, too long), or None."""
    text = os.fspath(path)
    if "\0" in text:
        return "contains a NUL byte"
    encoded = os.fsencode(text)
    if len(encoded) >= PATH_MAX:  # PATH_MAX counts the terminating NUL
        return f"is {len(encoded)} bytes, over the {PATH_MAX - 1}-byte path limit"
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            shown = os.fsdecode(part[:24]) + "…"
            return (
                f"has a {len(part)}-byte component ({shown!r}), over the {NAME_MAX}-byte "
                "file-name limit"
            )
    return None


def check_path(path: str | os.PathLike[str]) -> Path:
    """`path` as a Path; `ValueError` saying why when the OS would refuse the name."""
    problem = path_problem(path)
    if problem is not None:
        raise ValueError(problem)
    return Path(path)


def not_a_file(path: str | os.PathLike[str]) -> str:
    """What `path`, which is not a regular (media) file, is: missing, a directory, a device, …"""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except (OSError, ValueError) as exc:
        return f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if stat.S_ISDIR(mode):
        return "is a directory, not a media file"
    kind = file_kind(mode)
    return f"not a regular file ({kind})" if kind else "not a regular file"


def file_kind(mode: int) -> str | None:
    """What a `st_mode` that is no regular file or directory is (`a named pipe`); else None."""
    return next((name for test, name in _KINDS if test(mode)), None)


def output_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file must not be renamed onto `path` (symlinks followed), or None when `path` is a
    regular file or does not exist (a dangling symlink: the file it names is created).

    A device node, a named pipe or a socket would be replaced by a regular file (`rename` swaps
    the directory entry; as root, `/dev/null` itself), a directory cannot be, and a path whose
    links loop names nothing that can be written. Other failures to look (a parent that is a
    file, or cannot be searched) are left to the write, which names them.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "is a loop of symbolic links, not a file" if exc.errno == errno.ELOOP else None
    except ValueError:  # a NUL byte: `path_problem` names it
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    return f"is {file_kind(mode) or 'a special file'}, not a regular file"
