"""Submit, poll, download; concurrent submissions; uploads; byte-identity with the CLI."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from serve_helpers import ServerThread, StartServer, cli_mp4, files_under, submit, wait_for


def test_submit_poll_download_equals_cli(
    server: ServerThread, recipe_path: Path, tmp_path: Path
) -> None:
    with server.client() as client:
        job_id = submit(client, {"seed": 7, "prompt": "a red ball"})
        view = wait_for(client, job_id)
        assert view["state"] == "done", view
        assert view["error"] is None
        assert set(view["timings"]) >= {"queued", "prepare", "denoise", "decode", "total"}
        assert view["content"] == [f"/v1/videos/{job_id}/content?output=0"]
        response = client.get(f"/v1/videos/{job_id}/content")
        assert response.status_code == 200
        assert response.headers["content-type"] == "video/mp4"
    expected = cli_mp4(recipe_path, tmp_path / "cli.mp4", "--seed", "7", "--prompt", "a red ball")
    assert response.content == expected
    assert len(expected) > 1000


def test_ten_concurrent_submissions_each_equal_cli(
    start_server: StartServer, recipe_path: Path, tmp_path: Path
) -> None:
    server = start_server(prepare_ahead=2)
    bodies = [{"seed": 100 + i, "prompt": f"clip number {i}"} for i in range(10)]
    bodies[3].update(frames=20)
    bodies[6].update(width=160, height=96)
    with server.client() as client, ThreadPoolExecutor(10) as pool:
        ids = list(pool.map(lambda body: submit(client, body), bodies))
        views = [wait_for(client, job_id) for job_id in ids]
        assert [v["state"] for v in views] == ["done"] * 10, views
        served = [client.get(f"/v1/videos/{i}/content").content for i in ids]
    assert server.service.scheduler.ahead_high_water <= 2
    for k, body in enumerate(bodies):
        args = ["--seed", str(body["seed"]), "--prompt", str(body["prompt"])]
        if "frames" in body:
            args += ["--frames", str(body["frames"])]
        if "width" in body:
            args += ["--width", str(body["width"]), "--height", str(body["height"])]
        assert served[k] == cli_mp4(recipe_path, tmp_path / f"cli-{k}.mp4", *args), k
    assert len(set(served)) == 10


def test_reference_path_and_two_outputs_equal_cli(
    server: ServerThread, recipe_path: Path, media_root: Path, tmp_path: Path
) -> None:
    (media_root / "sub").mkdir(exist_ok=True)
    shutil.copy(media_root / "ref.mp4", media_root / "sub" / "clip.mp4")
    body = {"seed": 3, "outputs": 2, "references": [{"path": "sub/clip.mp4"}]}
    with server.client() as client:
        job_id = submit(client, body)
        view = wait_for(client, job_id)
        assert view["state"] == "done", view
        assert len(view["content"]) == 2
        served = [client.get(url).content for url in view["content"]]
        assert client.get(f"/v1/videos/{job_id}/content?output=2").status_code == 404
    ref = str(media_root / "sub" / "clip.mp4")
    out = tmp_path / "cli.mp4"
    cli_mp4(recipe_path, out, "--seed", "3", "--outputs", "2", "--reference", ref)
    assert served == [out.read_bytes(), (tmp_path / "cli-1.mp4").read_bytes()]
    assert served[0] != served[1]


def test_multipart_upload_equals_cli_and_upload_is_removed(
    server: ServerThread, recipe_path: Path, media_root: Path, tmp_path: Path
) -> None:
    data = (media_root / "ref.mp4").read_bytes()
    with server.client() as client:
        response = client.post(
            "/v1/videos",
            data={"request": '{"seed": 11, "prompt": "uploaded"}'},
            files={"reference": ("../../evil name.mp4", data, "video/mp4")},
        )
        assert response.status_code == 202, response.text
        view = wait_for(client, response.json()["id"])
        assert view["state"] == "done", view
        served = client.get(view["content"][0]).content
    copy = tmp_path / "upload.mp4"
    copy.write_bytes(data)
    expected = cli_mp4(
        recipe_path, tmp_path / "cli.mp4", "--seed", "11", "--prompt", "uploaded",
        "--reference", str(copy),
    )  # fmt: skip
    assert served == expected
    out_dir = server.service.settings.output_dir
    assert files_under(out_dir) == [f"{view['id']}.mp4"]  # no upload, no partial file left


def test_upload_over_the_limit_is_refused(start_server: StartServer, media_root: Path) -> None:
    from prenoise.serve import ServeLimits

    server = start_server(limits=ServeLimits(max_upload_bytes=4096))
    data = (media_root / "ref.mp4").read_bytes()
    assert len(data) > 4096
    with server.client() as client:
        response = client.post("/v1/videos", files={"reference": ("a.mp4", data, "video/mp4")})
        assert response.status_code == 413
        assert response.json()["field"] == "body"

        def chunks() -> object:
            yield b"--x\r\n"
            for _ in range(8):
                yield b"0" * 1024

        response = client.post(
            "/v1/videos",
            content=chunks(),  # type: ignore[arg-type]
            headers={"content-type": "multipart/form-data; boundary=x"},
        )
        assert response.status_code == 413
        assert len(server.service.store) == 0
    assert files_under(server.service.settings.output_dir) == []


def test_unknown_job_and_content_before_done(server: ServerThread) -> None:
    with server.client() as client:
        assert client.get("/v1/videos/nope").status_code == 404
        assert client.get("/v1/videos/nope/content").status_code == 404
        assert client.delete("/v1/videos/nope").status_code == 404
        job_id = submit(client, {"steps": 400})
        early = client.get(f"/v1/videos/{job_id}/content")
        assert early.status_code == 409
        assert early.json()["state"] in ("queued", "preparing", "denoising")
        client.delete(f"/v1/videos/{job_id}")
        assert wait_for(client, job_id)["state"] == "cancelled"


def test_delete_finished_job_removes_record_and_file(server: ServerThread) -> None:
    with server.client() as client:
        job_id = submit(client, {"seed": 1})
        assert wait_for(client, job_id)["state"] == "done"
        out_dir = server.service.settings.output_dir
        assert files_under(out_dir) == [f"{job_id}.mp4"]
        response = client.delete(f"/v1/videos/{job_id}")
        assert response.json() == {"id": job_id, "state": "deleted"}
        assert client.get(f"/v1/videos/{job_id}").status_code == 404
        assert files_under(out_dir) == []
