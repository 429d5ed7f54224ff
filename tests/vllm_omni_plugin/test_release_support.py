"""Support decided by the code: the reviewed digests per release, and scratch copies of vLLM-Omni.

Run in every vLLM-Omni venv (`make pytest-vllm-omni`, `-031`, `-032`): the installed release's
digests are the reviewed ones, its paths run as reviewed, and three scratch copies of the
installed `vllm_omni` package (symlinks, one file replaced) named `0.33.0.dev0` show the gate at
work in a process each (forked from a server that imported only torch and vllm: vllm-omni and
prenoise are imported from the scratch copy's path, as in a fresh interpreter): the unchanged
code runs as the release it equals; an edited `MiniMaxH3Pipeline.encode_prompt` (a wrapped
function the prepared-ahead path relies on) turns that path off alone, named once, with every
output bitwise plugin-off's; an edited `_initial_noise` (a draw) leaves MiniMax-H3 to upstream:
native runs it untouched, a named stream refuses its requests.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import forked
import pytest
from release import CODE, PRENOISE_WORKER, RELEASE

from prenoise.cli.commands import main
from prenoise.integrations.vllm_omni import digests, support
from prenoise.integrations.vllm_omni.reviewed import (
    ABSENT,
    H3_AHEAD_PATH,
    H3_STREAMS_PATH,
    PATHS,
    RELEASES,
    REVIEWED,
    SEEN_NOT_REVIEWED,
    WAN_AHEAD_PATH,
)
from prenoise.integrations.vllm_omni.verification import NOTHING_OF_PRENOISE
from waits import READY_CEILING_S

REPO = Path(__file__).resolve().parents[2]
PIPELINE = "vllm_omni.diffusion.models.minimax_h3.pipeline_minimax_h3"
SCRATCH_VERSION = "0.33.0.dev0"


def test_the_installed_release_is_a_reviewed_one_and_its_own_digests_are_recorded() -> None:
    version = importlib.metadata.version("vllm-omni")
    assert version in RELEASES
    assert version == RELEASE  # every recorded digest of this release is the installed code
    for key, reviewed in REVIEWED.items():
        seen = {**reviewed, **SEEN_NOT_REVIEWED.get(key, {})}
        mine = [digest for digest, releases in seen.items() if version in releases]
        assert mine == [digests.installed_digest(key)], key


def test_every_key_is_recorded_for_every_release() -> None:
    for key, reviewed in REVIEWED.items():
        seen = {**reviewed, **SEEN_NOT_REVIEWED.get(key, {})}
        releases = [r for rs in seen.values() for r in rs]
        assert sorted(releases) == sorted(RELEASES), key
    assert {k for keys in PATHS.values() for k in keys} == set(REVIEWED)


def test_the_paths_run_as_reviewed_on_this_release() -> None:
    assert CODE.h3_streams and CODE.h3_ahead
    assert CODE.upstream_prepares_ref2va is (RELEASE == "0.32.0rc1")
    assert CODE.problems == {}  # 0.32.0rc1's staged Wan2.2 forward too (its FULL stage)


def test_a_module_a_release_lacks_is_absent_not_unreadable() -> None:
    """`effective_wan_dimensions` lives in a module 0.32.0rc1 added: before it the function is
    recorded `ABSENT` (and so read), not an unreadable key that would turn Wan2.2 off."""
    key = "vllm_omni.diffusion.models.wan2_2.conditioning:effective_wan_dimensions"
    assert key in PATHS[WAN_AHEAD_PATH]
    assert (digests.installed_digest(key) == ABSENT) is (RELEASE != "0.32.0rc1")
    with pytest.raises(digests.CodeUnavailable, match="no_such_package_xyz is not installed"):
        digests.installed_digest("no_such_package_xyz.module:function")


def test_a_changed_digest_names_the_function(monkeypatch: pytest.MonkeyPatch) -> None:
    key = f"{PIPELINE}:MiniMaxH3Pipeline.diffuse"
    monkeypatch.setitem(digests._digests, key, "0123456789ab")
    monkeypatch.setattr(digests, "_problems", {})
    problem = digests.path_problem(H3_STREAMS_PATH)
    assert problem is not None
    assert problem.startswith(
        f"MiniMaxH3Pipeline.diffuse ({PIPELINE}) changed: digest 0123456789ab; reviewed "
    )
    monkeypatch.setitem(digests._digests, key, ABSENT)
    missing = digests.path_problem(H3_AHEAD_PATH, PATHS[H3_AHEAD_PATH])
    assert missing is not None and missing.startswith(
        f"MiniMaxH3Pipeline.diffuse ({PIPELINE}) is missing; reviewed "
    )


def test_digests_read_no_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digests come from the source files: a process that never imported vLLM-Omni gets
    them without importing it (`prenoise doctor` relies on this)."""
    script = (
        "import sys; from prenoise.integrations.vllm_omni import support; "
        "s = support.current(); "
        "print(s.release, sorted(m for m in sys.modules if m.startswith(('vllm', 'torch'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=READY_CEILING_S,
    ).stdout.split(" ", 1)
    assert out[0] == RELEASE
    assert "vllm_omni" not in out[1] and "'vllm'" not in out[1]


