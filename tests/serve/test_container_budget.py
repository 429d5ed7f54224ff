"""`prenoise serve` admits only what its container can hold (issue 35, HIGH 3).

Inside a memory cgroup the service's budget read the host's memory, so it admitted requests the
container could not hold and the kernel killed the server with its queue. The cgroup here is a
fake tree under `budget.SYSTEM_ROOT`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from serve_helpers import StartServer, submit, wait_for

from fake_cgroup import MIB, fake_cgroup_v2
from prenoise.guards import budget


def test_a_request_the_container_cannot_hold_is_422_naming_the_cgroup(
    start_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server()
    root = fake_cgroup_v2(tmp_path / "root", {"/": (str(900 * MIB), 899 * MIB, 0)})
    with server.client() as client:
        monkeypatch.setattr(budget, "SYSTEM_ROOT", root)  # the container is nearly full
        response = client.post("/v1/videos", json={"seed": 1})
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["field"] == "body"
        assert body["error"].startswith("body: this request (model ")
        assert (
            "more than the 1.0 MiB of memory available under the cgroup v2 limit (memory.max "
            "900.0 MiB, 899.0 MiB in use)"
        ) in body["error"]
        assert len(server.service.store) == 0  # nothing was queued

        (root / "sys/fs/cgroup/memory.current").write_text(f"{100 * MIB}\n")  # room again
        job = submit(client, {"seed": 1})
        assert wait_for(client, job)["state"] == "done"
