"""Media-root path safety: a client-named reference must resolve to a file inside the root.

`resolve_media_path(root, name)` returns the fully resolved path (every symlink followed) of an
existing regular file that lies inside `root.resolve()`. It rejects, with `PathRejected`:
empty names, NUL bytes, any `..` component, absolute paths outside the root, symlinks (at any
component) whose target lies outside the root, and anything that is not an existing file.
The pipeline then reads the resolved path, never the client's spelling of it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from prenoise.guards.path_checks import not_a_file, path_problem

__all__ = ["PathRejected", "resolve_media_path", "safe_upload_name"]

_SUFFIX = re.compile(r"^\.[a-z0-9]{1,5}$")


class PathRejected(ValueError):
    """A reference path is unsafe or missing; the message says why (never echoes file data)."""


def resolve_media_path(root: Path, name: str) -> Path:
    """The resolved path of file `name` (relative to `root`, or absolute) inside `root`."""
    if not name or "\x00" in name:
        raise PathRejected("empty path or NUL byte")
    problem = path_problem(name)  # before any stat() could raise ENAMETOOLONG (a 500)
    if problem is not None:
        raise PathRejected(f"the path {problem}")
    pure = PurePosixPath(name)
    if ".." in pure.parts:
        raise PathRejected(f"{name!r}: '..' is not allowed")
    real_root = Path(os.path.realpath(root))
    candidate = Path(pure) if pure.is_absolute() else real_root / pure
    resolved = Path(os.path.realpath(candidate))
    if not resolved.is_relative_to(real_root):
        raise PathRejected(f"{name!r}: resolves outside the media root")
    if not resolved.is_file():
        problem = not_a_file(resolved)  # a device or a pipe exists: it is no file
        where = "under the media root" if problem == "no such file" else "(under the media root)"
        raise PathRejected(f"{name!r}: {problem} {where}")
    return resolved


def safe_upload_name(index: int, filename: str | None) -> str:
    """A server-chosen file name for upload `index`: `ref-{index}` plus a vetted suffix.

    The client's name contributes only its lower-cased suffix, and only when it is 1–5 ASCII
    letters or digits (so the media kind can be inferred); nothing else of it is used.
    """
    suffix = PurePosixPath(filename or "").suffix.lower()
    return f"ref-{index}{suffix if _SUFFIX.match(suffix) else ''}"
