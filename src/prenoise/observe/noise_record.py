"""An opt-in record of the noise a sampler draws: one JSON line per draw, with a digest of its
bytes, so that `prenoise rollout-check` can tell whether a batch's noise is what it should be
(different where requests differ, equal across the ranks of one group, reproduced by a rerun).

Engine-neutral: an integration calls :func:`record_noise` where it serves or draws noise
(`engine`, `site` say where). Off unless `PRENOISE_NOISE_RECORD` names a directory; then each
process appends to its own file, `<dir>/noise-<host>-<pid>.jsonl`, one whole line per call,
flushed at once. Off, a call costs one environment look-up. Recording reads the tensor (a
contiguous CPU copy where it is not one already) and never changes it. An I/O error is never
raised into the caller: one WARNING line, and this process records nothing more.

A line holds: `engine`, `site`, `request`, `seed`, `step`, `rank`, `world_size`, `group`,
`shape`, `dtype`, `digest` (sha256 of the values' bytes in row-major order, complex as (real,
imag) pairs: the same as `prenoise.verify.bits.tensor_sha256` of a strided tensor), `host`,
`pid`, `time` (Unix seconds).

The hash is sha256 because it is the fastest in the standard library where the CPU has SHA
instructions (x86 SHA-NI, ARMv8 SHA2; every recent server CPU): 13.7 MiB (a 5 s 1344x768 H3
latent) took 8.0 ms with sha256, 15.2 ms with blake2b (digest_size 16), 18.7 ms with md5, on one
AMD EPYC core.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
from typing import Any

import torch

__all__ = [
    "DIGEST_NAME",
    "RECORD_ENV",
    "noise_digest",
    "rank_and_world",
    "record_noise",
    "recording",
    "request_label",
]

RECORD_ENV = "PRENOISE_NOISE_RECORD"
"""The directory noise records go to; unset or empty: nothing is recorded."""

DIGEST_NAME = "sha256"
"""What a record's `digest` is: `hashlib.sha256` of the values' bytes."""

_LOG = logging.getLogger("prenoise.observe.noise_record")


class _State:
    """This process's recorder: the open file (reopened after a fork), and whether it stopped."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.path: str | None = None
        self.directory: str | None = None
        self.pid = -1
        self.stopped = False
        self.labels: dict[tuple[str, str], int] = {}


_STATE = _State()


def _after_fork_in_child() -> None:
    """A forked child records into its own file, with a lock no parent thread can hold."""
    _STATE.lock = threading.Lock()
    if _STATE.fd is not None:
        with contextlib.suppress(OSError):
            os.close(_STATE.fd)  # the child's copy of the parent's descriptor
    _STATE.fd, _STATE.path, _STATE.pid = None, None, -1


os.register_at_fork(after_in_child=_after_fork_in_child)


def recording() -> bool:
    """Whether :func:`record_noise` records anything now (the variable is set and no I/O error
    has stopped this process's recording)."""
    return bool(os.environ.get(RECORD_ENV, "").strip()) and not _STATE.stopped


def request_label(prefix: str) -> str:
    """`prefix#N`, N counting the labels this process gave `prefix` while recording into the
    current directory (from 0): for an engine without request ids (a diffusers call), so that
    a rerun in a fresh process, or into another directory, names its requests the same."""
    directory = os.environ.get(RECORD_ENV, "").strip()
    with _STATE.lock:
        n = _STATE.labels.get((directory, prefix), 0)
        _STATE.labels[(directory, prefix)] = n + 1
    return f"{prefix}#{n}"


def noise_digest(noise: torch.Tensor) -> str:
    """sha256 (hex) of `noise`'s values in row-major order, read on the CPU."""
    with torch._C.DisableTorchFunction():
        t = torch._C.TensorBase.detach(noise)
        if type(t) is not torch.Tensor:
            t = torch._C.TensorBase.as_subclass(t, torch.Tensor)
        t = t.resolve_conj().resolve_neg().cpu().contiguous()
        if t.is_complex():
            t = torch.view_as_real(t)
        flat = t.reshape(-1).view(torch.uint8)
    digest = hashlib.sha256()
    if flat.numel():
        digest.update(flat.numpy().data)  # the bytes themselves, no further copy
    return digest.hexdigest()


def rank_and_world() -> tuple[int, int]:
    """(rank, world size): `torch.distributed`'s when a process group is initialized, else the
    `RANK` and `WORLD_SIZE` variables, else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-initialized group: fall back on the environment
        pass

    def env_int(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    return env_int("RANK", 0), env_int("WORLD_SIZE", 1)


def _open(directory: str) -> int:
    name = f"noise-{socket.gethostname()}-{os.getpid()}.jsonl"
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
    _STATE.path = path
    return fd


def _stop(error: BaseException, what: str) -> None:
    _STATE.stopped = True
    if _STATE.fd is not None:
        with contextlib.suppress(OSError):
            os.close(_STATE.fd)
        _STATE.fd = None
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    _LOG.warning(
        "prenoise noise record: %s failed (%s); this process records no more noise", what, reason
    )


def _write(line: bytes) -> None:
    """Append one whole line to this process's file (opened on first use, again after a fork)."""
    directory = os.environ.get(RECORD_ENV, "").strip()
    if _STATE.fd is None or _STATE.pid != os.getpid() or _STATE.directory != directory:
        if _STATE.fd is not None and _STATE.pid == os.getpid():
            os.close(_STATE.fd)
        _STATE.fd = None
        _STATE.fd = _open(directory)
        _STATE.pid, _STATE.directory = os.getpid(), directory
    view = memoryview(line)
    while view:  # O_APPEND: each write lands at the end; a short write is finished, not lost
        written = os.write(_STATE.fd, view)
        view = view[written:]


def record_noise(
    *,
    engine: str,
    site: str,
    request: str,
    seed: int | None,
    step: int | None,
    noise: torch.Tensor,
    rank: int | None = None,
    group: str | None = None,
) -> None:
    """Record one draw (see the module docstring); a no-op unless :func:`recording`.

    `rank` defaults to the `torch.distributed` rank when a process group is initialized, else
    the `RANK` variable, else 0; `group` names the replica or data-parallel group whose ranks
    should draw the same noise. Never raises for an I/O error (one WARNING, then recording stops).
    """
    if not recording():
        return
    try:
        digest = noise_digest(noise)
        shape = [int(n) for n in noise.shape]
        dtype = str(noise.dtype).removeprefix("torch.")
    except Exception as error:  # a tensor with no readable bytes (meta, ...): stop, never raise
        with _STATE.lock:
            if not _STATE.stopped:
                _stop(error, "reading a tensor")
        return
    own_rank, world = rank_and_world()
    record: dict[str, Any] = {
        "engine": engine,
        "site": site,
        "request": str(request),
        "seed": None if seed is None else int(seed),
        "step": None if step is None else int(step),
        "rank": own_rank if rank is None else int(rank),
        "world_size": world,
        "group": group,
        "shape": shape,
        "dtype": dtype,
        "digest": digest,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
    }
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
    with _STATE.lock:
        if _STATE.stopped:
            return
        try:
            _write(line)
        except OSError as error:
            _stop(error, f"writing {_STATE.path or os.environ.get(RECORD_ENV, '')}")


def _reset() -> None:
    """Close this process's file and start over (tests)."""
    with _STATE.lock:
        if _STATE.fd is not None:
            with contextlib.suppress(OSError):
                os.close(_STATE.fd)
        _STATE.fd, _STATE.path, _STATE.directory = None, None, None
        _STATE.pid, _STATE.stopped = -1, False
        _STATE.labels.clear()
