"""Request bodies: a size limit, an idle timeout, and saving uploaded reference files.

`BodySizeLimit` (ASGI middleware) answers 413 before reading when `Content-Length` exceeds the
limit and raises `BodyTooLarge` as soon as the bytes actually received do (chunked bodies
included), so an oversized upload is never read to the end. `BodyIdleTimeout` (ASGI
middleware) raises `BodyIdle` when a request body, once started, sends nothing for
`timeout_s` (uvicorn times out idle keep-alive connections, not a body that stops halfway),
and `BodyTooSlow` when it is not complete `total_s` after the request's headers (a body sending
a byte now and then is never idle), so a stalled or trickling upload is answered (408) and
released instead of held open. `save_uploads` copies
uploaded files into a job's private folder under server-chosen names (`paths.safe_upload_name`).
`read_form` parses a multipart body: Starlette's parser spools each file part over 1 MiB to the
system's temporary directory, and a disk error there is refused like the upload folder's
(`UploadStorageError`: 507 full, 503 read-only), not an internal error.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import BinaryIO

from anyio import fail_after
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from prenoise.serve.paths import safe_upload_name

__all__ = [
    "BodyIdle",
    "BodyIdleTimeout",
    "BodySizeLimit",
    "BodyTooLarge",
    "BodyTooSlow",
    "UploadStorageError",
    "read_form",
    "save_uploads",
]


class BodyTooLarge(ValueError):
    """The request body exceeded the configured limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body larger than {limit} bytes")
        self.limit = limit


class BodySizeLimit:
    """ASGI middleware limiting the body of POST requests to `max_bytes`.

    `on_reject` is called for each request it answers itself (declared length over the limit).
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int, on_reject: Callable[[], None] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            if self.on_reject is not None:
                self.on_reject()
            await _send_413(send, self.max_bytes)
            return
        received = 0
        limit = self.max_bytes

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited_receive, send)


class BodyIdle(TimeoutError):
    """A request body sent nothing for the configured idle timeout."""

    def __init__(self, timeout_s: float, message: str | None = None) -> None:
        super().__init__(message or f"no data for {timeout_s:g} s while receiving the request body")
        self.timeout_s = timeout_s


class BodyTooSlow(BodyIdle):
    """A request body was not complete within the configured total time."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s, f"request body not complete within {timeout_s:g} s")


def _positive(name: str, value: float) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number of seconds, got {value}")
    return value


class BodyIdleTimeout:
    """ASGI middleware: every wait for the next body chunk is bounded by `timeout_s` (else
    `BodyIdle`), and the whole body by `total_s` from the request's start (else `BodyTooSlow`):
    a body trickling one byte per second is never idle, but it is slow."""

    def __init__(self, app: ASGIApp, timeout_s: float, total_s: float | None = None) -> None:
        self.app = app
        self.timeout_s = _positive("timeout_s", timeout_s)
        self.total_s = None if total_s is None else _positive("total_s", total_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timeout_s, total_s = self.timeout_s, self.total_s
        deadline = None if total_s is None else time.monotonic() + total_s
        body_done = False

        async def bounded_receive() -> Message:
            nonlocal body_done
            if body_done:  # later calls wait for a disconnect (streaming): not bounded
                return await receive()
            left = math.inf if deadline is None else deadline - time.monotonic()
            try:
                with fail_after(max(0.0, min(timeout_s, left))):
                    message = await receive()
            except TimeoutError:
                if left <= timeout_s and total_s is not None:
                    raise BodyTooSlow(total_s) from None
                raise BodyIdle(timeout_s) from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, bounded_receive, send)


async def _send_413(send: Send, limit: int) -> None:
    body = (
        b'{"error":"body: request body larger than ' + str(limit).encode() + b' bytes",'
        b'"field":"body"}'
    )
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class UploadStorageError(Exception):
    """The service's disk refused an upload: full (507) or not writable (503); one line."""

    FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
    UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @classmethod
    def of(cls, error: OSError) -> UploadStorageError | None:
        """The refusal for a disk error, or None for any other `OSError` (a bug: 500)."""
        reason = (error.strerror or str(error)).lower()
        if error.errno in cls.FULL:
            return cls(507, f"reference: the service has no space left for uploads ({reason})")
        if error.errno in cls.UNWRITABLE:
            return cls(503, f"reference: the service cannot store uploads now ({reason})")
        return None


@asynccontextmanager
async def read_form(
    request: Request, *, max_files: int, max_fields: int, max_part_size: int
) -> AsyncIterator[FormData]:
    """`request.form(...)` (closed at exit), a disk that refuses the parser's spool files mapped
    to `UploadStorageError` (507 full, 503 read-only or failing; one line) like `save_uploads`.

    Starlette keeps a file part in memory up to 1 MiB, then rolls it over to a temporary file in
    TMPDIR (`tempfile.SpooledTemporaryFile`): creating or writing that file can fail with the
    disk's errors while the body is parsed, before any of it reaches the upload folder. Any other
    `OSError` is raised as it is (a bug: 500)."""
    try:
        form = await request.form(
            max_files=max_files, max_fields=max_fields, max_part_size=max_part_size
        )
    except OSError as error:
        refusal = UploadStorageError.of(error)
        if refusal is None:
            raise
        raise refusal from error
    try:
        yield form
    finally:
        await form.close()


def save_uploads(folder: Path, files: Sequence[tuple[str | None, BinaryIO]]) -> list[Path]:
    """Copy `(client filename, stream)` pairs into `folder` (created 0700); returns the paths.

    A disk that refuses them (full, read-only, I/O error) raises `UploadStorageError` (507 or
    503, one line naming the problem); the folder is removed."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths: list[Path] = []
        for index, (filename, stream) in enumerate(files):
            path = folder / safe_upload_name(index, filename)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                stream.seek(0)
                shutil.copyfileobj(stream, out, 1 << 20)
            paths.append(path)
    except OSError as error:
        refusal = UploadStorageError.of(error)
        if refusal is None:
            raise
        shutil.rmtree(folder, ignore_errors=True)
        raise refusal from error
    return paths
