"""Every entry point reads a recipe (and a checkpoint's config.json) bounded (issue 42, class 5).

The CLI's `--recipe` was refused by `stat` when it named a device, a named pipe or a huge file,
but the library's `load_recipe` (serve's recipe, the pipeline's users) and the checkpoint's
`config.json` still used `Path.read_text()`: `/dev/zero` was read until memory ran out and a
named pipe waited for a writer for ever. Both now read through
`guards.documents.read_document` (a regular file of at most 1 MiB, in bounded chunks).

Every case runs in one subprocess under an address-space limit (one interpreter for all of them:
importing torch is most of a case's cost), so code that regressed to reading `/dev/zero` whole
fails with a message instead of eating the machine's memory, and a hang guard ends one that
waits on a pipe (no timing is asserted). Each case's answer is its own line, checked by the test
that names the case.
"""

from __future__ import annotations

import json
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
import json, sys
from prenoise.ref2va.checkpoint import CheckpointError, read_checkpoint_config
from prenoise.ref2va.config import RecipeError, load_recipe
args = sys.argv[1:]
for what, path in zip(args[::2], args[1::2]):
    try:
        load_recipe(path) if what == "recipe" else read_checkpoint_config(path)
        said = "read"
    except (RecipeError, CheckpointError) as error:
        said = f"refused: {error}"
    print(json.dumps([what, path, said]), flush=True)
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _read_all(cases: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """What each (what, path) case said, all read in one limited interpreter, in order."""
    proc = subprocess.run(
        [sys.executable, "-c", CODE, *(part for case in cases for part in case)],
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        preexec_fn=_limited,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(what, path) for what, path, _ in lines] == cases, proc.stdout
    return {(what, path): said for what, path, said in lines}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, str], str]]:
    """Every case's files, made once, and what reading each said."""
    tmp = tmp_path_factory.mktemp("reads")
    fifo = tmp / "recipe.yaml"
    os.mkfifo(fifo)  # no writer ever comes: read_text() waited for ever
    with (tmp / "huge.yaml").open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: nothing written but the size
    (tmp / "binary.yaml").write_bytes(b"name: \xff\xfe\n")
    (tmp / "piped").mkdir()
    os.mkfifo(tmp / "piped" / "config.json")
    (tmp / "huge").mkdir()
    with (tmp / "huge" / "config.json").open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)
    todo = [("recipe", "/dev/zero")] if Path("/dev/zero").exists() else []
    todo += [("recipe", str(tmp / name)) for name in ("recipe.yaml", "huge.yaml", "binary.yaml")]
    todo += [("checkpoint", str(tmp / name)) for name in ("piped", "huge")]
    return tmp, _read_all(todo)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_load_recipe_refuses_a_device_a_pipe_and_a_huge_file(
    cases: tuple[Path, dict[tuple[str, str], str]],
) -> None:
    tmp, said_by = cases
    said = said_by["recipe", "/dev/zero"]
    assert said.startswith("refused: /dev/zero: ") and "not a regular file" in said, said
    fifo = tmp / "recipe.yaml"
    said = said_by["recipe", str(fifo)]
    assert said.startswith(f"refused: {fifo}: ") and "not a regular file" in said, said
    huge = tmp / "huge.yaml"
    said = said_by["recipe", str(huge)]
    assert said.startswith(f"refused: {huge}: ") and "1,048,576-byte limit" in said, said
    said = said_by["recipe", str(tmp / "binary.yaml")]
    assert "not a YAML text file (not UTF-8 at byte 6)" in said, said


def test_a_checkpoint_config_that_is_a_pipe_or_huge_is_refused(
    cases: tuple[Path, dict[tuple[str, str], str]],
) -> None:
    tmp, said_by = cases
    piped = tmp / "piped"
    said = said_by["checkpoint", str(piped)]
    assert said.startswith(f"refused: {piped / 'config.json'}: ") and "not a regular file" in said
    said = said_by["checkpoint", str(tmp / "huge")]
    assert "1,048,576-byte limit" in said, said
