"""Hardening round 4 (issue 42), files: outputs that are not regular files, hostile recipes.

Each class is checked against the real CLI (`python -m prenoise` in a subprocess), at its root
(a symlink loop, which can neither hang nor eat memory, through the CLI's `main` in this process):

- HIGH 4: every atomic write renamed a temporary file onto its target after a check that refused
  only directories and unwritable paths, so `--json`/`--out` naming a named pipe or a device
  (also through a symlink: as root, `/dev/null` itself) replaced it with a regular file. Now the
  output check (`guards.usage.check_output_file`) and the writer (`guards.atomic.atomic_output`,
  before the temporary file and again before the rename) refuse a target that exists and is not
  a regular file: one line, exit 2, the target left as it was. A symlink loop is the same one
  line (it was "internal error", exit 70).
- HIGH 5: a ~700-byte recipe of nested aliases stood for 9^12 values that the depth check
  walked one by one (minutes, `generate` and `serve` alike), and `--recipe /dev/zero`, a named
  pipe or a 10 GB sparse file was read whole (or waited on for ever). Now `load_yaml` counts what
  the node graph expands to, each shared node once, before constructing anything, and the CLI
  refuses a `--recipe` that is not a regular file or is over 1 MiB from its `stat`, before it is
  opened.

The subprocesses run under an address-space limit (`RLIMIT_AS`), so code that regressed to
reading `/dev/zero` whole fails with a message, never eats the machine's memory; and a timeout
guards against a hang (no timing is asserted).
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 180
"""A run that takes longer is a hang: each of these ends in seconds (most of it imports)."""
ADDRESS_SPACE = 3 * 2**30
"""Enough for the CLI to start and refuse; a regression that reads `/dev/zero` whole dies here."""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m prenoise ARGS` in `cwd`, one-line messages kept on one line."""
    env = {k: v for k, v in os.environ.items() if k not in ("PRENOISE_DEBUG",)}
    env.update(COLUMNS="300", OMP_WAIT_POLICY="PASSIVE", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "prenoise", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        preexec_fn=_limited,
        check=False,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The run's output, which must be a single `error: …` line and exit status 2."""
    out = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, out
    assert len(out.splitlines()) == 1, out
    assert out.startswith("error: ") and "internal error" not in out, out
    return out


def _inputs(tmp_path: Path) -> tuple[str, str]:
    torch.save({"x": torch.arange(4.0)}, tmp_path / "a.pt")
    torch.save({"x": torch.arange(4.0)}, tmp_path / "b.pt")
    return "a.pt", "b.pt"


def _no_partials(directory: Path) -> None:
    left = [p.name for p in directory.iterdir() if ".partial" in p.name or ".tmp" in p.name]
    assert left == [], left


# --- HIGH 4: an output path that is not a regular file is refused, never replaced -------------


@pytest.mark.parametrize("through", ["fifo", "symlink to a fifo"])
def test_compare_json_onto_a_named_pipe_is_refused_and_the_pipe_kept(
    tmp_path: Path, through: str
) -> None:
    a, b = _inputs(tmp_path)
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    target = fifo
    if through == "symlink to a fifo":
        target = tmp_path / "report.json"
        target.symlink_to(fifo)
    out = _one_error_line(run_cli("compare", a, b, "--json", target.name, cwd=tmp_path))
    assert f"--json {target.name}: is a named pipe, not a regular file" in out
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the named pipe was replaced"
    _no_partials(tmp_path)


def test_compare_json_through_a_symlink_to_dev_null_is_refused(tmp_path: Path) -> None:
    """The issue's case, made safe: the link is in tmp, and the CLI runs only once the checks it
    relies on refuse the link in process (on code that does not, this test fails before
    anything could write at `/dev/null`)."""
    from prenoise.guards import atomic, usage

    if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        pytest.skip("/dev/null is not a character device here")
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    with pytest.raises(usage.UsageError, match="is a character device, not a regular file"):
        usage.check_output_file(link, "--json")

    class BodyRan(Exception):
        pass

    refused = pytest.raises(OSError, match="is a character device, not a regular file")
    with refused, atomic.atomic_output(link, what="--json"):
        raise BodyRan  # never reached where the target is refused; nothing renamed if it is
    a, b = _inputs(tmp_path)
    out = _one_error_line(run_cli("compare", a, b, "--json", link.name, cwd=tmp_path))
    assert "--json null.json: is a character device, not a regular file" in out
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    _no_partials(tmp_path)


def test_generate_out_onto_a_named_pipe_is_refused_before_any_work(tmp_path: Path) -> None:
    fifo = tmp_path / "out.mp4"
    os.mkfifo(fifo)
    out = _one_error_line(run_cli("generate", "--recipe", "demo", "--out", str(fifo), cwd=tmp_path))
    assert "is a named pipe, not a regular file" in out
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_json_naming_a_symlink_loop_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process (the CLI's `main`, exit status and its one line): a loop can be neither
    read for ever nor written through, so there is no hang or memory to guard against."""
    from cli_refusals import refused

    a, b = _inputs(tmp_path)
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRENOISE_DEBUG", raising=False)
    out = refused(capsys, ["compare", a, b, "--json", "loop1"])
    assert out.startswith("error: ") and "internal error" not in out, out
    assert "--json loop1: is a loop of symbolic links" in out
    # an input that is a loop, with a report to write, is its own one line too
    out = refused(capsys, ["compare", "loop1", b, "--json", "r.json"])
    assert out.startswith("error: ") and "internal error" not in out, out
    assert "loop1: cannot be read (Too many levels of symbolic links)" in out
    assert not (tmp_path / "r.json").exists()


def test_the_writer_itself_never_replaces_a_special_file(tmp_path: Path) -> None:
    """The root, for every writer (`--json`, `--out`, traces, checkpoints): refused before the
    temporary file is made, and again just before the rename (a pipe made meanwhile)."""
    from prenoise.guards.atomic import OutputTargetError, OutputWriteError, write_atomic

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputTargetError, match=r"pipe: is a named pipe, not a regular file"):
        write_atomic(fifo, "x", what="--json")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)

    late = tmp_path / "late.json"

    def make_a_pipe_there(tmp: Path) -> None:
        tmp.write_text("{}")
        os.mkfifo(late)

    with pytest.raises(OutputWriteError, match="is a named pipe"):
        write_atomic(late, make_a_pipe_there, what="--json")
    assert stat.S_ISFIFO(os.stat(late).st_mode)
    _no_partials(tmp_path)
    regular = tmp_path / "r.json"
    write_atomic(regular, "old")
    write_atomic(regular, "new")  # a regular file is still replaced, whole
    assert regular.read_text() == "new"


# --- HIGH 5: a hostile recipe is refused in bounded time and memory ---------------------------


def _alias_bomb(levels: int = 12, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_recipe_is_refused_by_the_cli(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_bomb())
    assert bomb.stat().st_size < 1000  # 9^13 values once expanded
    out = _one_error_line(run_cli("generate", "--recipe", str(bomb), cwd=tmp_path))
    assert "YAML expands to more than 100,000 values" in out


def test_the_alias_bomb_is_refused_from_its_node_graph() -> None:
    """The count is made on the composed graph, each shared node once: linear in the text."""
    import yaml

    from prenoise.guards.documents import MAX_NODES, DocumentError, load_yaml

    text = _alias_bomb()
    nodes: set[int] = set()
    pending = [yaml.compose(text)]
    while pending:
        node = pending.pop()
        if id(node) in nodes:
            continue
        nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            pending.extend(part for pair in node.value for part in pair)
    assert len(nodes) < 200  # what the check visits; the expansion is 9^13
    with pytest.raises(DocumentError, match=f"expands to more than {MAX_NODES:,} values"):
        load_yaml(text)
    with pytest.raises(DocumentError, match="an alias inside what it names"):
        load_yaml("a: &a [1, *a]\n")
    # aliases within the budget load as before (merge keys included)
    assert load_yaml("a: &x {k: 1}\nb: *x\nc: {<<: *x, j: 2}\n") == {
        "a": {"k": 1},
        "b": {"k": 1},
        "c": {"k": 1, "j": 2},
    }


@pytest.mark.parametrize("kind", ["/dev/zero", "named pipe", "10 GB sparse file"])
def test_a_recipe_that_is_no_small_regular_file_is_refused_unread(
    tmp_path: Path, kind: str
) -> None:
    if kind == "/dev/zero":
        recipe, words = "/dev/zero", "is a character device, not a regular file"
    elif kind == "named pipe":  # reading it waited for a writer for ever
        recipe, words = str(tmp_path / "recipe.yaml"), "is a named pipe, not a regular file"
        os.mkfifo(recipe)
    else:
        recipe = str(tmp_path / "big.yaml")
        with open(recipe, "wb") as f:
            f.truncate(10 * 2**30)  # sparse: nothing is written
        words = "is 10,737,418,240 bytes, over the 1,048,576-byte limit"
    for command in ("generate", "serve") if kind == "/dev/zero" else ("generate",):
        out = _one_error_line(run_cli(command, "--recipe", recipe, cwd=tmp_path))
        assert f"--recipe {recipe}: {words}" in out


def test_read_document_is_bounded_and_refuses_special_files(tmp_path: Path) -> None:
    """The reader for recipe and config loaders: a FIFO does not block, nothing is read past the
    cap, a sparse file is refused by its size."""
    from prenoise.guards.documents import DocumentError, read_document

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(DocumentError, match="is a named pipe"):
        read_document(fifo)
    with pytest.raises(DocumentError, match="is a character device"):
        read_document("/dev/zero")
    sparse = tmp_path / "sparse.yaml"
    with open(sparse, "wb") as f:
        f.truncate(2**40)
    with pytest.raises(DocumentError, match="over the 1,048,576-byte limit"):
        read_document(sparse)
    small = tmp_path / "ok.yaml"
    small.write_text("name: x\n")
    assert read_document(small) == "name: x\n"
    with pytest.raises(DocumentError, match="over the 4-byte limit"):
        read_document(small, max_bytes=4)
