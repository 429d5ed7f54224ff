"""Every entry point reads a recipe (and a checkpoint's config.json) bounded (issue 42, class 5).

The CLI's `--recipe` was refused by `stat` when it named a device, a named pipe or a huge file,
but the library's `load_recipe` (serve's recipe, the pipeline's users) and the checkpoint's
`config.json` still used `Path.read_text()`: `/dev/zero` was read until memory ran out and a
named pipe waited for a writer for ever. Both now read through
`guards.documents.read_document` (a regular file of at most 1 MiB, in bounded chunks).

Each case runs in a subprocess under an address-space limit, so code that regressed to reading
`/dev/zero` whole fails with a message instead of eating the machine's memory, and a hang guard
ends one that waits on a pipe (no timing is asserted).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from prenoise.guards.documents import MAX_DOCUMENT_BYTES
from waits import READY_CEILING_S

ADDRESS_SPACE = 3 * 2**30

CODE = """
import sys
from prenoise.ref2va.checkpoint import CheckpointError, read_checkpoint_config
from prenoise.ref2va.config import RecipeError, load_recipe
what, path = sys.argv[1:]
try:
    load_recipe(path) if what == "recipe" else read_checkpoint_config(path)
except (RecipeError, CheckpointError) as error:
    print("refused:", error)
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _read(what: str, path: Path | str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", CODE, what, str(path)],
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        preexec_fn=_limited,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_load_recipe_refuses_a_device_a_pipe_and_a_huge_file(tmp_path: Path) -> None:
    said = _read("recipe", "/dev/zero")
    assert said.startswith("refused: /dev/zero: ") and "not a regular file" in said, said
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    said = _read("recipe", fifo)  # no writer ever comes: read_text() waited for ever
    assert said.startswith(f"refused: {fifo}: ") and "not a regular file" in said, said
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: nothing written but the size
    said = _read("recipe", huge)
    assert said.startswith(f"refused: {huge}: ") and "1,048,576-byte limit" in said, said
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    said = _read("recipe", binary)
    assert "not a YAML text file (not UTF-8 at byte 6)" in said, said


def test_a_checkpoint_config_that_is_a_pipe_or_huge_is_refused(tmp_path: Path) -> None:
    piped = tmp_path / "piped"
    piped.mkdir()
    os.mkfifo(piped / "config.json")
    said = _read("checkpoint", piped)
    assert said.startswith(f"refused: {piped / 'config.json'}: ") and "not a regular file" in said
    huge = tmp_path / "huge"
    huge.mkdir()
    with (huge / "config.json").open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)
    said = _read("checkpoint", huge)
    assert "1,048,576-byte limit" in said, said