# -- scratch copies -------------------------------------------------------------------------------


def _scratch(tmp: Path, edit: tuple[str, str, str] | None) -> Path:
    """A copy of the installed `vllm_omni` (files symlinked) with one file's code edited
    (`(module, old, new)`: `old` replaced once) and a `vllm_omni` dist-info of SCRATCH_VERSION."""
    import vllm_omni

    source = Path(vllm_omni.__file__).parent
    target = tmp / "vllm_omni"
    for folder, _, files in os.walk(source):
        here = target / Path(folder).relative_to(source)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            if not name.endswith(".pyc"):
                (here / name).symlink_to(Path(folder) / name)
    if edit is not None:
        module, old, new = edit
        path = target.joinpath(*module.split(".")[1:]).with_suffix(".py")
        text = path.read_text()
        assert text.count(old) == 1, (module, old)
        path.unlink()
        path.write_text(text.replace(old, new))
    info = tmp / f"vllm_omni-{SCRATCH_VERSION}.dist-info"
    info.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: vllm-omni\nVersion: {SCRATCH_VERSION}\n"
    (info / "METADATA").write_text(metadata)
    return tmp


_RUN = textwrap.dedent(
    """
    import json, logging, os, sys
    from pathlib import Path
    import vllm_omni
    from prenoise.integrations.vllm_omni import plugin, support
    from prenoise.integrations.vllm_omni.standins import synthetic_image
    from prenoise.integrations.vllm_omni.verification import H3Request, verify_request
    from prenoise.noise.streams import NoiseStreamError

    lines = []
    class Lines(logging.Handler):
        def emit(self, record):
            lines.append(f"{record.levelname} {record.getMessage()}")
    logger = logging.getLogger("prenoise.vllm_omni")
    logger.addHandler(Lines()); logger.setLevel(logging.INFO); logger.propagate = False
    image = synthetic_image(Path(sys.argv[1]) / "image.png")
    plugin.register()
    code = support.current()
    out = {"file": vllm_omni.__file__, "release": code.release, "problems": code.problems,
           "installed": plugin.is_installed(), "requests": []}
    for stream in sys.argv[2:]:
        os.environ["PRENOISE_VLLM_OMNI_NOISE_STREAM"] = stream  # read per request
        for seed in (3, 4):
            try:
                result = verify_request(H3Request((image,), seed=seed))
            except NoiseStreamError as error:
                out["requests"].append({"stream": stream, "error": str(error)})
                continue
            out["requests"].append({"stream": stream, "equal": result.equal,
                                    "prepared": result.prepared,
                                    "reasons": result.not_prepared_reasons})
    out["lines"] = [line for line in lines if not line.startswith("INFO prenoise: request")]
    print(json.dumps(out))
    """
)


