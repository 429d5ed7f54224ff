"""Cancelling queued and running jobs; prepare-ahead memory stays bounded and is released."""

from __future__ import annotations

import gc
import time

import pytest

from waits import before, deadline

pytest.importorskip("fastapi")

from serve_helpers import POLL_S, ServerThread, StartServer, files_under, submit, wait_for

from prenoise.ref2va.pipeline import PreparedOutput
from prenoise.serve import ServeLimits

LONG = {"steps": 5000}  # ~seconds of denoising; every test cancels it long before the end


def live_prepared_outputs() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is PreparedOutput)


def wait_until(predicate: object) -> None:
    at = deadline()
    while not predicate():  # type: ignore[operator]
        assert before(at), "condition not reached"
        time.sleep(POLL_S)


def test_cancel_queued_and_running(server: ServerThread) -> None:
    with server.client() as client:
        running = submit(client, LONG)
        prepared = submit(client, {"seed": 1})
        queued = submit(client, {"seed": 2})
        view = wait_for(client, running, ("denoising",))
        assert view["progress"].endswith("/5000")
        wait_for(client, prepared, ("queued",))
        wait_until(lambda: client.get(f"/v1/videos/{prepared}").json()["prepared_ahead"] == "ready")
        assert client.get(f"/v1/videos/{queued}").json()["prepared_ahead"] == "no"

        response = client.delete(f"/v1/videos/{queued}")
        assert (response.status_code, response.json()["state"]) == (200, "cancelled")
        response = client.delete(f"/v1/videos/{prepared}")
        assert (response.status_code, response.json()["state"]) == (200, "cancelled")
        assert server.service.scheduler.ahead_count == 0
        assert server.service.scheduler.queue_depth == 0

        response = client.delete(f"/v1/videos/{running}")
        assert response.status_code == 202
        view = wait_for(client, running)
        assert view["state"] == "cancelled"
        assert 1 <= view["step"] < 5000
        assert "decode" not in view["timings"]
        assert client.get(f"/v1/videos/{running}/content").status_code == 409
        for job_id in (running, prepared, queued):
            assert client.get(f"/v1/videos/{job_id}").json()["state"] == "cancelled"
        assert files_under(server.service.settings.output_dir) == []

        after = submit(client, {"seed": 3})  # the service keeps working
        assert wait_for(client, after)["state"] == "done"
        metrics = client.get("/metrics").text
    assert 'prenoise_requests_total{outcome="cancelled"} 3.0' in metrics
    assert 'prenoise_requests_total{outcome="done"} 1.0' in metrics


def test_prepare_ahead_memory_is_bounded_and_released(start_server: StartServer) -> None:
    assert live_prepared_outputs() == 0
    server = start_server(prepare_ahead=2, limits=ServeLimits(max_steps=100_000))
    scheduler = server.service.scheduler
    with server.client() as client:
        running = submit(client, LONG)
        wait_for(client, running, ("denoising",))
        queued = [submit(client, {"seed": 10 + i}) for i in range(5)]

        def ahead_states() -> list[str]:
            return [client.get(f"/v1/videos/{j}").json()["prepared_ahead"] for j in queued]

        wait_until(lambda: ahead_states()[:2] == ["ready", "ready"])
        time.sleep(0.2)  # nothing else may start preparing
        assert ahead_states() == ["ready", "ready", "no", "no", "no"]
        assert scheduler.ahead_count == 2
        assert live_prepared_outputs() <= 3  # two ahead + the running job's
        for job_id in queued:
            assert client.delete(f"/v1/videos/{job_id}").json()["state"] == "cancelled"
        assert scheduler.ahead_count == 0
        wait_until(lambda: live_prepared_outputs() <= 1)  # only the running job's remains
        assert client.delete(f"/v1/videos/{running}").status_code == 202
        assert wait_for(client, running)["state"] == "cancelled"
    wait_until(lambda: live_prepared_outputs() == 0)
    assert scheduler.ahead_high_water == 2


def test_prepare_ahead_zero_prepares_inline(start_server: StartServer) -> None:
    server = start_server(prepare_ahead=0)
    with server.client() as client:
        ids = [submit(client, {"seed": 20 + i}) for i in range(3)]
        views = [wait_for(client, job_id) for job_id in ids]
    assert [v["state"] for v in views] == ["done"] * 3
    assert [v["prepared_ahead"] for v in views] == ["no"] * 3
    assert server.service.scheduler.ahead_high_water == 0
