"""Host shared-memory segments: files in /dev/shm mapped with `torch.from_file(shared=True)`.

A segment is created once (by the host leader), mapped by every rank of the host, and unlinked as
soon as all of them have mapped it: the mappings keep the memory alive, the name is gone. Any
rank may unlink (a missing name is ignored), so cleanup on failure or interrupt does not depend
on the creator surviving. Names carry the creator's pid; `sweep_stale_segments` removes segments
whose creator is dead (e.g. after SIGKILL).

`shm_identity` says which shared-memory directory a process sees: the ranks of one "host" are the
ranks with equal identities, whatever their host names (two containers or network namespaces on
one machine may share a host name but not `/dev/shm`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
from pathlib import Path

import torch

__all__ = [
    "SEGMENT_PREFIX",
    "SharedSegment",
    "create_segment",
    "leftover_segments",
    "map_segment",
    "pid_alive",
    "segment_path",
    "shm_identity",
    "sweep_stale_segments",
    "unlink_segment",
]

SHM_DIR = Path(os.environ.get("PRENOISE_SHM_DIR", "/dev/shm"))
SEGMENT_PREFIX = "prenoise-"
_NAME = re.compile(rf"^{SEGMENT_PREFIX}(\d+)-")
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def shm_identity() -> str:
    """Equal for two processes when they see the same shared-memory directory, else different.

    The kernel's boot id (random per machine and boot) with the device and inode of `SHM_DIR`
    (one tmpfs mount each: a container or mount namespace with its own `/dev/shm` gets another).
    Where the boot id cannot be read (not Linux), the host name stands in for it.
    """
    try:
        machine = _BOOT_ID.read_text().strip()
    except OSError:
        machine = f"host {socket.gethostname()}"
    try:
        st = os.stat(SHM_DIR)
        where = f"dev {st.st_dev} ino {st.st_ino}"
    except OSError:
        where = "no shm dir"
    return f"{machine}|{where}"


def segment_path(creator_pid: int, tag: str) -> Path:
    """Path of a segment created by `creator_pid`; `tag` must be a file-name-safe string."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", tag):
        raise ValueError(f"segment tag {tag!r} is not file-name safe")
    return SHM_DIR / f"{SEGMENT_PREFIX}{creator_pid}-{tag}"


def create_segment(path: Path, nbytes: int) -> None:
    """Create `path` with `nbytes` zero bytes (fails if it exists); memory is committed lazily."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        unlink_segment(path)
        raise
    os.close(fd)


def unlink_segment(path: Path) -> bool:
    """Remove the segment's name; True if this call removed it. Mappings stay valid."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


class SharedSegment:
    """A mapped segment: a flat `uint8` tensor whose storage is the shared mapping."""

    def __init__(self, path: Path, nbytes: int) -> None:
        self.path = path
        self.nbytes = nbytes
        # A zero-byte mapping is not allowed; a 1-byte segment backs empty tensors.
        self.flat = torch.from_file(str(path), shared=True, size=max(nbytes, 1), dtype=torch.uint8)

    def tensor(
        self, offset: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """A contiguous `shape` view at byte `offset` (storage offset 0 when `offset` is 0)."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = math.prod(shape) * itemsize
        if offset % itemsize or offset + nbytes > self.nbytes:
            raise ValueError(f"{self.path}: bad view offset {offset} for {shape} {dtype}")
        return self.flat[offset : offset + nbytes].view(dtype).view(shape)


def map_segment(path: Path, nbytes: int) -> SharedSegment:
    """Map an existing segment of `nbytes` (raises FileNotFoundError if it is gone)."""
    if not path.exists():
        raise FileNotFoundError(f"shared segment {path} does not exist")
    return SharedSegment(path, nbytes)


def pid_alive(pid: int) -> bool:
    """True if process `pid` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftover_segments() -> list[Path]:
    """Every prenoise segment name currently in the shared-memory directory."""
    if not SHM_DIR.is_dir():
        return []
    return sorted(p for p in SHM_DIR.iterdir() if p.name.startswith(SEGMENT_PREFIX))


def sweep_stale_segments() -> list[Path]:
    """Unlink segments whose creator process is gone; returns the removed paths."""
    removed = []
    for path in leftover_segments():
        match = _NAME.match(path.name)
        if match and not pid_alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                if unlink_segment(path):
                    removed.append(path)
    return removed
