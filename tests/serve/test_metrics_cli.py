"""/metrics and /health contents; the `prenoise serve` command line in a real subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from waits import READY_CEILING_S, before, deadline

pytest.importorskip("fastapi")

from serve_helpers import ServerThread, files_under, submit, wait_for

from prenoise.cli.commands import build_parser
from prenoise.serve.metrics import kernel_backend


def test_metrics_and_health(server: ServerThread) -> None:
    with server.client() as client:
        ids = [submit(client, {"seed": s}) for s in (1, 2)]
        assert [wait_for(client, i)["state"] for i in ids] == ["done", "done"]
        text = client.get("/metrics").text
        health = client.get("/health").json()
    backend = kernel_backend()
    for line in [
        'prenoise_requests_total{outcome="done"} 2.0',
        'prenoise_requests_total{outcome="failed"} 0.0',
        "prenoise_queue_depth 0.0",
        "prenoise_preparation_window_seconds_count 2.0",
        "prenoise_noise_critical_seconds_count 2.0",
        "prenoise_prepare_wait_seconds_count 2.0",
        "prenoise_end_to_end_seconds_count 2.0",
        "prenoise_time_to_first_step_seconds_count 2.0",
        "prenoise_prediction_fallbacks_total 0.0",
        f'prenoise_noise_kernel_backend{{active="{str(backend.active).lower()}",'
        f'backend="{backend.name}"}} 1.0',
    ]:
        assert line in text, line
    assert health["status"] == "ok"
    assert health["queue_depth"] == 0 and health["running"] is None
    assert health["noise_backend"]["name"] == backend.name


def test_serve_parser_defaults() -> None:
    args = build_parser().parse_args(["serve", "--recipe", "r.yaml"])
    assert (args.host, args.port, args.prepare_ahead) == ("127.0.0.1", 8000, 1)
    assert args.media_root is None and args.output_dir is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_prenoise_serve_subprocess(recipe_path: Path, media_root: Path, tmp_path: Path) -> None:
    port = _free_port()
    out = tmp_path / "served"
    command = [
        sys.executable, "-m", "prenoise", "serve", "--recipe", str(recipe_path),
        "--port", str(port), "--media-root", str(media_root), "--output-dir", str(out),
        "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=READY_CEILING_S) as client:
            at = deadline()
            while True:  # until /health answers; a serve that exited fails at once
                assert proc.poll() is None, proc.communicate()[0].decode()
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert before(at), "prenoise serve did not come up"
                time.sleep(0.1)
            job_id = submit(client, {"seed": 9, "references": [{"path": "ref.mp4"}]})
            assert wait_for(client, job_id)["state"] == "done"
            assert files_under(out) == [f"{job_id}.mp4"]
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=READY_CEILING_S)[0].decode()
    assert proc.returncode == 0, output
    assert f"on http://127.0.0.1:{port}" in output
