"""diffusers' main branch as users install it: the reviewed code under a version never reviewed.

A scratch copy of the installed diffusers (the newest reviewed release, 0.42.1) with
`__version__ = "0.43.0.dev0"` is put first on `PYTHONPATH` of a subprocess
(dev_release_run.py), which enables tiny pipelines and calls them once each:

- the copy as is: every class is overlapped (support is decided by the source digests, not the
  version string), and each output and the generator's final state equal, bit for bit, the plain
  call's on the installed 0.42.1 (computed here, in this process);
- the same copy with `WanPipeline.prepare_latents` (and MiniMax-H3's
  `MiniMaxH3PrepareLatentsStep.__call__`) edited by one statement that changes nothing:
  `WanPipeline` runs plain, with one warning naming the changed function, every other class
  stays overlapped and bitwise, and the modular plan's verdict names the H3 function;
- the copy as an installed distribution (its dist-info says 0.43.0.dev0) ahead of the venv's:
  `pip install --dry-run --no-index -e .[diffusers]` installs prenoise alone (the extra moves no
  diffusers); the control, the extra's former cap `<=0.42.1`, does not resolve without moving it.

Run on the newest reviewed release only (the 0.40.0 venv would repeat the same proof).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("diffusers")

import diffusers
import torch
from diffusers_tiny import assert_bitwise_equal, call_kwargs, output_tensors

from prenoise.integrations.diffusers.digests import NEXT_STEP
from prenoise.integrations.diffusers.reviewed import RELEASES

pytestmark = pytest.mark.skipif(
    diffusers.__version__ != RELEASES[-1],
    reason=f"the scratch copy is made of diffusers {RELEASES[-1]}, not {diffusers.__version__}",
)

REPO = Path(__file__).resolve().parents[2]
DEV = "0.43.0.dev0"
NAMES = ("wan21", "flux", "ltx_i2v", "cogvideox")  # cogvideox: per-step draws (CogVideoX DPM)
SEED = 7
WAN = "pipelines/wan/pipeline_wan.py"
H3 = "modular_pipelines/minimax_h3/before_denoise.py"


def _insert_statement(path: Path, qualname: str) -> None:
    """Insert `_prenoise_edit = None` before the last statement of function `qualname` (a new
    statement that changes no value: the function's digest changes, its behaviour does not)."""
    source = path.read_text()
    node: Any = ast.parse(source)
    for part in qualname.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == part)
    last = node.body[-1]
    lines = source.splitlines(keepends=True)
    lines.insert(last.lineno - 1, " " * last.col_offset + "_prenoise_edit = None\n")
    path.write_text("".join(lines))


def _scratch_copy(site: Path, edits: tuple[tuple[str, str], ...] = ()) -> Path:
    """The installed diffusers package (with its bytecode: unchanged files import as fast) and
    its dist-info, copied into `site` as 0.43.0.dev0, with `edits` applied."""
    package = Path(diffusers.__file__).parent
    shutil.copytree(package, site / "diffusers")
    init = site / "diffusers" / "__init__.py"
    old = f'__version__ = "{diffusers.__version__}"'
    assert old in init.read_text()
    init.write_text(init.read_text().replace(old, f'__version__ = "{DEV}"', 1))
    dist = package.parent / f"diffusers-{diffusers.__version__}.dist-info"
    meta = site / f"diffusers-{DEV}.dist-info"
    meta.mkdir()
    text = (dist / "METADATA").read_text()
    (meta / "METADATA").write_text(
        text.replace(f"Version: {diffusers.__version__}\n", f"Version: {DEV}\n", 1)
    )
    (meta / "INSTALLER").write_text("pip\n")
    for relative, qualname in edits:
        _insert_statement(site / "diffusers" / relative, qualname)
    return site


