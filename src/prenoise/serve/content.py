"""`GET /v1/videos/{id}/content`: an output MP4 streamed from a descriptor opened up front.

The file is opened before the response starts and sent from that open descriptor, never
reopened by path. A `DELETE` (or eviction) that unlinks it afterwards does not affect a
download already answered (POSIX keeps an open file's data until it is closed), and one that
came first makes the open fail, which the route answers with 410. So a download is either
whole or refused; it is never cut short and never a 500.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from anyio import to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["OpenFileResponse", "open_output"]

CHUNK_BYTES = 1 << 20


def open_output(path: Path) -> BinaryIO:
    """Open an output for reading (the tests replace this to force a DELETE around it)."""
    return path.open("rb")


class OpenFileResponse(Response):
    """Sends all of an already opened `file` (its size fixed at construction) and closes it."""

    def __init__(self, file: BinaryIO, *, size: int, filename: str, media_type: str) -> None:
        quoted = quote(filename)
        disposition = (
            f'attachment; filename="{filename}"'
            if quoted == filename
            else f"attachment; filename*=utf-8''{quoted}"
        )
        headers = {"content-length": str(size), "content-disposition": disposition}
        super().__init__(None, headers=headers, media_type=media_type)
        self.file = file
        self.size = size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            remaining = self.size
            while remaining > 0:  # exactly `size` bytes, as Content-Length promised
                chunk = await to_thread.run_sync(self.file.read, min(CHUNK_BYTES, remaining))
                if not chunk:
                    raise OSError(f"{self.file.name}: shorter than its {self.size} bytes")
                remaining -= len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.file.close()
