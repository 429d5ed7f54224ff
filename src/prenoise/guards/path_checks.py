"""Path names the operating system refuses, and what a path that is not a regular file is.

`open()` and `stat()` raise on a name with a NUL byte (`ValueError: embedded null byte`) or a
component over 255 bytes (`OSError: ENAMETOOLONG`), far from the option or recipe field that
gave it; :func:`path_problem` says so up front, naming nothing but the path itself.
:func:`not_a_file` says what a path that is no regular file is instead ("no such file" for
`/dev/zero` was wrong: it exists).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["NAME_MAX", "PATH_MAX", "check_path", "not_a_file", "path_problem"]

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
    kind = next((name for test, name in _KINDS if test(mode)), None)
    return f"not a regular file ({kind})" if kind else "not a regular file"
