"""Output paths are proven writable before any work (issue 34, item 9).

`os.access` says yes to root everywhere, `/proc` included, so `--json /proc/x.json` used to run
the whole job and then exit 70. Every output option is now probed with a real (removed) write
before the recipe's media or models are touched: exit 2, one line. A missing parent directory
is created when the result is written, and the command says so beside what it wrote.
"""

from __future__ import annotations

import errno
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from cli_refusals import refused
from prenoise.cli.commands import main
from prenoise.guards.usage import UsageError, check_output_dir, check_output_file
from prenoise.ref2va import cli_options

TINY = Path(__file__).with_name("tiny-recipe.yaml")
PROC = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc/self").is_dir(),
    reason="needs Linux's /proc",
)


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny recipe in a fresh directory; loading models fails the test (work started)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")

    def no_models(*_args: object) -> None:
        raise AssertionError("models were loaded: the output check came after the work")

    monkeypatch.setattr(cli_options, "load_models", no_models)
    return tmp_path


@PROC
@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["verify", "--json", "/proc/x.json"], "--json /proc/x.json"),
        (["generate", "--out", "/proc/x.mp4"], "--out /proc/x.mp4"),
        (["bench", "--json", "/proc/x.json"], "--json /proc/x.json"),
        (["bench", "--trace-dir", "/proc/traces"], "--trace-dir /proc/traces"),
        (["verify", "--json", "/proc/new/x.json"], "--json /proc/new/x.json"),
    ],
)
def test_proc_outputs_are_refused_before_any_work(
    workdir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    command, *rest = argv
    line = refused(capsys, [command, "--recipe", "tiny.yaml", *rest])
    assert line == (
        f"error: {option}: directory /proc is not writable (no file can be created there)"
    )
    assert not (workdir / "tiny-reference.mp4").exists()  # not even the reference was made


@PROC
def test_compare_json_in_proc_is_refused_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.save(torch.ones(2), tmp_path / "a.pt")

    def no_load(*_args: object) -> None:
        raise AssertionError("the inputs were loaded before the --json check")

    monkeypatch.setattr("prenoise.verify.load_saved", no_load)
    a = str(tmp_path / "a.pt")
    line = refused(capsys, ["compare", a, a, "--json", "/proc/x.json"])
    assert line.startswith("error: --json /proc/x.json: directory /proc is not writable")


@PROC
def test_serve_output_dir_in_proc_is_refused_before_models(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("fastapi")

    def no_app(*_args: object) -> None:
        raise AssertionError("the service was built before the --output-dir check")

    monkeypatch.setattr("prenoise.serve.create_app", no_app)
    line = refused(capsys, ["serve", "--recipe", "tiny.yaml", "--output-dir", "/proc/out"])
    assert line == (
        "error: --output-dir /proc/out: directory /proc is not writable "
        "(no file can be created there)"
    )


def test_a_file_as_parent_is_refused_before_any_work(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "plain").write_text("")
    line = refused(capsys, ["verify", "--recipe", "tiny.yaml", "--json", "plain/x.json"])
    assert line == "error: --json plain/x.json: plain is a file, not a directory"
    line = refused(capsys, ["generate", "--recipe", "tiny.yaml", "--out", "plain/deeper/x.mp4"])
    assert line == "error: --out plain/deeper/x.mp4: plain is a file, not a directory"


def test_a_refused_run_creates_no_missing_parent(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(
        capsys, ["verify", "--recipe", "tiny.yaml", "--json", "new/x.json", "--seed", "-1"]
    )
    assert "seed must be >= 0" in line
    assert not (workdir / "new").exists()


def test_verify_creates_a_missing_parent_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    capsys.readouterr()
    assert main(["verify", "--recipe", "tiny.yaml", "--json", "new/deeper/x.json"]) == 0
    out = capsys.readouterr().out
    assert "created the directory new/deeper (--json)" in out.splitlines()
    assert '"equal": true' in (tmp_path / "new" / "deeper" / "x.json").read_text()
    capsys.readouterr()
    assert main(["verify", "--recipe", "tiny.yaml", "--json", "new/deeper/y.json"]) == 0
    assert "created the directory" not in capsys.readouterr().out  # it existed this time


def test_compare_creates_a_missing_json_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save({"x": torch.ones(2)}, tmp_path / "a.pt")
    a = str(tmp_path / "a.pt")
    report = tmp_path / "reports" / "today" / "cmp.json"
    capsys.readouterr()
    assert main(["compare", a, a, "--json", str(report)]) == 0  # was 70: the parent was missing
    out = " ".join(capsys.readouterr().out.split())
    assert f"created the directory {report.parent} (--json)" in out
    assert '"equal": true' in report.read_text()


def test_a_write_the_file_system_refuses_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only mount, as root: `os.access` says yes, the probe's write says no."""

    def read_only(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(UsageError) as refusal:
        check_output_file(tmp_path / "x.json", "--json")
    assert str(refusal.value) == (
        f"--json {tmp_path}/x.json: directory {tmp_path} is not writable (Read-only file system)"
    )
    with pytest.raises(UsageError, match="Read-only file system"):
        check_output_dir(tmp_path / "a" / "b", "--trace-dir")
    with pytest.raises(UsageError, match="Read-only file system"):
        check_output_file(tmp_path / "new" / "x.json", "--json")


def test_the_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    check_output_file(tmp_path / "x.json", "--json")
    check_output_file(tmp_path / "a" / "b" / "x.json", "--json")
    check_output_dir(tmp_path / "traces", "--trace-dir")
    assert list(tmp_path.iterdir()) == []
