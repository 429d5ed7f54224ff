"""Helpers of the service tests: uvicorn in a thread, submit/poll, the CLI's MP4 bytes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from prenoise.cli.commands import main as cli_main
from waits import READY_CEILING_S, before, deadline

POLL_S = 0.01


class ServerThread:
    """uvicorn serving `app` on 127.0.0.1 (a free port) in a thread (`config`: more of
    uvicorn.Config's options, e.g. `http=prenoise.serve.http_protocol(1.0)`)."""

    def __init__(self, app: Any, **config: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", **config)
        self.app = app
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)
        self.url = ""

    def start(self) -> ServerThread:
        self.thread.start()
        at = deadline()
        while not self.server.started:
            assert before(at), "uvicorn did not start"
            assert self.thread.is_alive(), "uvicorn exited"
            time.sleep(POLL_S)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(READY_CEILING_S)
        assert not self.thread.is_alive(), "uvicorn did not stop"

    @property
    def service(self) -> Any:
        return self.app.state.service

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=READY_CEILING_S)


StartServer = Callable[..., ServerThread]
"""`start_server(**ServeSettings overrides, pipeline_=None) -> ServerThread` (a fixture)."""


def submit(client: httpx.Client, body: dict[str, Any]) -> str:
    response = client.post("/v1/videos", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def wait_for(
    client: httpx.Client,
    job_id: str,
    states: tuple[str, ...] = ("done", "failed", "cancelled"),
) -> dict[str, Any]:
    """Poll the job until its state is in `states` (a failed or cancelled job ends the wait at
    once; only a job stuck for the tests' wait ceiling fails it: `waits.py`)."""
    at = deadline()
    while True:
        view = client.get(f"/v1/videos/{job_id}").json()
        if view["state"] in states:
            return dict(view)
        assert before(at), f"job {job_id} stuck in {view}"
        time.sleep(POLL_S)


def cli_mp4(recipe_path: Path, out: Path, *args: str) -> bytes:
    """The bytes `prenoise generate --recipe R ARGS --out OUT` writes."""
    assert cli_main(["generate", "--recipe", str(recipe_path), "--out", str(out), *args]) == 0
    return out.read_bytes()


def files_under(folder: Path) -> list[str]:
    """Every file below `folder` (relative names), hidden ones included."""
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def proc_status(key: str) -> int:
    """An integer field of /proc/self/status (`Threads`, `VmRSS` in kB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)
