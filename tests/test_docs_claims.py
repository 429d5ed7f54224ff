"""What the docs claim, checked against the code (issue 41's corrected claims).

Each test keeps one corrected sentence of README.md, docs/ or a comment true: the errors name the
option that caused them, `verify --pairs 0` is the default and `bench --pairs 0` is refused, the
`bench` extra is needed by `--trace-dir` only, the README names every modular plan, the modular
plans' reviewed releases, the labels of `vllm-omni-verify --upstream-overlap`, the bench PNG's
title and legend, `make aarch64-stream-digest` refusing a dtype, `scripts/gpu_check.sh` finding
its Python, and the Python snippets `scripts/check_docs.py` runs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli_refusals import refused
from prenoise.cli.parser import build_parser

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import check_docs  # noqa: E402

# -- errors name the option, not the recipe file -------------------------------------------------


@pytest.mark.parametrize(
    ("options", "start"),
    [
        (["--seed", "-1"], "error: --seed -1: seed must be >= 0"),
        (["--seed", str(2**64)], f"error: --seed {2**64}: seed {2**64} exceeds"),
        (["--steps", "0", "--seed", "-1"], "error: --steps 0: steps:"),
    ],
)
def test_an_option_out_of_range_is_named(
    options: list[str], start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, ["generate", "--recipe", "ref2va-demo", *options])
    assert line.startswith(start), line
    assert "ref2va-demo.yaml" not in line


def test_a_device_this_machine_lacks_is_named_as_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: --device cuda is valid here")
    line = refused(capsys, ["generate", "--recipe", "ref2va-demo", "--device", "cuda"])
    assert line.startswith("error: --device cuda: device 'cuda': no cuda device"), line
    assert "ref2va-demo.yaml" not in line


def test_the_real_console_script_names_the_option(tmp_path: Path) -> None:
    """The installed `prenoise` command, as a user runs it: one line, exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "prenoise", "generate", "--recipe", "ref2va-demo", "--seed", "-1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
        check=False,
    )
    out = (done.stdout + done.stderr).strip()
    assert done.returncode == 2, out
    assert out.splitlines() == ["error: --seed -1: seed must be >= 0 (torch aliases seed s < 0 "
                                "to 2^64 + s), got -1"]  # fmt: skip


def test_the_files_own_error_still_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nprompt: a fox\nshort_edge: 64\nsteps: 0\n")
    line = refused(capsys, ["generate", "--recipe", str(recipe), "--seed", "3"])
    assert line.startswith(f"error: {recipe}: steps:"), line


def test_an_option_still_replaces_a_bad_value_of_the_file(tmp_path: Path) -> None:
    from prenoise.ref2va.cli_options import recipe_from_args

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nprompt: a fox\nshort_edge: 64\nsteps: 0\n")
    args = build_parser().parse_args(["generate", "--recipe", str(recipe), "--steps", "3"])
    assert recipe_from_args(args).steps == 3


# -- verify --pairs 0 runs (the default), bench --pairs 0 is refused -------------------------------


def test_verify_pairs_zero_is_the_default_and_documented_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    assert parser.parse_args(["verify", "--recipe", "ref2va-demo"]).pairs == 0
    assert parser.parse_args(["verify", "--recipe", "ref2va-demo", "--pairs", "0"]).pairs == 0
    for argv in (["verify", "--pairs", "-1"], ["bench", "--pairs", "0"]):
        with pytest.raises(SystemExit) as info:
            parser.parse_args([argv[0], "--recipe", "ref2va-demo", *argv[1:]])
        assert info.value.code == 2
        assert "--pairs: must be >=" in capsys.readouterr().err
    cli = " ".join((REPO / "docs" / "cli.md").read_text().split())
    assert "`--pairs 0` is the default" in cli
    assert "(`bench --pairs 0`, `verify --pairs -1`," in cli


# -- the bench extra: --trace-dir only ----------------------------------------------------------


def test_bench_needs_the_bench_extra_for_trace_dir_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from prenoise.cli import commands
    from prenoise.guards import extras

    assert commands.COMMAND_EXTRAS["bench"] == ("ref2va",)
    monkeypatch.setattr(
        extras, "missing_modules", lambda extra: ["matplotlib"] if extra == "bench" else []
    )
    commands._require_extras(argparse.Namespace(command="bench", trace_dir=None))
    with pytest.raises(extras.MissingExtraError, match="--trace-dir needs the 'bench' extra"):
        commands._require_extras(argparse.Namespace(command="bench", trace_dir="traces"))
    for doc in ("README.md", "docs/library.md"):
        lines = (REPO / doc).read_text().splitlines()
        bench = next(line for line in lines if 'pip install "$PRENOISE[bench]"' in line)
        ref2va = next(line for line in lines if 'pip install "$PRENOISE[ref2va]"' in line)
        assert "bench --trace-dir" in bench, doc
        assert "verify, bench" in ref2va, doc


