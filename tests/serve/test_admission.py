"""Bounded admission: queued requests and the upload bytes they hold are capped (429 +
Retry-After), and a request body that stalls is answered 408 and released."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from waits import READY_CEILING_S

pytest.importorskip("fastapi")

from serve_helpers import ServerThread, StartServer, files_under, submit, wait_for

from prenoise.serve import ServeLimits

LONG = {"steps": 5000}  # denoises for seconds: keeps the queue behind it waiting


def assert_full(response: httpx.Response, limit: str) -> None:
    """The documented 429: Retry-After, and `{"error", "field", "limit", "retry_after_s"}`."""
    assert response.status_code == 429, response.text
    body = response.json()
    assert set(body) == {"error", "field", "limit", "retry_after_s"}, body
    assert body["limit"] == limit and body["field"] is None
    assert response.headers["retry-after"] == str(body["retry_after_s"]) == "5"
    assert "retry later" in body["error"]


def upload(client: httpx.Client, data: bytes) -> httpx.Response:
    return client.post("/v1/videos", files={"reference": ("clip.mp4", data)})


def chunked_upload(client: httpx.Client, data: bytes) -> httpx.Response:
    """The same multipart upload without Content-Length: bytes are only known as they come."""
    request = client.build_request("POST", "/v1/videos", files={"reference": ("clip.mp4", data)})
    body = request.read()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    headers = {"content-type": request.headers["content-type"]}
    return client.post("/v1/videos", content=chunks(), headers=headers)


def uploads_dir(server: ServerThread) -> Path:
    return Path(server.service.upload_root)


def test_queue_is_bounded(start_server: StartServer) -> None:
    server = start_server(limits=ServeLimits(max_steps=100_000, max_queued=2))
    with server.client() as client:
        running = submit(client, LONG)
        wait_for(client, running, ("denoising",))
        queued = [submit(client, {"seed": s}) for s in (1, 2)]
        assert_full(client.post("/v1/videos", json={"seed": 3}), "max_queued")
        assert server.service.scheduler.queue_depth == 2
        assert client.delete(f"/v1/videos/{queued[0]}").status_code == 200
        queued.append(submit(client, {"seed": 3}))  # a slot was freed: admitted again
        for job_id in (running, *queued):
            client.delete(f"/v1/videos/{job_id}")
        assert wait_for(client, running)["state"] == "cancelled"
    assert server.service.admission.in_flight == (0, 0)


def test_upload_bytes_held_are_bounded(start_server: StartServer, media_root: Path) -> None:
    data = (media_root / "ref.mp4").read_bytes()
    limits = ServeLimits(max_steps=100_000, max_queued_upload_bytes=len(data) + len(data) // 2)
    server = start_server(limits=limits)
    with server.client() as client:
        running = submit(client, LONG)
        wait_for(client, running, ("denoising",))
        first = upload(client, data)
        assert first.status_code == 202, first.text
        held = files_under(uploads_dir(server))
        assert_full(upload(client, data), "max_queued_upload_bytes")  # refused on its length
        assert_full(chunked_upload(client, data), "max_queued_upload_bytes")  # while streaming
        assert files_under(uploads_dir(server)) == held  # nothing of the refused ones is kept
        assert server.service.admission.in_flight == (0, 0)
        assert client.delete(f"/v1/videos/{first.json()['id']}").status_code == 200
        assert files_under(uploads_dir(server)) == []
        again = chunked_upload(client, data)  # the cancelled job's bytes were given back
        assert again.status_code == 202, again.text
        for job_id in (running, again.json()["id"]):
            client.delete(f"/v1/videos/{job_id}")
        assert wait_for(client, running)["state"] == "cancelled"


def _half_sent(port: int, content_type: str, body: bytes) -> socket.socket:
    """A connection that sent the headers and half of `body`, then nothing more."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=READY_CEILING_S)
    head = (
        f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[: len(body) // 2])
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


@pytest.mark.parametrize("kind", ["multipart", "json"])
def test_a_stalled_body_is_answered_408_and_released(
    start_server: StartServer, media_root: Path, kind: str
) -> None:
    server = start_server(body_idle_timeout_s=0.5)
    if kind == "json":
        content_type, body = "application/json", b'{"prompt": "' + b"a" * 3000 + b'"}'
    else:
        files = {"reference": ("clip.mp4", (media_root / "ref.mp4").read_bytes())}
        request = httpx.Request("POST", "http://x/v1/videos", files=files)
        content_type, body = request.headers["content-type"], request.read()
    port = int(server.url.rsplit(":", 1)[1])
    with _half_sent(port, content_type, body) as sock:
        answer = _read_until_closed(sock)  # the server closes the connection after answering
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"field":"body"' in payload and b"no data for 0.5 s" in payload
    assert files_under(uploads_dir(server)) == []
    assert server.service.admission.in_flight == (0, 0)
    assert len(server.service.store) == 0
    with server.client() as client:  # the service is unaffected
        metrics = client.get("/metrics").text
        assert 'prenoise_requests_total{outcome="rejected"} 1.0' in metrics
        assert wait_for(client, submit(client, {"seed": 4}))["state"] == "done"


def test_a_slow_but_steady_body_is_not_cut(start_server: StartServer) -> None:
    # 0.8 s in all, never more than 0.2 s without a byte: a wide margin, for busy CI cores
    server = start_server(body_idle_timeout_s=1.0)

    def slow() -> Iterator[bytes]:
        for part in (b'{"seed": ', b"1", b"2", b"}"):
            time.sleep(0.2)
            yield part

    with server.client() as client:
        response = client.post(
            "/v1/videos", content=slow(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 202, response.text
        assert wait_for(client, response.json()["id"])["state"] == "done"
