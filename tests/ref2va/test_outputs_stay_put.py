"""No output may be an input, and every output stays where the user put it (issue #21).

`generate --reference x.mp4 --out x.mp4` overwrote the reference, and a recipe `name` of
`../../../x` wrote outside `output_dir`. Both are refused up front (exit 2, one line), before
any model work, and the inputs keep their bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from cli_refusals import refused

TINY = Path(__file__).with_name("tiny-recipe.yaml")


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    (tmp_path / "ref.png").write_bytes(b"not really a png, and never read")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["generate", "--recipe", "tiny.yaml", "--reference", "ref.png", "--out", "ref.png"],
            "error: --out ref.png: is the input reference ref.png; writing it would overwrite "
            "the input",
        ),
        (
            ["generate", "--recipe", "tiny.yaml", "--reference", "ref.png",
             "--out", "./x/../ref.png"],
            "error: --out x/../ref.png: is the input reference ref.png",
        ),
        (
            ["generate", "--recipe", "tiny.yaml", "--out", "tiny.yaml"],
            "error: --out tiny.yaml: is the input --recipe tiny.yaml",
        ),
        (
            ["generate", "--recipe", "tiny.yaml", "--reference", "ref-1.png", "--outputs", "2",
             "--out", "ref.png"],
            "error: --out ref-1.png: is the input reference ref-1.png",
        ),
        (
            ["verify", "--recipe", "tiny.yaml", "--json", "tiny.yaml"],
            "error: --json tiny.yaml: is the input --recipe tiny.yaml",
        ),
        (
            ["generate", "--recipe", "tiny.yaml", "--reference", "link.png", "--out", "ref.png"],
            "error: --out ref.png: is the input reference link.png",
        ),
    ],
)  # fmt: skip
def test_an_output_that_is_an_input_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (workdir / "link.png").symlink_to("ref.png")
    (workdir / "ref-1.png").write_bytes(b"second")
    before = {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()}
    assert refused(capsys, argv).startswith(message)
    assert {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()} == before


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../../../x", "'../../../x' is not a plain file name"),
        ("a/b", "'a/b' is not a plain file name"),
        ("..", "'..' is not a plain file name"),
        ("", "'' is not a plain file name"),
        ("nul\0name", "'nul\\x00name' is not a plain file name"),
        ("n" * 250, "250 bytes is too long: NAME-9999.mp4 must fit in a 255-byte file name"),
    ],
)
def test_a_recipe_name_that_would_leave_output_dir_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    data = yaml.safe_load((workdir / "tiny.yaml").read_text())
    (workdir / "named.yaml").write_text(yaml.safe_dump({**data, "name": name}))
    line = refused(capsys, ["generate", "--recipe", "named.yaml"])
    assert line.startswith("error: named.yaml: name: ") and message in line, line
    assert sorted(p.name for p in workdir.iterdir()) == ["named.yaml", "ref.png", "tiny.yaml"]
