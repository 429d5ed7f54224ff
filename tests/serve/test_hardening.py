"""Hostile requests: 422 (never 500), documented error bodies counted in /metrics, bounded
media, cancellation that reaches preparation, and files that vanish."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from waits import READY_CEILING_S

pytest.importorskip("fastapi")

from serve_helpers import ServerThread, StartServer, files_under, submit, wait_for

from hostile_media import huge_png, timestamp_jump_mp4
from prenoise.ref2va.config import Recipe
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.media import make_synthetic_reference
from prenoise.ref2va.media import reading as media
from prenoise.serve import ServeLimits

JSON = {"content-type": "application/json"}


def rejected(client: Any) -> float:
    return _metric(client, 'prenoise_requests_total{outcome="rejected"}')


def _metric(client: Any, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def assert_error(response: Any, status: int, field: str | None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) >= {"error", "field"} and body["field"] == field, body
    return str(body["error"])


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"duration": Infinity}', "duration"),
        (b'{"duration": 1e400}', "duration"),
        (b'{"frames": NaN}', "frames"),
        (b'{"seed": -Infinity}', "seed"),
        (
            b'{"references": [{"path": "ref.mp4", "max_seconds": 1e308}]}',
            "references[0].max_seconds",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "body"),
        (b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "body"),
    ],
)
def test_non_finite_and_deeply_nested_json_is_422(
    server: ServerThread, raw: bytes, field: str
) -> None:
    with server.client() as client:
        before = rejected(client)
        assert_error(client.post("/v1/videos", content=raw, headers=JSON), 422, field)
        assert rejected(client) == before + 1
    assert len(server.service.store) == 0


def test_content_types_match_case_insensitively(server: ServerThread, media_root: Path) -> None:
    with server.client() as client:
        headers = {"content-type": "Application/JSON; Charset=UTF-8"}
        response = client.post("/v1/videos", content=b'{"seed": 7}', headers=headers)
        assert response.status_code == 202, response.text
        upload = (media_root / "ref.mp4").read_bytes()
        request = client.build_request(
            "POST", "/v1/videos", files={"reference": ("clip.mp4", upload)}, data={}
        )
        kind, boundary = request.headers["content-type"].split(";", 1)
        request.headers["content-type"] = f"{kind.upper()};{boundary}"
        response = client.send(request)
        assert response.status_code == 202, response.text
        assert wait_for(client, response.json()["id"])["state"] == "done"


def test_400_413_and_500_use_the_error_body_and_are_counted(start_server: StartServer) -> None:
    server = start_server(limits=ServeLimits(max_upload_bytes=1000))
    with server.client() as client:
        no_boundary = {"content-type": "multipart/form-data"}
        error = assert_error(
            client.post("/v1/videos", content=b"x", headers=no_boundary), 400, None
        )
        assert "boundary" in error
        big = b'{"prompt": "' + b"a" * 2000 + b'"}'
        assert_error(client.post("/v1/videos", content=big, headers=JSON), 413, "body")

        def chunked() -> Iterator[bytes]:  # no Content-Length: the limit trips while reading
            yield big[:600]
            yield big[600:]

        assert_error(client.post("/v1/videos", content=chunked(), headers=JSON), 413, "body")
        assert_error(client.get("/v1/videos/x/content?output=first"), 422, "output")
        assert rejected(client) == 3
        assert _metric(client, 'prenoise_requests_total{outcome="error"}') == 0

        def broken(_job_id: str) -> Any:
            raise RuntimeError("store exploded")

        server.service.store.get = broken
        error = assert_error(client.get("/v1/videos/abc"), 500, None)
        assert error == "internal error (see the service log)"
        assert _metric(client, 'prenoise_requests_total{outcome="error"}') == 1


def test_orphaned_uploads_are_swept_at_startup(start_server: StartServer, tmp_path: Path) -> None:
    out = tmp_path / "served"
    (out / ".uploads" / "0123abcd").mkdir(parents=True)
    (out / ".uploads" / "0123abcd" / "ref-0.mp4").write_bytes(b"left by a killed server")
    (out / "kept.mp4").write_bytes(b"an earlier output")
    start_server(output_dir=out)
    assert files_under(out) == ["kept.mp4"]


def test_content_deleted_from_disk_is_410(server: ServerThread) -> None:
    with server.client() as client:
        job_id = submit(client, {"seed": 3})
        assert wait_for(client, job_id)["state"] == "done"
        (server.service.settings.output_dir / f"{job_id}.mp4").unlink()
        error = assert_error(client.get(f"/v1/videos/{job_id}/content"), 410, "output")
        assert "gone from disk" in error


def test_requests_over_the_memory_budget_are_422_naming_the_size(
    start_server: StartServer, recipe: Recipe
) -> None:
    limits = Limits(memory_budget=256 * 2**20)
    server = start_server(recipe=recipe.model_copy(update={"limits": limits}))
    with server.client() as client:
        body = {"width": 4096, "height": 4096, "frames": 1400}
        error = assert_error(client.post("/v1/videos", json=body), 422, "frames")
        assert "more than the memory budget of 256.0 MiB" in error
        assert "make the request smaller (width x height, now 4096x4096" in error
        error = assert_error(client.post("/v1/videos", json={"size": "4096x4096"}), 422, "size")
        assert "ref.mp4" not in error  # the size is blamed, not the reference
        assert wait_for(client, submit(client, {"seed": 1}))["state"] == "done"


def test_hostile_uploads_are_refused_at_their_caps(server: ServerThread, tmp_path: Path) -> None:
    jump = timestamp_jump_mp4(tmp_path / "jump.mp4").read_bytes()
    png = huge_png(tmp_path / "huge.png", 16000).read_bytes()
    with server.client() as client:
        response = client.post("/v1/videos", files={"reference": ("clip.mp4", jump)})
        error = assert_error(response, 422, "reference[0]")
        assert "limits.max_reference_frames=2880" in error
        response = client.post("/v1/videos", files={"reference": ("still.png", png)})
        assert "limits.max_frame_pixels=" in assert_error(response, 422, "reference[0]")
    assert files_under(server.service.settings.output_dir) == []


@pytest.fixture
def held_decode(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Decoding holds at frame 10 until `release` is set; `pulled` counts frames given."""
    state: dict[str, Any] = {
        "pulled": [],
        "reached": threading.Event(),
        "release": threading.Event(),
    }
    real = media.iter_video_frames

    def holding(*args: Any, **kwargs: Any) -> Iterator[np.ndarray]:
        for frame in real(*args, **kwargs):
            state["pulled"].append(1)
            if len(state["pulled"]) == 10:
                state["reached"].set()
                assert state["release"].wait(READY_CEILING_S)
            yield frame

    monkeypatch.setattr(media, "iter_video_frames", holding)
    yield state
    state["release"].set()  # a test that failed before releasing it leaves no decode held