def _run_scratch(
    forkserver: ForkServerContext,
    tmp: Path,
    edit: tuple[str, str, str] | None,
    streams: tuple[str, ...] = ("native",),
) -> dict[str, Any]:
    """`_RUN` on a scratch copy, two requests per noise stream, in a process forked from the
    `vllm_forkserver` (torch and vllm imported once for the session; vllm-omni and prenoise
    imported here from the scratch copy's path, as in a fresh interpreter: `forked.py`)."""
    root = _scratch(tmp / "site", edit)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO / "src")])}
    done = forked.run(forkserver, _RUN, [str(tmp), *streams], environ, tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(str(root))  # the scratch copy ran, not the venv's
    return result


@pytest.mark.slow
def test_a_later_release_with_the_reviewed_code_runs_as_the_release_it_equals(
    tmp_path: Path, vllm_forkserver: ForkServerContext
) -> None:
    result = _run_scratch(vllm_forkserver, tmp_path, None)
    assert result["release"] == RELEASE and result["installed"]
    assert result["problems"] == CODE.problems
    for request in result["requests"]:
        assert request["equal"] and request["prepared"], request
    warnings = [line for line in result["lines"] if not line.startswith("INFO")]
    assert len(warnings) == len(CODE.problems)  # this release's own (0.32.0rc1: Wan2.2 ahead)


def _body_edit(method: str) -> tuple[str, str, str]:
    """A neutral statement added before the first statement of `MiniMaxH3Pipeline.<method>`'s
    body: its digest changes (any code change counts), nothing it computes does."""
    import ast
    import inspect
    import textwrap

    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    lines = inspect.getsource(getattr(upstream.MiniMaxH3Pipeline, method)).splitlines()
    [function] = ast.parse(textwrap.dedent("\n".join(lines))).body
    assert isinstance(function, ast.FunctionDef)
    body = function.body
    first = body[1] if ast.get_docstring(function) is not None else body[0]
    line = lines[first.lineno - 1]
    indent = line[: len(line) - len(line.lstrip())]
    edited = [
        *lines[: first.lineno - 1],
        f"{indent}_prenoise_scratch_edit = None",
        *lines[first.lineno - 1 :],
    ]
    return (PIPELINE, "\n".join(lines) + "\n", "\n".join(edited) + "\n")


@pytest.mark.slow
def test_an_edited_wrapped_function_turns_its_path_off_naming_it_once(
    tmp_path: Path, vllm_forkserver: ForkServerContext
) -> None:
    """`encode_prompt` (wrapped; the prepared-ahead path's multi-rank hand-over) edited: that
    path runs upstream's code, said once; every output is plugin-off's; nothing else changes."""
    result = _run_scratch(vllm_forkserver, tmp_path, _body_edit("encode_prompt"))
    assert result["release"] is None and result["installed"]
    assert set(result["problems"]) == {H3_AHEAD_PATH}
    [line] = [line for line in result["lines"] if "encode_prompt" in line]
    assert line.startswith(
        f"WARNING prenoise: vllm-omni {SCRATCH_VERSION}: {H3_AHEAD_PATH}: off, upstream's code "
        f"runs untouched: MiniMaxH3Pipeline.encode_prompt ({PIPELINE}) changed: digest "
    )
    for request in result["requests"]:
        assert request["equal"] and not request["prepared"]
        [reason] = request["reasons"]
        assert reason.startswith(
            f"{H3_AHEAD_PATH} off on this vllm-omni, so prenoise prepared nothing (upstream's "
            f"code ran untouched): MiniMaxH3Pipeline.encode_prompt ({PIPELINE}) changed: digest "
        )


@pytest.mark.slow
def test_an_edited_draw_leaves_minimax_h3_to_upstream(
    tmp_path: Path, vllm_forkserver: ForkServerContext
) -> None:
    """`_initial_noise` edited: native runs upstream's MiniMax-H3 code untouched (only `forward`
    is wrapped, and passes the request on); a named stream refuses the request."""
    result = _run_scratch(
        vllm_forkserver, tmp_path, _body_edit("_initial_noise"), ("native", "x86")
    )
    assert H3_STREAMS_PATH in result["problems"] and H3_AHEAD_PATH in result["problems"]
    [said] = [
        line for line in result["lines"] if "MiniMax-H3 runs upstream's code untouched" in line
    ]
    assert "MiniMaxH3Pipeline._initial_noise (" in said
    assert [r["stream"] for r in result["requests"]] == ["native", "native", "x86", "x86"]
    for request in result["requests"]:
        if request["stream"] == "native":
            assert request.get("equal") is True and not request["prepared"], request
            [reason] = request["reasons"]
            assert reason.startswith(
                f"{H3_STREAMS_PATH} off on this vllm-omni, so prenoise prepared nothing "
                "(upstream's code ran untouched): MiniMaxH3Pipeline._initial_noise ("
            )
        else:
            assert "MiniMaxH3Pipeline._initial_noise (" in request["error"]
            assert request["error"].endswith("use the native stream")


_COMMANDS = textwrap.dedent(
    """
    import sys
    from prenoise.cli.commands import main
    status = main(["vllm-omni-verify", "--steps", "1", "--json", sys.argv[1]])
    print(f"verify exit {status}", flush=True)
    from prenoise.integrations.vllm_omni.status import plugin_status
    for name, value in plugin_status().rows():  # what `prenoise doctor` prints for the plugin
        print(f"doctor {name} | {value}", flush=True)
    """
)


@pytest.mark.slow
def test_every_command_taking_the_fallback_names_the_changed_function(
    tmp_path: Path, vllm_forkserver: ForkServerContext
) -> None:
    """Issue 41: one statement added to `MiniMaxH3Pipeline.diffuse` (a caller of a draw) of a
    scratch copy. `vllm-omni-verify` says, before running, which function changed, the releases
    it was reviewed on and what to do; its verdict says that is why nothing was prepared (exit
    1); `prenoise doctor` reports each path (never MiniMax-H3 active) with the function named."""
    root = _scratch(tmp_path / "site", _body_edit("diffuse"))
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(REPO / "src")]),
        "COLUMNS": "1000",
    }
    report = tmp_path / "verify.json"
    done = forked.run(vllm_forkserver, _COMMANDS, [str(report)], environ, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert "verify exit 1" in out, done.stdout[-3000:]
    changed = f"MiniMaxH3Pipeline.diffuse ({PIPELINE}) changed: digest "
    reviewed = REVIEWED[f"{PIPELINE}:MiniMaxH3Pipeline.diffuse"]
    releases = ", ".join(f"{d} ({'/'.join(r)})" for d, r in reviewed.items())
    [warning] = [line for line in out if line.startswith("warning:")]
    assert warning.startswith(
        f"warning: prenoise: vllm-omni {SCRATCH_VERSION}: MiniMax-H3 runs upstream's code "
        "untouched (noise streams and noise prepared ahead off)"
    )
    assert changed in warning and f"; reviewed {releases}; " in warning
    assert RELEASE in releases and warning.endswith(f"; {support.NEXT_STEP}")
    verdict = json.loads(report.read_text())
    assert verdict["equal"] is True and verdict["verified"] is False
    [reason] = verdict["not_prepared_reasons"]
    assert reason.startswith(
        f"{H3_STREAMS_PATH} off on this vllm-omni, so prenoise prepared nothing (upstream's code "
        f"ran untouched): {changed}"
    )
    [summary] = [line for line in out if line.startswith("NOT VERIFIED:")]
    assert summary.endswith(f"PLUGIN ARM NOT PREPARED AHEAD: {reason}")
    doctor = dict(
        line[len("doctor ") :].split(" | ", 1) for line in out if line.startswith("doctor ")
    )
    assert doctor["vLLM-Omni plugin"].startswith(
        f"active in every vLLM-Omni process for {WAN_AHEAD_PATH} only"
    )
    for path in (H3_AHEAD_PATH, H3_STREAMS_PATH):
        assert doctor[path].startswith(f"off: upstream's code runs untouched; {changed}")
        assert doctor[path].endswith(f"; {support.NEXT_STEP}")
    assert doctor[WAN_AHEAD_PATH] == "on (the reviewed code)"
    assert doctor["vllm-omni-verify"].startswith("exits 1 here")


# -- `vllm-omni-verify` exercises prenoise's own preparation on this release (issue 41) -----------

GUIDES = importlib.util.find_spec("vllm_omni.model_executor.models.minimax_h3.timeline_guides")


def _verify_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, dict[str, Any], list[str]]:
    """The command in this process (one step): its status, JSON report and printed lines."""
    out = tmp_path / "verify.json"
    capsys.readouterr()
    status = main(["vllm-omni-verify", "--steps", "1", *argv, "--json", str(out)])
    lines = capsys.readouterr().out.splitlines()
    return status, json.loads(out.read_text()), lines


