"""Bad inputs are 422 naming the field; reference paths must stay inside the media root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from serve_helpers import ServerThread, files_under, submit, wait_for

from prenoise.serve.paths import PathRejected, resolve_media_path, safe_upload_name


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"steps": 100_001}, "steps"),
        ({"seed": -1}, "seed"),
        ({"seed": "abc"}, "seed"),
        ({"prompt": ""}, "prompt"),
        ({"width": 128}, "height"),
        ({"height": 96}, "width"),
        ({"width": 16, "height": 96}, "width"),
        ({"size": "128 by 96"}, "size"),
        ({"size": "128x96", "width": 128, "height": 96}, "size"),
        ({"duration": 1.0, "frames": 12}, "duration"),
        ({"duration": -1}, "duration"),
        ({"frames": 100_000}, "frames"),
        ({"width": 8192, "height": 96}, "width"),
        ({"outputs": 0}, "outputs"),
        ({"outputs": 9}, "outputs"),
        ({"shift_video": 0}, "shift_video"),
        ({"bogus": 1}, "bogus"),
        ({"references": "ref.mp4"}, "references"),
        ({"references": [{"path": "ref.mp4", "kind": "text"}]}, "references[0].kind"),
        ({"references": [{"path": "ref.mp4", "extra": 1}]}, "references[0].extra"),
        ({"references": [{"path": "missing.mp4"}]}, "references[0].path"),
        ([1, 2], "body"),
    ],
)
def test_bad_json_is_422_naming_the_field(server: ServerThread, body: Any, field: str) -> None:
    with server.client() as client:
        response = client.post("/v1/videos", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert response.json()["error"].startswith(f"{field}: ")


def test_malformed_bodies(server: ServerThread) -> None:
    with server.client() as client:
        response = client.post(
            "/v1/videos", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert (response.status_code, response.json()["field"]) == (422, "body")
        response = client.post("/v1/videos", data={"request": "{oops"})
        assert response.status_code == 415  # urlencoded is not accepted
        response = client.post(
            "/v1/videos", files={"reference": ("a.mp4", b"x")}, data={"request": "{oops"}
        )
        assert (response.status_code, response.json()["field"]) == (422, "request")
        response = client.post(
            "/v1/videos", files={"reference": ("a.mp4", b"x")}, data={"colour": "red"}
        )
        assert (response.status_code, response.json()["field"]) == (422, "colour")
        response = client.post("/v1/videos", files={"reference": ("a.mp4", b"not a video")})
        assert response.status_code == 422
        assert response.json()["field"] == "reference[0]"
        metrics = client.get("/metrics").text
    assert 'prenoise_requests_total{outcome="rejected"} 5.0' in metrics
    assert len(server.service.store) == 0
    assert files_under(server.service.settings.output_dir) == []  # rejected uploads removed


def test_unreadable_media_inside_root_is_422(server: ServerThread, media_root: Path) -> None:
    (media_root / "junk.mp4").write_bytes(b"this is not a video")
    with server.client() as client:
        response = client.post("/v1/videos", json={"references": [{"path": "junk.mp4"}]})
    assert response.status_code == 422
    assert response.json()["field"] == "references[0].path"
    assert "junk.mp4" in response.json()["error"]
    assert str(media_root) not in response.json()["error"]  # no server paths echoed


@pytest.fixture
def outside_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.mp4"
    path.write_bytes((Path(__file__).parent / "conftest.py").read_bytes())
    return path


def test_path_escapes_are_rejected(
    server: ServerThread, media_root: Path, outside_file: Path
) -> None:
    link = media_root / "escape.mp4"
    link.unlink(missing_ok=True)
    link.symlink_to(outside_file)
    dir_link = media_root / "outdir"
    dir_link.unlink(missing_ok=True)
    dir_link.symlink_to(outside_file.parent, target_is_directory=True)
    rel = os.path.relpath(outside_file, media_root)
    attempts = [
        rel,  # ../../…/secret.mp4
        "../ref.mp4",
        "sub/../../ref.mp4",
        str(outside_file),  # absolute, outside the root
        "/etc/passwd",
        "escape.mp4",  # symlink pointing outside
        "outdir/secret.mp4",  # symlinked directory pointing outside
        "ref.mp4\x00.png",
    ]
    with server.client() as client:
        for path in attempts:
            response = client.post("/v1/videos", json={"references": [{"path": path}]})
            assert response.status_code == 422, path
            assert response.json()["field"] == "references[0].path", path
        # an absolute path inside the root is fine
        job_id = submit(client, {"references": [{"path": str(media_root / "ref.mp4")}]})
        assert wait_for(client, job_id)["state"] == "done"


def test_resolve_media_path_rules(media_root: Path, outside_file: Path) -> None:
    assert resolve_media_path(media_root, "ref.mp4") == (media_root / "ref.mp4").resolve()
    inner = media_root / "inner-link.mp4"
    inner.unlink(missing_ok=True)
    inner.symlink_to(media_root / "ref.mp4")  # a symlink that stays inside is fine
    assert resolve_media_path(media_root, "inner-link.mp4") == (media_root / "ref.mp4").resolve()
    for bad, reason in [
        ("", "empty"),
        ("a/../ref.mp4", "'..'"),
        (str(outside_file), "outside"),
        ("nope.mp4", "no such file"),
        (".", "is a directory"),
    ]:
        with pytest.raises(PathRejected, match=reason):
            resolve_media_path(media_root, bad)


def test_safe_upload_names() -> None:
    assert safe_upload_name(0, "../../etc/passwd") == "ref-0"
    assert safe_upload_name(1, "clip.MP4") == "ref-1.mp4"
    assert safe_upload_name(2, "a.png/../../x") == "ref-2"
    assert safe_upload_name(3, "weird.p n g") == "ref-3"
    assert safe_upload_name(4, None) == "ref-4"