@pytest.fixture(scope="module")
def long_reference(media_root: Path) -> str:
    make_synthetic_reference(media_root / "long.mp4", 4.0, 64, 64)  # 96 frames
    return "long.mp4"


def test_delete_while_preparing_stops_the_decode(
    server: ServerThread, held_decode: dict[str, Any], long_reference: str
) -> None:
    with server.client() as client:
        job_id = submit(client, {"references": [{"path": long_reference}]})
        assert held_decode["reached"].wait(READY_CEILING_S)
        assert client.get(f"/v1/videos/{job_id}").json()["state"] == "preparing"
        assert client.delete(f"/v1/videos/{job_id}").status_code == 202
        held_decode["release"].set()
        assert wait_for(client, job_id)["state"] == "cancelled"
    assert len(held_decode["pulled"]) == 10  # stopped at the next frame, not after 96


def test_shutdown_stops_a_preparing_job(
    server: ServerThread, held_decode: dict[str, Any], long_reference: str
) -> None:
    with server.client() as client:
        job_id = submit(client, {"references": [{"path": long_reference}]})
        assert held_decode["reached"].wait(READY_CEILING_S)
    job = server.service.store.get(job_id)
    stopper = threading.Thread(target=server.stop)  # what SIGTERM does (uvicorn's handler)
    stopper.start()
    assert job.cancel_requested.wait(READY_CEILING_S)
    held_decode["release"].set()
    stopper.join(READY_CEILING_S)
    assert not stopper.is_alive()
    assert job.state.value == "cancelled"
    assert len(held_decode["pulled"]) == 10