def _drawn_by_prenoise(report: dict[str, Any]) -> list[str]:
    drawn = report["arms"]["plugin_on"]["drawn_on"]
    return [field for field, thread in drawn.items() if thread.startswith(PRENOISE_WORKER)]


def test_verify_by_default_verifies_a_kind_prenoise_prepares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.32.0rc1 draws a Ref2VA request's first output ahead itself: the default there is FL2VA
    (upstream draws it serially), elsewhere Ref2VA; either way prenoise drew and handed over."""
    status, report, lines = _verify_cli(tmp_path, capsys)
    kind = "fl2va" if CODE.upstream_prepares_ref2va else "ref2va"
    assert lines[0].startswith(f"request: {kind} (the default"), lines[0]
    assert status == 0 and report["verified"], lines[-3:]
    assert "initial_video_noise" in _drawn_by_prenoise(report)


@pytest.mark.parametrize("kind", ["t2va", "fl2va", "continuation", "guided"])
def test_verify_takes_the_request_kinds_the_docs_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    if kind == "guided" and GUIDES is None:
        pytest.skip("timeline guides are new in vllm-omni 0.32.0rc1 (refused: test_verify_inputs)")
    argv = ["--kind", kind, *(["--duration", "8"] if kind == "continuation" else [])]
    status, report, lines = _verify_cli(tmp_path, capsys, *argv)
    assert lines[0] == f"request: {kind}"
    assert status == 0 and report["verified"], lines[-3:]
    drawn = _drawn_by_prenoise(report)
    expected = "visual_condition_noise" if kind == "guided" else "initial_video_noise"
    assert expected in drawn, drawn  # guided: upstream draws the target noise on 0.32.0rc1
    if kind == "continuation":  # two windows compared
        assert "pass1.initial_video_noise" in report["fields"]


def test_a_request_prenoise_draws_nothing_of_is_not_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On 0.32.0rc1 a one-output Ref2VA request is all upstream's own overlap: "equal" proves
    nothing of prenoise, so the command says so and exits 1 (it exited 0)."""
    if not CODE.upstream_prepares_ref2va:
        pytest.skip("prenoise prepares a Ref2VA request itself on this release (the default)")
    status, report, lines = _verify_cli(tmp_path, capsys, "--kind", "ref2va")
    assert status == 1 and report["equal"] and not report["verified"]
    assert report["not_prepared_reasons"] == [NOTHING_OF_PRENOISE]
    assert not _drawn_by_prenoise(report)
    assert lines[-2].endswith(f"PLUGIN ARM NOT PREPARED AHEAD: {NOTHING_OF_PRENOISE}")


