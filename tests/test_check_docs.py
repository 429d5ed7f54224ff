"""scripts/check_docs.py: broken links, anchors, shown commands, private-notes references."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_docs", REPO / "scripts" / "check_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_docs"] = module
    spec.loader.exec_module(module)
    return module


check_docs = _load_checker()

MAKEFILE = """\
PY := .venv/bin/python
OUT := build/out
.PHONY: setup demo test \\
\tlint
setup:
\ttouch x
demo: setup
\t$(PY) scripts/run.py
$(OUT): setup
\ttouch $@
build/%.o: src/%.c
\tcc -c $<
"""

README = """\
# Project

See [the guide](docs/guide.md), [its set-up](docs/guide.md#set-up),
[again](docs/guide.md#set-up-1), [this file](#usage), [the folder](docs/) and
[a ref][guide-ref]. External: [site](https://example.com/x#y), <mailto:a@b.c>.

## Usage

```bash
make demo   # creates .venv
make -j2 lint test VAR=1
make build/out build/kernel.o
PRENOISE_DEBUG=1 .venv/bin/prenoise doctor
prenoise stream-digest --stream x86 --seed 0 \\
    --count 1000 --dtype=float32
python -m prenoise --debug demo --seed 3
.venv/bin/python scripts/run.py --flag
env A=b python3 -X importtime scripts/run.py
HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/test_a.py::test_x -k "a or b" -q
pytest tests tests/test_a.py
torchrun --nproc-per-node 2 -m prenoise generate --recipe r.yaml
scripts/tool.sh && bash scripts/tool.sh | tee log.txt
pip install 'prenoise[serve]'; git status; curl -s http://localhost:8000/x
vllm serve <model dir> --omni
cd docs && ls guide.md
```

```console
$ prenoise compare a.pt b.pt --json r.json
equal: 3 fields
$ make setup
make: 'setup' is up to date.
```

```python
# not a shell block: make nothing
```

Inline code is no link: `[x](missing.md)`.

```text
[nor here](missing.md), make no-such-target
```

[guide-ref]: docs/guide.md#usage-notes
"""

GUIDE = """\
# Guide

## Set-up

## Set-up

## Usage notes

<a name="old-name"></a>
Back to [the project](../README.md#usage), [here](#old-name) and ![a figure](fig.png).
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _write(
        tmp_path,
        {
            "Makefile": MAKEFILE,
            "README.md": README,
            "docs/guide.md": GUIDE,
            "docs/fig.png": "",
            "scripts/run.py": "",
            "scripts/tool.sh": "",
            "tests/test_a.py": "",
            "benchmarks/bench.md": "# Bench\n\n[results](results/)\n",
            "benchmarks/results/a.json": "{}",
            "src/pkg/mod.py": "'''Facts: see docs/guide.md.'''\n",
        },
    )
    return tmp_path


def _problems(root: Path) -> list[str]:
    return check_docs.check(root)


def _add(root: Path, name: str, text: str) -> int:
    """Append `text` to `name`; returns the 1-based line its first line lands on."""
    path = root / name
    old = path.read_text() if path.exists() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(old + text)
    return old.count("\n") + 1


def test_clean_fixture_passes(repo: Path) -> None:
    assert _problems(repo) == []


def test_broken_file_link(repo: Path) -> None:
    line = _add(repo, "docs/guide.md", "\nSee [old notes](notes/old.md).\n") + 1
    assert _problems(repo) == [
        f"docs/guide.md:{line}: broken link 'notes/old.md': docs/notes/old.md does not exist"
    ]


def test_broken_reference_link(repo: Path) -> None:
    line = _add(repo, "benchmarks/bench.md", "\n[gone][g]\n\n[g]: ../nothing.md\n") + 3
    assert _problems(repo) == [
        f"benchmarks/bench.md:{line}: broken link '../nothing.md': nothing.md does not exist"
    ]


def test_broken_anchor(repo: Path) -> None:
    line = _add(repo, "README.md", "\nSee [set-up](docs/guide.md#setup) and [x](#usage-2).\n") + 1
    problems = _problems(repo)
    assert problems == [
        f"README.md:{line}: broken anchor 'docs/guide.md#setup': no heading #setup in "
        "docs/guide.md",
        f"README.md:{line}: broken anchor '#usage-2': no heading #usage-2 in this file",
    ]


def test_slugs_follow_github() -> None:
    assert (
        check_docs.slug("Set-up: `make test` (2 cores) & more!") == "set-up-make-test-2-cores--more"
    )
    assert check_docs.slug("snake_case ünïcode") == "snake_case-ünïcode"


def test_links_in_code_are_ignored(repo: Path) -> None:
    _add(repo, "docs/guide.md", "\n```\n[a](missing.md)\n```\n\n    [b](missing.md)\n\n`[c](x)`\n")
    assert _problems(repo) == []


def test_link_outside_the_repository(repo: Path) -> None:
    line = _add(repo, "README.md", "\n[up](../elsewhere)\n") + 1
    assert _problems(repo) == [
        f"README.md:{line}: link '../elsewhere' points outside the repository"
    ]


def _shell(root: Path, command: str, lang: str = "bash") -> tuple[int, list[str]]:
    line = _add(root, "docs/guide.md", f"\n```{lang}\n{command}\n```\n") + 2
    return line, _problems(root)


def test_unknown_make_target(repo: Path) -> None:
    line, problems = _shell(repo, "make setup no-such-target")
    assert problems == [
        f"docs/guide.md:{line}: make target 'no-such-target' is not in the Makefile"
    ]


def test_unknown_prenoise_subcommand(repo: Path) -> None:
    line, problems = _shell(repo, "$ .venv/bin/prenoise frobnicate --x 1\noutput", "console")
    assert len(problems) == 1
    assert problems[0].startswith(f"docs/guide.md:{line}: prenoise has no subcommand 'frobnicate'")
    assert "doctor" in problems[0]  # it lists the real ones


def test_unknown_option_of_known_subcommand(repo: Path) -> None:
    line, problems = _shell(repo, "cd . && A=1 python -m prenoise verify --recipe r.yaml \\\n"
                            "    --no-such-flag=3  # a comment --ignored")  # fmt: skip
    assert problems == [f"docs/guide.md:{line}: prenoise verify has no option --no-such-flag"]


def test_torchrun_prenoise_is_checked(repo: Path) -> None:
    line, problems = _shell(repo, "torchrun --standalone --nproc-per-node=2 -m prenoise gen")
    assert len(problems) == 1
    assert problems[0].startswith(f"docs/guide.md:{line}: prenoise has no subcommand 'gen'")


def test_missing_script(repo: Path) -> None:
    line, problems = _shell(repo, ".venv/bin/python scripts/gone.py --x\nbenchmarks/bench_x.py")
    assert problems == [
        f"docs/guide.md:{line}: script scripts/gone.py does not exist",
        f"docs/guide.md:{line + 1}: script benchmarks/bench_x.py does not exist",
    ]


def test_missing_pytest_path(repo: Path) -> None:
    line, problems = _shell(repo, "pytest -k x tests/test_gone.py::test_y")
    assert problems == [f"docs/guide.md:{line}: test path tests/test_gone.py does not exist"]


def test_paths_after_cd_are_relative_to_it(repo: Path) -> None:
    _, problems = _shell(repo, "cd scripts && python run.py\ncd /tmp && python gone.py")
    assert problems == []


def test_shared_notes_reference(repo: Path) -> None:
    up, notes = check_docs.PRIVATE_NOTES  # the folder's paths, not spelled here either
    assert (up, notes) == ("../" + "shared", "shared" + "/notes")
    _add(repo, "docs/guide.md", f"\nFrom {up}/notes/x.md.\n")
    line = _add(repo, "src/pkg/mod.py", f"# see {notes}/y\n")
    _add(repo, "docs/data.json", f'{{"src": "{up}"}}\n')
    problems = _problems(repo)
    assert f"src/pkg/mod.py:{line}: mentions '{notes}'" in "\n".join(problems)
    assert [p.split(":")[0] for p in problems] == [
        "docs/data.json",
        "docs/guide.md",
        "src/pkg/mod.py",
    ]
    assert all("private notes are not part of the project" in p for p in problems)


def test_main_prints_problems_and_exits_1(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_docs.main(["--root", str(repo)]) == 0
    assert capsys.readouterr().out == ""
    _add(repo, "README.md", "\n[x](gone.md)\n")
    assert check_docs.main(["--root", str(repo)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("README.md:") and "gone.md" in out[0]
