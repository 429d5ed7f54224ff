"""An upload the service's disk refuses is named in one line (issue 35, MEDIUM 9).

Round 3 uploaded to a full and to a read-only disk: both were 500 "internal error" and counted
as server errors. A full disk is now 507, a read-only (or failing) one 503, each with
`Retry-After`, counted as refused, with nothing left in `.uploads`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from serve_helpers import StartServer, files_under, submit, wait_for

import prenoise.serve.uploads as uploads


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        (errno.ENOSPC, 507, "reference: the service has no space left for uploads (no space "),
        (errno.EROFS, 503, "reference: the service cannot store uploads now (read-only file "),
    ],
)
def test_an_upload_the_disk_refuses_is_named(
    start_server: StartServer,
    media_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: int,
    status: int,
    message: str,
) -> None:
    server = start_server()

    def refusing_copy(_src: Any, dst: Any, *_args: Any) -> None:  # the disk fills mid-copy
        dst.write(b"half")
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(uploads.shutil, "copyfileobj", refusing_copy)
    files = {"reference": ("clip.mp4", (media_root / "ref.mp4").read_bytes())}
    with server.client() as client:
        response = client.post("/v1/videos", files=files)
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