def test_support_is_computed_once() -> None:
    assert support.current() is support.current()


# -- every MiniMax-H3 draw site is a reviewed, wrapped function -----------------------------------

_DRAWS = {"randn", "randn_like", "rand", "rand_like", "randint", "normal", "normal_", "manual_seed"}
_COVERED_DRAW_SITES = {
    "diffusion.models.minimax_h3.pipeline_minimax_h3:MiniMaxH3Pipeline._initial_noise",
    "diffusion.models.minimax_h3.condition_noise:minimax_h3_imgvid_cond_noise_aug_rows",
    "diffusion.models.minimax_h3.condition_noise:minimax_h3_audio_cond_noise_aug_rows",
    "diffusion.models.minimax_h3.condition_noise:_draw_imgvid_condition_noise_rows",
}
"""The functions that draw MiniMax-H3's noise from a CPU generator: each is wrapped (or only
called from a wrapped one: `_draw_imgvid_condition_noise_rows`, from the visual-condition function
and `minimax_h3_imgvid_cond_noise_rows`) and in the stream path's reviewed set."""
_LEFT_TO_UPSTREAM = {
    # the video VAE's keyframe/video encode: the device's global RNG under a fixed seed inside
    # fork_rng (docs/vllm-omni.md: not covered by the noise streams)
    "diffusion.models.minimax_h3.vae:MiniMaxH3VideoVAE.encode_image",
    "diffusion.models.minimax_h3.vae:MiniMaxH3VideoVAE.encode_video",
}


def _draw_sites() -> set[str]:
    import ast

    import vllm_omni

    root = Path(vllm_omni.__file__).parent
    found = set()
    for package in ("diffusion/models/minimax_h3", "model_executor/models/minimax_h3"):
        for path in sorted((root / package).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            tree = ast.parse(path.read_text())

            def visit(node: ast.AST, prefix: str, module: str = module) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.ClassDef):
                        visit(child, f"{prefix}{child.name}.")
                    elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                        calls = {
                            n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id
                            for n in ast.walk(child)
                            if isinstance(n, ast.Call)
                            and isinstance(n.func, ast.Attribute | ast.Name)
                        }
                        if calls & _DRAWS:
                            found.add(f"{module}:{prefix}{child.name}")

            visit(tree, "")
    return found


