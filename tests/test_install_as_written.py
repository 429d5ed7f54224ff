"""Install instructions and the commands errors suggest work as written (issue 34, item 4).

prenoise is not on a package index: every documented `pip install prenoise…` failed with "No
matching distribution found", and a missing extra's error suggested the same failing command.
The docs now install from a clone (or a wheel built from one), and the errors name the source
this installation came from, with its interpreter; both are run here as pip dry runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from prenoise.guards.extras import install_command, install_command_from
from waits import READY_CEILING_S

REPO = Path(__file__).resolve().parents[1]
PY = "/env/bin/python"


def _dry_run(command: list[str]) -> str:
    """Run a `… -m pip install …` command as a dry run: nothing downloaded, nothing built."""
    at = command.index("install") + 1
    extra = ["--dry-run", "--no-deps", "--no-build-isolation", "--no-index"]
    proc = subprocess.run(
        [*command[:at], *extra, *command[at:]],
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"url": "file:///SRC", "dir_info": {"editable": True}}, "-e '/SRC[ref2va]'"),
        ({"url": "file:///SRC", "dir_info": {}}, "'/SRC[ref2va]'"),
        ({"url": "file:///SRC/with%20space", "dir_info": {}}, "'/SRC/with space[ref2va]'"),
        ({"url": "file:///WHEEL", "archive_info": {}}, "'/WHEEL[ref2va]'"),
        ({"url": "file:///gone.whl", "archive_info": {}}, "'prenoise[ref2va]'"),
        ({"url": "https://example.org/p.whl", "archive_info": {}}, "'prenoise[ref2va]'"),
        (None, "'prenoise[ref2va]'"),  # installed from an index
    ],
)
def test_the_command_names_where_this_installation_came_from(
    tmp_path: Path, record: dict | None, expected: str
) -> None:
    (tmp_path / "SRC" / "with space").mkdir(parents=True)
    (tmp_path / "WHEEL").write_text("")
    text = None
    if record is not None:
        text = json.dumps(record).replace("file:///", f"file://{tmp_path}/")
    expected = expected.replace("/SRC", f"{tmp_path}/SRC").replace("/WHEEL", f"{tmp_path}/WHEEL")
    assert install_command_from("ref2va", text, PY) == f"{PY} -m pip install {expected}"


def test_a_garbled_record_falls_back_to_the_index_form() -> None:
    for text in ("not json", "{}", '{"url": 3}', "[]"):
        assert install_command_from("serve", text, PY) == f"{PY} -m pip install 'prenoise[serve]'"


def test_the_suggested_command_here_works_as_written() -> None:
    """This environment's own hint (`make test`: an editable install of the clone), dry-run."""
    command = install_command("ref2va")
    assert command.startswith(f"{shlex.quote(sys.executable)} -m pip install ")
    out = _dry_run(shlex.split(command))
    assert "Would install prenoise-" in out


def _documented_install_lines(page: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)
    return [
        line.split("#", 1)[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.lstrip().startswith("pip install")
    ]


@pytest.mark.parametrize("page", ["README.md", "docs/library.md"])
def test_no_documented_install_line_needs_a_package_index(page: str) -> None:
    lines = _documented_install_lines(REPO / page)
    assert lines
    index_only = [line for line in lines if re.search(r"install (-e )?['\"]?prenoise\b", line)]
    assert index_only == []


@pytest.mark.slow
def test_the_documented_lines_work_as_written(tmp_path: Path) -> None:
    """README's lines with PRENOISE set to this clone, each run by bash as a pip dry run."""
    lines = _documented_install_lines(REPO / "README.md")
    assert 'pip install "$PRENOISE[ref2va]" torch==2.13.0' in lines
    for line in lines:
        words = line.replace("torch==2.13.0", "").split()  # torch: already here, not the point
        script = f'PRENOISE={shlex.quote(str(REPO))}; printf "%s\\n" {" ".join(words[2:])}'
        expanded = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, check=True
        ).stdout.split()
        out = _dry_run([sys.executable, "-m", "pip", "install", *expanded])
        assert "Would install prenoise-" in out, line
