"""Hand the C heap's free memory back to the system between the big steps of a request.

glibc's malloc keeps what a tensor of a few MiB frees (it raises its mmap threshold to the
largest block freed, up to 32 MiB, and serves the next such tensors from the heap), and the
heap's free space then grows with every temporal group a VAE decodes: a 1344x768 request kept
16.7 MiB more after each 17-frame group (one `[17, 48, 84, 64]` float activation), so its peak
grew with its duration and no per-group estimate bounded it (issue 42, class 7).
`release_free_heap()` (glibc's `malloc_trim(0)`, which also releases the free pages inside the
heap) after each group keeps what a group leaves behind at a few MiB. Elsewhere (macOS, musl)
it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

__all__ = ["release_free_heap"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the C library this process already runs on
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)  # glibc only
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_heap() -> None:
    """Return the C heap's free pages to the system (glibc); a no-op elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
