"""Upload space and the parser's spool files under hostile or broken conditions (issue 42).

HIGH 3: admission charged a request's declared `Content-Length` before a byte arrived, so four
connections declaring 64 MiB (the most `--max-upload-mb` allows) and trickling a byte now and
then held the whole default 256 MiB of upload space: every real POST, JSON ones included, was
429 until `--body-timeout` ended them (and they reconnect). Now only bytes that arrived are
charged; a declaration is checked against the space actually free, never reserved.

MEDIUM: a multipart part over 1 MiB is spooled by Starlette's form parser to the system's
temporary directory; a full or read-only TMPDIR was a 500 "internal error" counted as an error.
Now it is refused like the upload folder's own disk errors: 507 / 503, `Retry-After`, refused.
Both run against a real uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from waits import READY_CEILING_S, before, deadline

pytest.importorskip("fastapi")

from serve_helpers import POLL_S, StartServer, files_under, submit, wait_for

from prenoise.serve import ServeLimits

MiB = 2**20
GAP_S = 0.4  # one byte per gap: never idle for the idle timeout
BOUNDARY = "r4boundary"


class Trickler:
    """A connection that sends request headers declaring `declared` body bytes, then one byte
    of a multipart body every `GAP_S` from a thread, until the server answers or closes."""

    def __init__(self, port: int, declared: int) -> None:
        head = (
            f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {declared}\r\n\r\n"
        ).encode()
        self.rest = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="reference"; '
            f'filename="clip.mp4"\r\nContent-Type: video/mp4\r\n\r\n'
        ).encode() + b"\0" * 4096
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READY_CEILING_S)
        self.sock.sendall(head + self.rest[:1])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        for byte in self.rest[1:]:
            if self.stop.wait(GAP_S):
                return
            if select.select([self.sock], [], [], 0)[0]:  # answered: stop sending
                return
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
            self.thread.join(READY_CEILING_S)
            self.sock.close()
        return received


def _wait_in_flight(server: Any, count: int) -> None:
    at = deadline()
    while server.service.admission.in_flight[0] != count:
        assert before(at), server.service.admission.in_flight
        threading.Event().wait(POLL_S)


def test_declared_but_unsent_bytes_hold_no_upload_space(
    start_server: StartServer, media_root: Path
) -> None:
    limits = ServeLimits(max_steps=100_000)  # the defaults: 64 MiB a body, 256 MiB in all
    assert limits.max_queued_upload_bytes == 4 * limits.max_upload_bytes
    # the bodies' time is generous: they must still be trickling when the real clients come
    server = start_server(limits=limits, body_idle_timeout_s=8.0, body_timeout_s=12.0)
    port = int(server.url.rsplit(":", 1)[1])
    slow = [Trickler(port, limits.max_upload_bytes) for _ in range(4)]
    try:
        _wait_in_flight(server, 4)
        charged = server.service.admission.in_flight[1]
        assert charged < 64 * 1024, charged  # what arrived, not 4 x 64 MiB declared
        with server.client() as client:
            json_job = client.post("/v1/videos", json={"seed": 2})  # 429 before the fix
            assert json_job.status_code == 202, json_job.text
            assert server.service.admission.in_flight[0] == 4  # the slow ones still send
            files = {"reference": ("clip.mp4", (media_root / "ref.mp4").read_bytes())}
            upload = client.post("/v1/videos", files=files)  # 429 before the fix
            assert upload.status_code == 202, upload.text
            assert server.service.admission.in_flight[0] == 4
            for job in (json_job, upload):
                assert wait_for(client, job.json()["id"])["state"] == "done"
        answers = [trickler.answer() for trickler in slow]
    finally:
        for trickler in slow:
            trickler.stop.set()
    for answer in answers:  # each ended by its body time, as before
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"not complete within 12 s" in payload, payload
    assert server.service.admission.in_flight == (0, 0)
    assert len(server.service.store) == 2  # only the real requests became jobs


def test_a_declaration_larger_than_the_free_space_is_still_refused_before_reading(
    start_server: StartServer, media_root: Path
) -> None:
    data = (media_root / "ref.mp4").read_bytes()
    limits = ServeLimits(max_steps=100_000, max_queued_upload_bytes=len(data) // 2)
    server = start_server(limits=limits)
    with server.client() as client:
        response = client.post("/v1/videos", files={"reference": ("clip.mp4", data)})
        assert response.status_code == 429, response.text
        assert response.json()["limit"] == "max_queued_upload_bytes"
        assert server.service.admission.in_flight == (0, 0)
        assert files_under(Path(server.service.upload_root)) == []
        assert wait_for(client, submit(client, {"seed": 6}))["state"] == "done"


def _full_disk(*_args: Any, **_kwargs: Any) -> Any:
    """A spool file on a full disk: `/dev/full` takes the open, every write is ENOSPC."""
    return open("/dev/full", "w+b", buffering=0)  # the parser closes it


def _read_only_disk(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    ("spool", "status", "message"),
    [
        (_full_disk, 507, "reference: the service has no space left for uploads (no space "),
        (_read_only_disk, 503, "reference: the service cannot store uploads now (read-only "),
    ],
)
def test_a_temporary_directory_refusing_the_parser_spool_is_named(
    start_server: StartServer,
    monkeypatch: pytest.MonkeyPatch,
    spool: Any,
    status: int,
    message: str,
) -> None:
    server = start_server()
    # Starlette's parser keeps a part in memory up to 1 MiB, then rolls it over to
    # `tempfile.TemporaryFile()` in TMPDIR: that file is on a full / read-only disk here.
    monkeypatch.setattr(tempfile, "TemporaryFile", spool)
    files = {"reference": ("clip.mp4", b"\0" * (2 * MiB))}
    with server.client() as client:
        response = client.post("/v1/videos", files=files)  # 500 "internal error" before
        monkeypatch.undo()
        assert response.status_code == status, response.text
        body = response.json()
        assert body["field"] == "reference" and body["error"].startswith(message), body
        assert response.headers["retry-after"] == "5"
        metrics = client.get("/metrics").text
        assert 'prenoise_requests_total{outcome="rejected"} 1.0' in metrics
        assert 'prenoise_requests_total{outcome="error"} 0.0' in metrics
        assert files_under(Path(server.service.upload_root)) == []
        assert server.service.admission.in_flight == (0, 0)
        assert wait_for(client, submit(client, {"seed": 5}))["state"] == "done"  # still serving