# -- the modular plans: named in the README, reviewed on 0.40.0-0.42.1 ---------------------------

FAMILY_WORDS = {
    "minimax_h3": "MiniMax-H3",
    "wan": "Wan 2.1",
    "ltx2": "LTX-2",
    "hunyuan_video1_5": "HunyuanVideo-1.5",
}


def test_the_readme_names_every_modular_plan() -> None:
    pytest.importorskip("diffusers")
    from prenoise.integrations.diffusers import supported_modular

    readme = " ".join((REPO / "README.md").read_text().split())
    classes = supported_modular()
    assert f"{len(classes)} modular pipeline classes" in readme
    for path in classes:
        family = path.split(".")[2]
        assert FAMILY_WORDS[family] in readme, family


def test_the_modular_plans_are_reviewed_on_every_release_the_docs_name() -> None:
    from prenoise.integrations.diffusers.reviewed import RELEASES
    from prenoise.integrations.diffusers.reviewed_modular import MODULAR_REVIEWED

    assert {"0.40.0", "0.41.0", "0.42.0", "0.42.1"} <= set(RELEASES)
    for table in MODULAR_REVIEWED.values():
        for key, digests in table.items():
            reviewed = {release for releases in digests.values() for release in releases}
            assert reviewed == set(RELEASES), key
    page = " ".join((REPO / "docs/background/diffusers-modular.md").read_text().split())
    assert "gated to 0.42.1" not in page
    assert "reviewed on 0.40.0, 0.41.0, 0.42.0 and 0.42.1" in page
    for test in (REPO / "tests" / "integrations").glob("test_*.py"):
        assert "first shipped in 0.42.1" not in test.read_text(), test.name


def test_pipe_state_output_is_documented_as_a_rerun() -> None:
    """diffusers' `ModularPipeline.__call__` runs every block for `pipe(state, output=...)`."""
    pytest.importorskip("diffusers")
    import inspect

    from diffusers.modular_pipelines.modular_pipeline import ModularPipeline

    source = inspect.getsource(ModularPipeline.__call__)
    assert "deepcopy(state)" in source and "self._blocks(self, state)" in source
    doc = " ".join((REPO / "docs" / "diffusers.md").read_text().split())
    assert 'videos = pipe(state, output="videos")' not in doc
    assert '`pipe(state, output="videos")` is not a read of `state`' in doc


def test_every_diffusers_export_is_documented() -> None:
    pytest.importorskip("diffusers")
    import prenoise.integrations.diffusers as integration

    doc = (REPO / "docs" / "diffusers.md").read_text()
    section = doc[doc.index("## What it exports") :]
    section = section[: section.index("\n## ", 1)]
    for name in integration.__all__:
        assert f"`{name}" in section, name
    assert "`plan_call(pipe, args, kwargs)" in section
    assert "`overlapped_call(pipe, *args, **kwargs)`" in section


def test_the_vllm_omni_extra_comment_says_digests() -> None:
    lines = (REPO / "pyproject.toml").read_text().splitlines()
    index = lines.index("vllm-omni = []")
    comment = []
    for line in reversed(lines[:index]):
        if not line.startswith("#"):
            break
        comment.append(line)
    text = " ".join(comment)
    assert "digests" in text and "version (0.30.x)" not in text


# -- vllm-omni-verify --upstream-overlap: no "plugin on" for an arm with the plugin off ----------


def _stub_result(upstream_overlap: bool) -> SimpleNamespace:
    return SimpleNamespace(
        upstream_overlap=upstream_overlap,
        on=SimpleNamespace(drawn_on={"initial_video_noise": "worker"}),
        not_prepared_reasons=[],
        uncompared=[],
        verified=True,
        summary=lambda: "verified",
    )


@pytest.mark.parametrize(
    ("upstream", "label"), [(True, "upstream overlapped"), (False, "plugin on")]
)
def test_upstream_overlap_tables_label_their_arms(upstream: bool, label: str) -> None:
    from rich.console import Console

    from prenoise.integrations.vllm_omni import cli

    console = Console(record=True, width=200)
    report = {
        "fields": {"initial_video_noise": {"equal": True, "shape": [1, 2], "differences": 0}},
        "geometry": {},
        "noise_stream": "native",
    }
    cli._print_report(console, _stub_result(upstream), report, "heading")  # type: ignore[arg-type]
    text = console.export_text()
    assert f"drawn on ({label})" in text
    assert ("plugin on" in text) is (not upstream)


