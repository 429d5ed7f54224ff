"""Prepare-ahead asserted, not assumed: the next job is prepared on the prepare-ahead worker while
the running one denoises, before the executor asks for it, and its draws ran on the pipeline's
own preparation worker."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from waits import before, deadline

pytest.importorskip("fastapi")

from serve_helpers import StartServer, submit, wait_for

from overlap import OverlapRecorder
from prenoise.serve import ServeLimits
from prenoise.serve import scheduler as scheduler_module
from prenoise.serve.scheduler import Scheduler


def test_next_job_is_prepared_on_the_worker_before_the_executor_asks(
    start_server: StartServer, overlap: OverlapRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared: dict[str, tuple[str, float]] = {}
    asked: dict[str, tuple[str, float]] = {}
    started: dict[str, threading.Event] = {}
    finished: dict[str, float] = {}
    real_prepare, real_execute = scheduler_module.prepare_job, Scheduler._execute

    def event(job_id: str) -> threading.Event:
        return started.setdefault(job_id, threading.Event())

    def prepare_job(pipeline: Any, job: Any) -> Any:
        prepared[job.id] = (threading.current_thread().name, time.perf_counter())
        event(job.id).set()
        return real_prepare(pipeline, job)

    def execute(self: Scheduler, job: Any, ahead: Any) -> None:
        if ahead is not None:  # deterministic order: preparation starts on its own, then we ask
            event(job.id).wait(30)
        asked[job.id] = (threading.current_thread().name, time.perf_counter())
        real_execute(self, job, ahead)
        finished[job.id] = time.perf_counter()

    monkeypatch.setattr(scheduler_module, "prepare_job", prepare_job)
    monkeypatch.setattr(Scheduler, "_execute", execute)
    server = start_server(prepare_ahead=1, limits=ServeLimits(max_steps=100_000))
    with server.client() as client:
        first = submit(client, {"seed": 1, "steps": 5000})  # cancelled long before the end
        wait_for(client, first, ("denoising",))
        second = submit(client, {"seed": 2})
        at = deadline()
        while client.get(f"/v1/videos/{second}").json()["prepared_ahead"] != "ready":
            assert before(at)
            time.sleep(0.02)
        assert client.get(f"/v1/videos/{first}").json()["state"] == "denoising"
        assert client.delete(f"/v1/videos/{first}").status_code == 202
        assert wait_for(client, first)["state"] == "cancelled"
        view = wait_for(client, second)
    assert view["state"] == "done" and view["prepared_ahead"] == "ready"

    # both jobs were prepared on the prepare-ahead worker before the executor asked for them;
    # the second while the first one was still running on the executor
    for job_id in (first, second):
        assert prepared[job_id][0].startswith("prenoise-serve-prepare"), prepared[job_id]
        assert asked[job_id][0] == "prenoise-serve-executor"
        assert prepared[job_id][1] < asked[job_id][1], "prepared only once asked for"
    thread, start = prepared[second]
    assert asked[first][1] < start < finished[first], "not prepared during the first job"
    # inside each preparation, the noise was drawn on the pipeline's own worker, before asked
    jobs = ["visual_condition_noise.0", "initial_video_noise", "initial_audio_noise"]
    first_ex, second_ex = overlap.executor_ids("ref2va-prep")
    overlap.assert_prepared_ahead("ref2va-prep", jobs, executor_id=first_ex)
    ran = overlap.assert_prepared_ahead("ref2va-prep", jobs, executor_id=second_ex)
    assert {take.thread for _, take in ran.values()} == {thread}
