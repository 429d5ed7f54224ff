"""`GET …/content` racing a `DELETE`: the download is whole (200) or refused (410), never a 500
and never cut short. Each interleaving is forced with a hook, not left to timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import httpx
import pytest

pytest.importorskip("fastapi")

from serve_helpers import ServerThread, files_under, submit, wait_for

from prenoise.serve import content


def finished_job(server: ServerThread, client: httpx.Client) -> tuple[str, bytes]:
    job_id = submit(client, {"seed": 5})
    assert wait_for(client, job_id)["state"] == "done"
    path = server.service.settings.output_dir / f"{job_id}.mp4"
    return job_id, path.read_bytes()


def assert_gone(response: httpx.Response) -> None:
    assert response.status_code == 410, response.text
    assert set(response.json()) >= {"error", "field"}


def test_delete_between_lookup_and_read_is_410(server: ServerThread) -> None:
    store = server.service.store
    with server.client() as client:
        job_id, _ = finished_job(server, client)
        real_get = store.get

        def get_then_delete(wanted: str) -> Any:
            job = real_get(wanted)
            store.remove(wanted)  # what DELETE does, right after the GET found the job
            return job

        store.get = get_then_delete
        try:
            assert_gone(client.get(f"/v1/videos/{job_id}/content"))
        finally:
            del store.get
        assert client.get(f"/v1/videos/{job_id}/content").status_code == 404  # forgotten


@pytest.mark.parametrize("delete_first", [True, False], ids=["before-open", "after-open"])
def test_delete_around_the_open(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch, delete_first: bool
) -> None:
    """The DELETE is a real HTTP request, sent while the GET waits in its worker thread."""
    real_open = content.open_output
    with server.client() as client, server.client() as other:
        job_id, mp4 = finished_job(server, client)

        def delete() -> None:
            response = other.delete(f"/v1/videos/{job_id}")
            assert response.json()["state"] == "deleted", response.text

        def open_with_delete(path: Path) -> BinaryIO:
            if delete_first:
                delete()
                return real_open(path)
            file = real_open(path)
            delete()  # the file is unlinked while the download has not sent a byte
            return file

        monkeypatch.setattr(content, "open_output", open_with_delete)
        response = client.get(f"/v1/videos/{job_id}/content")
        if delete_first:
            assert_gone(response)
        else:
            assert response.status_code == 200, response.text
            assert response.content == mp4  # whole, though deleted mid-way
            assert response.headers["content-length"] == str(len(mp4))
    assert files_under(server.service.settings.output_dir) == []