def test_upstream_overlap_uncompared_values_name_upstreams_arms() -> None:
    from prenoise.integrations.vllm_omni.verification import VerifyResult

    off, on = SimpleNamespace(uncompared=["a: x"]), SimpleNamespace(uncompared=["b: y"])
    upstream = VerifyResult(None, off, on, upstream_overlap=True)  # type: ignore[arg-type]
    assert upstream.uncompared == ["upstream_serial: a: x", "upstream_overlapped: b: y"]
    plugin = VerifyResult(None, off, on)  # type: ignore[arg-type]
    assert plugin.uncompared == ["plugin_off: a: x", "plugin_on: b: y"]


# -- the bench PNG: its title is not under its legend --------------------------------------------


def test_the_timeline_title_and_legend_do_not_overlap() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from prenoise.observe.timeline_plot import timeline_figure
    from prenoise.observe.tracing import Category, Span

    def span(cat: str, tid: int, start: float, end: float) -> Span:
        return Span(cat, cat, tid, "main" if tid == 1 else "prep-0", start, end)

    arms = {
        "serial": [span(Category.ENCODE, 1, 0.0, 3.0), span(Category.NOISE, 1, 3.0, 4.0)],
        "overlapped": [span(Category.ENCODE, 1, 0.0, 3.0), span(Category.PREPARE, 2, 0.5, 1.5)],
    }
    title = "ref2va-demo: the median pair (pair 3 of 5, by window difference), threads as lanes"
    fig = timeline_figure(arms, title=title)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        title_box = fig._suptitle.get_window_extent(renderer)  # type: ignore[union-attr]
        legend_box = fig.legends[0].get_window_extent(renderer)
        figure_box = fig.bbox
        assert not title_box.overlaps(legend_box)
        for box in (title_box, legend_box):
            assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1
            assert figure_box.y0 <= box.y0 and box.y1 <= figure_box.y1
        for ax in fig.axes:
            assert not ax.get_tightbbox(renderer).overlaps(legend_box)
    finally:
        plt.close(fig)


# -- make aarch64-stream-digest: an unsupported dtype is refused ----------------------------------


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_aarch64_stream_digest_refuses_an_unsupported_dtype() -> None:
    """Refused before the cross tools or the dump are needed (`-o`: neither is remade)."""
    # a make of its own: under `make test` the parent's jobserver flags would reach it
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "-s", "-o", "aarch64-tools", "-o", "build/aarch64/stream_dump",
         "aarch64-stream-digest", "DTYPE=float16"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stdout == ""  # no digest of empty input
    assert (
        "make aarch64-stream-digest: DTYPE=float16 is not supported (float32, bfloat16 or float64)"
    ) in done.stderr.splitlines()
    dump = (REPO / "src/prenoise/noise/csrc/stream_dump.c").read_text()
    assert re.search(r"DTYPE is float32, bfloat16 or float64", dump)


# -- scripts/gpu_check.sh finds a Python with torch ----------------------------------------------


def test_gpu_check_uses_the_venv_when_python3_has_no_torch(tmp_path: Path) -> None:
    venv_python = REPO / ".venv" / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("no .venv in this checkout")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')  # no site: no torch
    python3.chmod(0o755)
    outdir = tmp_path / "out"
    outdir.mkdir()
    (outdir / "kept").write_text("")  # not empty: refused before any work
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(outdir)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert lines[0] == (
        f"gpu_check.sh: python3 has no torch: using {venv_python} (set PYTHON to choose another)"
    )
    assert lines[1].startswith("gpu_check.sh: ") and len(lines) == 2
    assert sorted(p.name for p in outdir.iterdir()) == ["kept"]


# -- scripts/check_docs.py runs the Python snippets ----------------------------------------------


def test_check_docs_runs_python_snippets(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(
        "# P\n\n```python\nx = undefined_helper(1)\n```\n\n"
        "```python\n# needs a checkpoint: `pipe` is a loaded pipeline\npipe(1)\n```\n\n"
        "```python\nimport math\nassert math.isclose(math.pi, 3.14159, rel_tol=1e-5)\n```\n"
    )
    problems = check_docs.check(tmp_path, cli=lambda: {}, generated=lambda: {})
    assert len(problems) == 1, problems
    assert problems[0].startswith("README.md:3: the python snippet fails (NameError: name ")
    assert "# needs a checkpoint: …" in problems[0]
