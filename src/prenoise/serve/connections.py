"""Connections whose request headers never finish are closed (uvicorn keeps them forever).

uvicorn times out an idle keep-alive connection only until its next byte arrives: a client that
connects and sends nothing, or half a request line and then one header byte now and then, holds
its connection (a socket, a file descriptor, a slot of `limit_concurrency`) for as long as it
likes. :func:`http_protocol` is uvicorn's h11 protocol with one timer more: a request's headers
must be complete within `headers_timeout_s` of the connection opening (or of the previous
response); otherwise the connection is answered 408 and closed. The body's own time limits are
`uploads.BodyTimeouts`'.

`prenoise serve` runs uvicorn with it; pass it as `uvicorn.run(app, http=http_protocol(t))` when
serving `create_app(...)` yourself.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["http_protocol"]

_BODY = b'{"error":"request headers not complete in time","field":null}'
_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(_BODY)).encode() + b"\r\nconnection: close\r\n\r\n" + _BODY
)


class _HeadersTimeoutProtocol(H11Protocol):
    """H11Protocol that closes a connection whose request headers are late."""

    headers_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_timer: asyncio.TimerHandle | None = None
        self._waiting_since_cycle: object = None

    def _arm_headers_timer(self) -> None:
        self._disarm_headers_timer()
        self._waiting_since_cycle = self.cycle  # a new request replaces `cycle`
        self._headers_timer = self.loop.call_later(self.headers_timeout_s, self._headers_late)

    def _disarm_headers_timer(self) -> None:
        if self._headers_timer is not None:
            self._headers_timer.cancel()
            self._headers_timer = None

    def _headers_late(self) -> None:
        self._headers_timer = None
        if self.cycle is not self._waiting_since_cycle or self.transport.is_closing():
            return  # a request started meanwhile
        self.transport.write(_408)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_headers_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_headers_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self._headers_timer is not None and self.cycle is not self._waiting_since_cycle:
            self._disarm_headers_timer()  # the headers are complete: the body's limits apply

    def on_response_complete(self) -> None:
        finished = self.cycle
        super().on_response_complete()  # may start a pipelined request (a new `cycle`)
        if not self.transport.is_closing() and self.cycle is finished:
            self._arm_headers_timer()  # the next request on this connection


def http_protocol(headers_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol closing connections whose request headers take longer than
    `headers_timeout_s` seconds (answered 408)."""
    if not (headers_timeout_s > 0 and math.isfinite(headers_timeout_s)):
        raise ValueError(f"headers_timeout_s must be a positive number, got {headers_timeout_s}")
    return type(
        "HeadersTimeoutProtocol",
        (_HeadersTimeoutProtocol,),
        {"headers_timeout_s": float(headers_timeout_s)},
    )
