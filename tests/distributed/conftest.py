"""One 2-rank spawned job shared by the tests of healthy ranks (`_workers.run_shared`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _workers import run_shared

from prenoise.distributed.launch import RankOutcome, spawn_ranks
from prenoise.distributed.shm import leftover_segments
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"


class SharedRanks:
    """The shared job's outcome: per rank function, both ranks' values (or the test fails)."""

    def __init__(self, outcomes: list[RankOutcome], workdir: Path, before: set[Path]) -> None:
        self.outcomes, self.workdir = outcomes, workdir
        self.before = before  # the shared-memory names left over before the job

    def values(self, name: str) -> list[Any]:
        assert all(o.ok for o in self.outcomes), [o.error for o in self.outcomes]
        results = [o.value[name] for o in self.outcomes]
        assert all(ok for ok, _ in results), [value for ok, value in results if not ok]
        return [value for _, value in results]


@pytest.fixture(scope="session")
def shared_ranks(tmp_path_factory: pytest.TempPathFactory) -> SharedRanks:
    """`run_shared` on 2 spawned ranks, once per session, in its own directory."""
    workdir = tmp_path_factory.mktemp("shared-ranks")
    before = set(leftover_segments())
    outcomes = spawn_ranks(run_shared, 2, (str(TINY), str(workdir)), timeout_s=READY_CEILING_S)
    return SharedRanks(outcomes, workdir, before)
