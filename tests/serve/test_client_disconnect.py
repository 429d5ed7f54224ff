"""A client that goes away in the middle of its request body is not a server error (issue 42).

Starlette raises `ClientDisconnect` when the connection closes while the body is read; the
question is whether `prenoise serve` counts and logs that as an "internal error" (it is the
client's doing, and the server has no one left to answer). Run against a real uvicorn on
loopback, for a JSON body and a multipart upload.
"""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from waits import READY_CEILING_S, before, deadline

pytest.importorskip("fastapi")

from serve_helpers import StartServer, files_under, submit, wait_for


def _half_sent(port: int, content_type: str, body: bytes) -> socket.socket:
    """A connection that sent the headers and half of `body`."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=READY_CEILING_S)
    head = (
        f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[: len(body) // 2])
    return sock


def _wait_in_flight(server: Any, count: int) -> None:
    at = deadline()
    while server.service.admission.in_flight[0] != count:
        assert before(at), server.service.admission.in_flight
        threading.Event().wait(0.05)


@pytest.mark.parametrize("kind", ["json", "multipart"])
def test_a_client_gone_mid_body_is_not_an_internal_error(
    start_server: StartServer, media_root: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_server()
    if kind == "json":
        content_type, body = "application/json", b'{"prompt": "' + b"a" * 3000 + b'"}'
    else:
        files = {"reference": ("clip.mp4", (media_root / "ref.mp4").read_bytes())}
        request = httpx.Request("POST", "http://x/v1/videos", files=files)
        content_type, body = request.headers["content-type"], request.read()
    port = int(server.url.rsplit(":", 1)[1])
    with caplog.at_level(logging.INFO, logger="prenoise.serve"):
        sock = _half_sent(port, content_type, body)
        _wait_in_flight(server, 1)  # its body is being received
        sock.close()  # the client goes away
        _wait_in_flight(server, 0)
        with server.client() as client:  # served after it, on the same event loop
            assert wait_for(client, submit(client, {"seed": 5}))["state"] == "done"
            metrics = client.get("/metrics").text
    internal = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
    assert internal == []
    assert 'prenoise_requests_total{outcome="error"} 0.0' in metrics, metrics
    assert server.service.admission.in_flight == (0, 0)
    assert files_under(Path(server.service.upload_root)) == []
    assert len(server.service.store) == 1  # only the real request became a job