def _run(site: Path, out: Path) -> dict[str, Any]:
    out.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(site), str(REPO / "tests"), str(REPO / "tests" / "integrations")]
        ),
        "HF_HUB_OFFLINE": "1",
    }
    script = Path(__file__).with_name("dev_release_run.py")
    done = subprocess.run(
        [sys.executable, str(script), str(out), *NAMES],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    assert result["version"] == DEV and result["file"] == str(site / "diffusers" / "__init__.py")
    return result


@pytest.fixture(scope="module")
def dev_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unedited 0.43.0.dev0 copy (61 MB with its bytecode), shared by the tests using it."""
    return _scratch_copy(tmp_path_factory.mktemp("dev") / "site")


@pytest.fixture(scope="module")
def plain(tiny: Any) -> dict[str, tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Each pipeline's plain call on the installed release: output tensors, generator state."""
    found = {}
    for name in NAMES:
        generator = torch.Generator("cpu").manual_seed(SEED)
        output = tiny(name)(generator=generator, **call_kwargs(name))
        found[name] = (output_tensors(output), generator.get_state())
    return found


def _assert_served_as_the_release(
    result: dict[str, Any], out: Path, plain: dict[str, Any], names: tuple[str, ...]
) -> None:
    for name in names:
        tensors, state = plain[name]
        saved = torch.load(out / f"{name}.pt")
        assert saved.keys() == tensors.keys(), name
        for key, tensor in tensors.items():
            assert_bitwise_equal(saved[key], tensor)
        assert torch.equal(torch.tensor(result["reports"][name]["generator_state"]), state)


def test_a_dev_version_with_the_reviewed_code_is_served_as_the_release(
    tmp_path: Path, dev_site: Path, plain: dict[str, Any]
) -> None:
    result = _run(dev_site, tmp_path / "out")
    for name in NAMES:
        report = result["reports"][name]
        assert report["overlapped"] and report["reason"] is None, (name, report)
        assert report["served"] == len(report["planned"]) >= 1, (name, report)
    assert result["reports"]["cogvideox"]["step_served"] >= 1  # the per-step look-ahead too
    assert result["warnings"] == [] and result["modular_h3"] is None
    _assert_served_as_the_release(result, tmp_path / "out", plain, NAMES)


def test_an_edited_prepare_latents_runs_that_class_plain_and_names_it(
    tmp_path: Path, plain: dict[str, Any]
) -> None:
    edits = ((WAN, "WanPipeline.prepare_latents"), (H3, "MiniMaxH3PrepareLatentsStep.__call__"))
    result = _run(_scratch_copy(tmp_path / "site", edits), tmp_path / "out")
    wan = result["reports"]["wan21"]
    assert not wan["overlapped"] and wan["served"] == 0
    assert wan["reason"].startswith(
        "diffusers code differs from the reviewed code: WanPipeline.prepare_latents "
        "(diffusers.pipelines.wan.pipeline_wan) changed: digest "
    )
    assert wan["reason"].endswith(", reviewed b3e55fffe3f4 (0.40.0/0.41.0/0.42.0/0.42.1)")
    assert result["warnings"] == [
        f"prenoise: WanPipeline: noise not overlapped, plain call ({wan['reason']}); the output "
        "is the plain call's, bitwise; prenoise's plans run on the code of diffusers 0.40.0, "
        "0.41.0, 0.42.0, 0.42.1: install one of them, or report the changed function to prenoise"
    ]
    for name in NAMES[1:]:
        assert result["reports"][name]["overlapped"], name
    assert result["modular_h3"].startswith(
        "diffusers code differs from the reviewed code: MiniMaxH3PrepareLatentsStep.__call__ "
        "(diffusers.modular_pipelines.minimax_h3.before_denoise) changed: digest "
    )
    # `prenoise doctor` names both changed functions, with the next step
    doctor = result["doctor"]
    changed = wan["reason"].removeprefix("diffusers code differs from the reviewed code: ")
    assert f"WanPipeline: {changed}" in doctor["diffusers classes planned"]
    assert doctor["diffusers classes planned"].endswith(f"; {NEXT_STEP}")
    assert "MiniMaxH3PrepareLatentsStep.__call__ (" in doctor["diffusers modular plans"]
    assert f"; {NEXT_STEP}" in doctor["diffusers modular plans"]
    _assert_served_as_the_release(result, tmp_path / "out", plain, NAMES)


def _dry_run(site: Path, project: Path, report: Path) -> subprocess.CompletedProcess[str]:
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index"]
    options = ["--no-build-isolation", "--disable-pip-version-check", "-q", "--report", str(report)]
    env = {**os.environ, "PYTHONPATH": str(site)}  # pip sees the dev distribution first
    return subprocess.run(
        [*pip, *options, "-e", f"{project}[diffusers]", "torch==2.13.0"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_installing_the_extra_beside_a_dev_diffusers_moves_nothing(
    tmp_path: Path, dev_site: Path
) -> None:
    site = dev_site
    seen = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('diffusers'))"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert seen.stdout.strip() == DEV
    done = _dry_run(site, REPO, tmp_path / "report.json")
    assert done.returncode == 0, done.stdout + done.stderr
    install = json.loads((tmp_path / "report.json").read_text())["install"]
    assert [item["metadata"]["name"] for item in install] == ["prenoise"]
    # the control: the extra's former cap would have to replace the dev diffusers, which
    # `--no-index` cannot: the resolution fails instead of keeping it
    capped = tmp_path / "capped"
    capped.mkdir()
    (capped / "pyproject.toml").write_text(
        '[project]\nname = "capped"\nversion = "0"\n'
        '[project.optional-dependencies]\ndiffusers = ["diffusers>=0.40.0,<=0.42.1"]\n'
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        "[tool.setuptools]\npy-modules = []\n"
    )
    control = _dry_run(site, capped, tmp_path / "control.json")
    assert control.returncode != 0
    assert "No matching distribution found for diffusers<=0.42.1" in control.stderr
