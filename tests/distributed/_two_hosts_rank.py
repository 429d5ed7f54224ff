"""A `torchrun` entry for test_two_hosts.py: `prenoise`'s own CLI, logging each rank's host.

    torchrun ... _two_hosts_rank.py LOG_DIR verify --recipe R ...

runs `prenoise.cli.commands.main(["verify", "--recipe", R, ...])` (what `torchrun -m prenoise`
runs) and appends JSON lines to `LOG_DIR/rank<RANK>.jsonl`: the rank's host (`host_ranks`,
`local_rank`, the device of the `/dev/shm` it sees), every host-shared segment it creates and
every stream it draws into one. Observation only: the wrapped functions are called unchanged.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from prenoise.cli.commands import main
from prenoise.distributed import commands, host_noise


def _log(event: str, **fields: Any) -> None:
    path = Path(sys.argv[1]) / f"rank{os.environ['RANK']}.jsonl"
    with path.open("a") as f:
        f.write(json.dumps({"event": event, "rank": int(os.environ["RANK"]), **fields}) + "\n")


def _observe() -> None:
    init, create, draw = commands.init_distributed, host_noise.create_segment, host_noise.draw_into

    def init_distributed(*args: Any, **kwargs: Any) -> Any:
        ctx = init(*args, **kwargs)
        shm = os.stat("/dev/shm").st_dev
        _log("host", host_ranks=ctx.host_ranks, local_rank=ctx.local_rank, shm_dev=shm)
        return ctx

    def create_segment(path: Path, nbytes: int) -> None:
        create(path, nbytes)
        _log("create", path=str(path))

    def draw_into(stream: Any, out: Any) -> None:
        draw(stream, out)
        _log("draw", stream=stream.name, noise_stream=stream.noise_stream)

    commands.init_distributed = init_distributed
    host_noise.create_segment = create_segment
    host_noise.draw_into = draw_into


if __name__ == "__main__":
    _observe()
    sys.exit(main(sys.argv[2:]))
