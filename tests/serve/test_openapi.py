"""`/openapi.json` describes both forms of `POST /v1/videos`, and docs/service.md's curl examples
work as written (issue 34, item 8)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from waits import READY_CEILING_S

pytest.importorskip("fastapi")

from serve_helpers import StartServer, wait_for

from prenoise.ref2va.media import write_image
from prenoise.serve.schema import ReferenceIn, VideoRequest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "service.md"


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/components/schemas/"), ref
    return schema["components"]["schemas"][ref.rsplit("/", 1)[1]]


def test_openapi_describes_the_json_and_the_multipart_body(start_server: StartServer) -> None:
    server = start_server()
    with server.client() as client:
        schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/videos"]["post"]["requestBody"]
    assert set(body["content"]) == {"application/json", "multipart/form-data"}
    as_json = _resolve(schema, body["content"]["application/json"]["schema"])
    assert set(as_json["properties"]) == set(VideoRequest.model_fields)
    assert as_json["additionalProperties"] is False  # extra="forbid": unknown fields are 422
    references = as_json["properties"]["references"]["anyOf"][0]["items"]
    assert set(_resolve(schema, references)["properties"]) == set(ReferenceIn.model_fields)
    VideoRequest.model_validate(body["content"]["application/json"]["example"])
    form = body["content"]["multipart/form-data"]["schema"]
    assert set(form["properties"]) == {"request", "reference"}  # what _read_body accepts
    assert form["properties"]["reference"]["items"] == {"type": "string", "format": "binary"}
    VideoRequest.model_validate(json.loads(form["properties"]["request"]["example"]))
    answer = schema["paths"]["/v1/videos"]["post"]["responses"]["202"]
    assert answer["content"]["application/json"]["schema"]["required"] == [
        "id",
        "state",
        "status_url",
    ]


def _documented_commands() -> list[str]:
    text = DOCS.read_text()
    section = text[text.index("## Requests") : text.index("## Limits")]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    joined = block.replace("\\\n", " ")
    return [line.split(" # ")[0].strip() for line in joined.splitlines() if line.startswith("curl")]


def _run(command: str, url: str, cwd: Path) -> str:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    command = command.replace("http://127.0.0.1:8000", url)
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_the_documented_curl_commands_work(start_server: StartServer, tmp_path: Path) -> None:
    import torch

    commands = _documented_commands()
    assert len(commands) == 4
    post_json, post_form, status, download = commands
    write_image(tmp_path / "photo.png", torch.full((96, 128, 3), 200, dtype=torch.uint8))
    server = start_server()
    ids = []
    for command in (post_json, post_form):
        answer = json.loads(_run(command, server.url, tmp_path))
        assert answer["state"] == "queued" and answer["status_url"] == f"/v1/videos/{answer['id']}"
        ids.append(answer["id"])
    with server.client() as client:
        for job_id in ids:
            assert wait_for(client, job_id)["state"] == "done"
    for job_id in ids:
        view = json.loads(_run(status.replace("ID", job_id), server.url, tmp_path))
        assert view["state"] == "done"
        _run(download.replace("ID", job_id), server.url, tmp_path)
        clip = (tmp_path / "clip.mp4").read_bytes()
        assert clip[4:8] == b"ftyp" and len(clip) > 1000
    jobs = [server.service.store.get(job_id) for job_id in ids]
    recipes = [job.recipe for job in jobs if job is not None]
    assert [(r.prompt, r.seed) for r in recipes] == [
        ("a red kite over a grey sea", 7),
        ("this photo, moving", 7),
    ]
    assert recipes[0].duration == 1.0
    assert [ref.kind for ref in recipes[1].references] == ["image"]
