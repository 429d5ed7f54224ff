"""A bounded load loop: 50 tiny requests, no growth in threads or resident memory."""

from __future__ import annotations

import gc
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytest.importorskip("fastapi")

from serve_helpers import StartServer, proc_status, submit, wait_for

BATCHES = 5
PER_BATCH = 10
IO_THREADS = 4
SERVICE_THREADS = 3 + IO_THREADS + 2 * (torch.get_num_threads() - 1) + 2
"""Threads the service may add: uvicorn, executor, prepare-ahead worker, the HTTP layer's I/O
pool, the OpenMP team of the executor and of the prepare worker (torch intra-op threads - 1
each), and 2 transient (a request's own preparation worker; encoder threads while writing)."""
THREAD_GROWTH = 2
"""Threads may differ by at most this much between the first and the last batch."""
RSS_GROWTH_MB = 32
"""Resident memory may grow by at most this much between the first and the last batch."""


def test_fifty_requests_no_thread_or_memory_growth(start_server: StartServer) -> None:
    samples: list[tuple[int, int]] = []
    with ThreadPoolExecutor(PER_BATCH) as pool:
        list(pool.map(time.sleep, [0.05] * PER_BATCH))  # the client threads exist from here on
        baseline = proc_status("Threads")
        server = start_server(io_threads=IO_THREADS)
        with server.client() as client:
            for batch in range(BATCHES):
                seeds = range(1000 + batch * PER_BATCH, 1000 + (batch + 1) * PER_BATCH)
                ids = list(pool.map(lambda s: submit(client, {"seed": s}), seeds))
                views = [wait_for(client, job_id) for job_id in ids]
                assert [v["state"] for v in views] == ["done"] * PER_BATCH
                for job_id in ids:  # clients delete what they downloaded
                    assert len(client.get(f"/v1/videos/{job_id}/content").content) > 1000
                    assert client.delete(f"/v1/videos/{job_id}").json()["state"] == "deleted"
                gc.collect()
                samples.append((proc_status("Threads"), proc_status("VmRSS") // 1024))
    print(f"threads before the server: {baseline}; threads, RSS MiB after each batch: {samples}")
    (threads_first, rss_first), (threads_last, rss_last) = samples[0], samples[-1]
    assert max(t for t, _ in samples) <= baseline + SERVICE_THREADS, (baseline, samples)
    assert threads_last <= threads_first + THREAD_GROWTH, samples
    assert rss_last <= rss_first + RSS_GROWTH_MB, samples
    assert len(server.service.store) == 0
    assert server.service.scheduler.queue_depth == 0