def test_every_minimax_h3_draw_site_is_covered() -> None:
    """A draw upstream adds anywhere in MiniMax-H3's packages fails here (and its function's
    digest, where it is one the stream path relies on, turns that path off at run time)."""
    here = {s for s in _COVERED_DRAW_SITES if digests.installed_digest(f"vllm_omni.{s}") != ABSENT}
    assert _draw_sites() == here | _LEFT_TO_UPSTREAM
    keys = {k.removeprefix("vllm_omni.") for k in PATHS[H3_STREAMS_PATH]}
    assert keys >= _COVERED_DRAW_SITES


# -- the exact mixes, against upstream's own function -------------------------------------------


def test_prenoise_draws_and_mixes_as_upstreams_condition_function() -> None:
    """Upstream's condition function (plugin off) against prenoise's draws and mixes, bitwise on
    the CPU: the dependent recipe on every release; 0.32.0rc1's precomputed rows (upstream's own
    mix of prenoise's draw) and its guided recipe; and 0.32's NPU statement (coefficients rounded
    in CPU float32, then two products and one sum on the device) written out and run here."""
    import inspect

    import torch
    from vllm_omni.diffusion.models.minimax_h3 import condition_noise

    from prenoise.integrations.vllm_omni import h3_mix, h3_shapes
    from prenoise.preparation.draws import run_stream
    from prenoise.ref2va.noise import condition_streams

    upstream = condition_noise.minimax_h3_imgvid_cond_noise_aug_rows
    shapes = ((1, 4, 6), (3, 2, 4), (2, 6, 2))
    rows = sum(t * (h // 2) * (w // 2) for t, h, w in shapes)
    clean = torch.randn((rows, 96), generator=torch.Generator().manual_seed(5))
    kwargs = {"condition_shapes": shapes, "target_latent_t": 5, "imgvid_cond_num_frames": 3}

    def drawn(streams: Any) -> torch.Tensor:
        return torch.cat([t for s in streams for t in run_stream(s).values()])

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))
        )

    noise = drawn(condition_streams(11, 5, shapes))
    theirs = upstream(clean, seed=11, noise_aug=0.999, **kwargs)
    assert same(h3_mix.mix_condition_rows(clean, noise, shapes, 0.999), theirs)
    timestep = torch.tensor(0.999, dtype=torch.float32)  # 0.32's NPU rule, on this device
    out = torch.empty_like(clean)
    torch.add(timestep * clean, (1.0 - timestep) * noise, out=out)
    assert same(out, theirs)
    parameters = inspect.signature(upstream).parameters
    if "precomputed_noise_rows" in parameters:
        given = upstream(clean, seed=11, noise_aug=0.999, precomputed_noise_rows=noise, **kwargs)
        assert same(given, theirs)
    if "guided" in parameters:
        guided_noise = drawn(h3_shapes.guided_condition_streams(11, shapes))
        guided = upstream(clean, seed=11, noise_aug=0.999, guided=True, **kwargs)
        assert same(h3_mix.mix_guided_rows(clean, guided_noise, shapes, 0.999), guided)
        assert not same(guided, theirs)  # two recipes, two results: the comparison sees it


def test_the_other_pipelines_draw_sites_are_the_recorded_ones() -> None:
    """Every vLLM-Omni module the named-stream hooks cover has its recorded draw-site digest
    here (a drawing function added or changed in a later release makes its pipelines
    uncovered: `test_pipeline_streams.py`)."""
    from prenoise.integrations.vllm_omni.pipeline_targets import TARGETS
    from prenoise.integrations.vllm_omni.reviewed import DRAW_SITES

    hooked = {t.module for t in TARGETS if t.module.startswith("vllm_omni.")}
    assert set(DRAW_SITES) == hooked
    for module, reviewed in DRAW_SITES.items():
        assert digests.draw_sites_problem(module) is None, module
        mine = [d for d, releases in reviewed.items() if RELEASE in releases]
        assert mine == [digests.draw_sites_digest(module)], module
