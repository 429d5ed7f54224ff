"""A failing request is reported, leaves no files behind and never stops the service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("fastapi")

from serve_helpers import StartServer, files_under, submit, wait_for

from prenoise.observe.tracing import NULL_TRACER, Tracer
from prenoise.ref2va.pipeline import PreparedOutput, Ref2VAPipeline
from prenoise.ref2va.request_plan import Ref2VARequestPlan


class FlakyPipeline(Ref2VAPipeline):
    """Fails in a chosen stage for chosen seeds."""

    def prepare(self, plan: Ref2VARequestPlan, *args: Any, **kwargs: Any) -> Any:
        if plan.recipe.seed == 668:
            raise MemoryError("simulated: out of memory while preparing")
        return super().prepare(plan, *args, **kwargs)

    def denoise(
        self, plan: Ref2VARequestPlan, prepared: PreparedOutput, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if plan.recipe.seed == 666:
            raise RuntimeError("boom in\ndenoise")
        return super().denoise(plan, prepared, **kwargs)

    def decode_and_write(
        self,
        plan: Ref2VARequestPlan,
        video_rows: torch.Tensor,
        audio_rows: torch.Tensor,
        path: Path,
        *,
        tracer: Tracer = NULL_TRACER,
    ) -> Path:
        if plan.recipe.seed == 667 and path.stem.endswith("-1"):
            raise OSError("disk full (simulated) writing the second output")
        return super().decode_and_write(plan, video_rows, audio_rows, path, tracer=tracer)


def test_failures_are_isolated(start_server: StartServer, pipeline: Ref2VAPipeline) -> None:
    for ahead in (0, 1):
        server = start_server(pipeline_=FlakyPipeline(pipeline.models), prepare_ahead=ahead)
        with server.client() as client:
            bad = [submit(client, {"seed": s, "outputs": 2}) for s in (666, 667, 668)]
            good = submit(client, {"seed": 5})
            views = [wait_for(client, job_id) for job_id in [*bad, good]]
            assert [v["state"] for v in views] == ["failed", "failed", "failed", "done"], views
            assert views[0]["error"] == "RuntimeError: boom in denoise"
            assert views[1]["error"].startswith("OSError: disk full")
            assert views[2]["error"].startswith("out of memory (MemoryError: simulated")
            assert views[3]["error"] is None
            # the first output of the 667 job was written, then removed with the failure
            assert files_under(server.service.settings.output_dir) == [f"{good}.mp4"]
            assert client.get(f"/v1/videos/{bad[1]}/content").status_code == 409
            health = client.get("/health")
            assert health.status_code == 200 and health.json()["status"] == "ok"
            metrics = client.get("/metrics").text
        assert 'prenoise_requests_total{outcome="failed"} 3.0' in metrics
        assert 'prenoise_requests_total{outcome="done"} 1.0' in metrics
