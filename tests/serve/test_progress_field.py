"""`GET /v1/videos/{id}`'s `progress` says where a job is in every state, not only while it
denoises (it was null outside denoising)."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client")  # the `serve` extra

from prenoise.ref2va.config import Recipe
from prenoise.ref2va.request_plan import plan_request
from prenoise.serve.jobs import Job, JobState


@pytest.mark.parametrize(
    ("state", "outputs", "expected"),
    [
        (JobState.QUEUED, 1, "queued"),
        (JobState.PREPARING, 1, "preparing"),
        (JobState.PREPARING, 3, "preparing output 2/3"),
        (JobState.DENOISING, 3, "5/8"),
        (JobState.DECODING, 1, "decoding"),
        (JobState.DECODING, 3, "decoding output 2/3"),
        (JobState.DONE, 3, "done"),
        (JobState.FAILED, 1, "failed"),
        (JobState.CANCELLED, 1, "cancelled"),
    ],
)
def test_progress_in_every_state(
    recipe: Recipe, state: JobState, outputs: int, expected: str
) -> None:
    plan = plan_request(recipe.model_copy(update={"steps": 8, "outputs": outputs}))
    job = Job(plan=plan)
    job.state, job.step, job.output_index = state, 5, 1
    view = job.view()
    assert view["progress"] == expected
    assert view["output"] == 1 and view["steps"] == 8
