"""Slow clients cannot lock `prenoise serve` (issue 35, HIGH 2).

Round 3 sent request bodies one byte every 1.5 s: each took a queue slot before its body
arrived and only the gap between chunks was timed, so 8 such connections kept every real POST
at 429 for as long as they ran. Now a body has a total time (`body_timeout_s`), a queue slot is
taken only once a body is complete, and request headers have their own time
(`connections.http_protocol`). Timeouts here are short and test-configured.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from waits import READY_CEILING_S, before, deadline

pytest.importorskip("fastapi")

from serve_helpers import ServerThread, StartServer, submit, wait_for

from prenoise.serve import ServeLimits, ServeSettings, create_app, http_protocol

SLOW_GAP_S = 0.4  # one byte per gap: never idle for 1.5 s; sends never fall on a deadline


class Trickle:
    """A connection sending `head`, then one byte of `rest` every `SLOW_GAP_S` from a thread,
    until the server answers or closes."""

    def __init__(self, port: int, head: bytes, rest: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READY_CEILING_S)
        self.sock.sendall(head)
        self.rest = rest
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        for byte in self.rest:
            if self.stop.wait(SLOW_GAP_S):
                return
            if select.select([self.sock], [], [], 0)[0]:  # answered: sending more would
                return  # make the closed socket reset the connection before the answer is read
            try:
                self.sock.sendall(bytes([byte]))
            except OSError:  # answered and closed
                return

    def answer(self) -> bytes:
        """Everything the server sent until it closed the connection."""
        received = b""
        try:
            while chunk := self.sock.recv(65536):
                received += chunk
        finally:
            self.stop.set()
            self.thread.join(5)
            self.sock.close()
        return received


def _wait_in_flight(server: Any, count: int) -> None:
    at = deadline()
    while server.service.admission.in_flight[0] != count:
        assert before(at), server.service.admission.in_flight
        time.sleep(0.05)


def _post_head(length: int) -> bytes:
    return (
        f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_real_client_is_served_while_slow_bodies_hold_connections(
    start_server: StartServer,
) -> None:
    # the bodies' total time is generous: they must still be trickling when the real client comes
    server = start_server(
        limits=ServeLimits(max_steps=100_000, max_queued=2),
        body_idle_timeout_s=1.5,
        body_timeout_s=6.0,
    )
    port = int(server.url.rsplit(":", 1)[1])
    body = b'{"seed": 1, "prompt": "' + b"a" * 200 + b'"}'
    slow = [Trickle(port, _post_head(len(body)), body) for _ in range(4)]  # twice the queue
    try:
        _wait_in_flight(server, 4)  # every slow body has started
        with server.client() as client:
            job = submit(client, {"seed": 2})  # 429 "queue full" before: the slots were taken
            assert server.service.admission.in_flight[0] == 4  # the slow bodies still trickle
            assert wait_for(client, job)["state"] == "done"
        answers = [trickle.answer() for trickle in slow]
    finally:
        for trickle in slow:
            trickle.stop.set()
    for answer in answers:  # each was cut by its total time (not the idle time: never idle)
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b'"field":"body"' in payload and b"not complete within 6 s" in payload, payload
    assert server.service.admission.in_flight == (0, 0)
    assert len(server.service.store) == 1  # only the real request became a job


@pytest.fixture
def protocol_server(
    recipe: Any, pipeline: Any, media_root: Path, tmp_path: Path
) -> Iterator[ServerThread]:
    """A server run with `prenoise serve`'s uvicorn protocol (headers time: 1 s)."""
    settings = ServeSettings(recipe=recipe, output_dir=tmp_path / "out", media_root=media_root)
    server = ServerThread(create_app(settings, pipeline), http=http_protocol(1.0)).start()
    yield server
    server.stop()


@pytest.mark.parametrize("head", [b"", b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_headers_that_never_finish_are_answered_408_and_closed(
    protocol_server: ServerThread, head: bytes
) -> None:
    port = int(protocol_server.url.rsplit(":", 1)[1])
    lagging = [Trickle(port, head, b"X-Slow: " + b"a" * 200) for _ in range(3)]  # never end
    with protocol_server.client() as client:  # served meanwhile
        assert wait_for(client, submit(client, {"seed": 3}))["state"] == "done"
    answers = [trickle.answer() for trickle in lagging]  # a header line that never ends
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer[:200]
        assert answer.endswith(b'{"error":"request headers not complete in time","field":null}')


def test_keep_alive_requests_get_the_headers_time_again(protocol_server: ServerThread) -> None:
    with protocol_server.client() as client:
        for _ in range(3):  # the same connection, more than the headers time in all
            assert client.get("/health").status_code == 200
            time.sleep(0.5)


def test_serve_runs_uvicorn_with_both_times(
    monkeypatch: pytest.MonkeyPatch, recipe_path: Path, tmp_path: Path
) -> None:
    import uvicorn

    from prenoise.cli.commands import main

    served: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append((app, kwargs)))
    argv = ["serve", "--recipe", str(recipe_path), "--output-dir", str(tmp_path)]
    assert main([*argv, "--body-timeout", "9", "--headers-timeout", "4"]) == 0
    ((app, kwargs),) = served
    assert app.state.service.settings.body_timeout_s == 9
    assert kwargs["http"].headers_timeout_s == 4.0
