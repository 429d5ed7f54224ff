"""`prenoise vllm-omni-verify`: plugin off vs on in the real MiniMax-H3 pipeline, as JSON."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console
from rich.table import Table

from prenoise.guards.usage import UsageError, check_output_file
from prenoise.integrations.vllm_omni.h3_request import KINDS, request_of_kind
from prenoise.integrations.vllm_omni.preflight import (
    MAX_STEPS,
    check_kind,
    check_steps,
    resolve_reference_paths,
)
from prenoise.integrations.vllm_omni.reference_kinds import check_image_header
from prenoise.integrations.vllm_omni.settings import MISMATCH_ENV, NOISE_STREAM_ENV
from prenoise.noise import streams as noise_streams
from prenoise.observe.console_text import cell, line, title
from prenoise.observe.progress import CommandProgress
from prenoise.preparation.prediction import PredictionMismatchError

if TYPE_CHECKING:
    from prenoise.integrations.vllm_omni.verification import H3Request, VerifyResult

__all__ = ["EXIT_STATUS_HELP", "add_arguments", "run"]

T = TypeVar("T")

EXIT_STATUS_HELP = """\
exit status:
  0   verified: every field bitwise equal, the global RNG unchanged, and the plugin-on arm ran
      the overlapped path (each noise tensor the pipeline consumed was drawn ahead on prenoise's
      worker thread and taken by the pipeline)
  1   not verified: a field differs, a value could not be compared, or the plugin-on arm did not
      prepare ahead (the JSON's not_prepared_reasons says why: request not eligible, a
      prediction mismatch, a path off on this vllm-omni's changed code (the function named),
      prenoise drew none of the request's noise, ...); the JSON report is written (none when
      the plugin-on arm raised on a prediction mismatch under
      PRENOISE_VLLM_OMNI_ON_MISMATCH=raise: one line says so)
  2   bad input, refused before the pipeline runs (what only upstream's media preparation sees,
      during it) and nothing written: a request upstream's own validation refuses (its message,
      unchanged: duration outside [4, 15] s, references under 256 px or outside [2, 15] s,
      codecs other than H.264/H.265, too many outputs or references), a reference that is not
      media (typed by content, not by name), an image over 5760x5760 pixels (read from its
      header), a --kind its references do not fit, --steps outside 1..1000, a seed outside
      torch's -2^63..2^64-1, a canvas over 768x1344 pixels, an unwritable --json, an unknown
      PRENOISE_VLLM_OMNI* value or --noise-stream, a noise stream this process's self-check
      refuses, or PRENOISE_VLLM_OMNI=0 (the plugin is off: nothing to verify)
  70  internal error (please report it)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (defaults: a 4 s 256x256 request on a synthetic image reference)."""
    parser.description = (
        "Run upstream's MiniMaxH3Pipeline.forward with tiny stand-in components twice, prenoise\n"
        "off then on, and compare every noise field and everything _build_denoise_inputs\n"
        "returns, bitwise."
    )
    parser.epilog = EXIT_STATUS_HELP
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--seed", type=int, default=42, help="-2^63..2^64-1, as upstream (output i: seed + i)"
    )
    parser.add_argument("--duration", type=float, default=4.0, help="seconds (upstream: 4..15)")
    parser.add_argument(
        "--width",
        type=int,
        default=256,
        help="output width (upstream floors it to a multiple of 32)",
    )
    parser.add_argument(
        "--height",
        type=int,
        default=256,
        help="output height (width x height at most 768x1344 pixels)",
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="PATH",
        help="image, video or audio reference, typed by its content (upstream accepts JPEG, PNG, "
        "WebP, HEIC images; MP4/MOV H.264/H.265 videos; WAV/MP3 audio); repeat for several "
        "(default: a synthetic 512x384 image)",
    )
    parser.add_argument(
        "--outputs", type=int, default=1, help="outputs per request (upstream: 1..10)"
    )
    parser.add_argument(
        "--kind",
        choices=KINDS,
        help="the request kind: ref2va (the references condition the output), t2va (text "
        "only: no --reference), fl2va (1 or 2 --reference images as the first/last keyframes), "
        "continuation (Ref2VA in 107-frame windows: --duration 8 gives two), guided (Ref2VA "
        "with the first image also a timeline guide at frame 0; vllm-omni 0.32.0rc1 on); "
        "default: ref2va where prenoise prepares a Ref2VA request itself; fl2va where "
        "upstream draws a Ref2VA request's first output ahead itself (0.32.0rc1)",
    )
    parser.add_argument("--steps", type=int, default=2, help=f"denoising steps (1..{MAX_STEPS})")
    parser.add_argument(
        "--noise-stream",
        metavar="STREAM",
        help=f"native, x86 or libm: sets {NOISE_STREAM_ENV} for both arms (plugin on: the "
        "plugin's setting; plugin off: upstream's forward drawn whole in that stream); "
        "default: the environment's",
    )
    parser.add_argument(
        "--upstream-overlap",
        action="store_true",
        help="vllm-omni 0.32.0rc1 on, which draws a Ref2VA first output ahead itself: prove "
        "upstream's own overlap against its own serial path (its draw ahead disabled), plugin "
        "off in both, then prenoise on top against that serial path; exit 0 only if both are "
        "verified (default: plugin off vs on)",
    )
    parser.add_argument("--json", required=True, help="write the per-field report here")


def run(args: argparse.Namespace, console: Console) -> int:
    """Verify; exit status as in `EXIT_STATUS_HELP` (bad input raises `UsageError`: exit 2)."""
    if importlib.util.find_spec("vllm_omni") is None:
        console.print(
            "[red]error:[/] vllm-omni is not installed here; run the prenoise of an environment "
            "that has vLLM-Omni (0.30.0 to 0.32.0rc1 are reviewed; from a prenoise clone: "
            "make setup-vllm-omni, then "
            ".venv-vllm-omni/bin/prenoise vllm-omni-verify ...)",
            soft_wrap=True,
        )
        return 2
    # Bad input the files and options show refused before vLLM-Omni is imported (tens of
    # seconds): the steps, the references' paths and image headers, a text-only request's.
    check_steps(args.steps)
    references = resolve_reference_paths(args.reference)
    for path in references:
        check_image_header(path)
    if getattr(args, "kind", None) == "t2va" and references:
        raise UsageError("--kind t2va: a text-only request takes no --reference")
    # a line per phase on stderr (not on a terminal; there: one transient status line)
    with CommandProgress(console, "vllm-omni-verify") as progress:
        progress.stage("importing vLLM-Omni")
        import vllm_omni  # noqa: F401  (an installed one that fails to import: its own error)

        with _noise_stream_setting(args.noise_stream):
            return _run_checked(args, references, console, progress)


def _run_checked(
    args: argparse.Namespace,
    references: tuple[Path, ...],
    console: Console,
    progress: CommandProgress,
) -> int:
    from prenoise.integrations.vllm_omni.preflight import check_request, check_settings
    from prenoise.integrations.vllm_omni.standins import synthetic_image
    from prenoise.integrations.vllm_omni.verification import H3Request, verify_request

    # Cheapest first, all before the pipeline runs: a refusal costs little and leaves nothing.
    progress.stage("checking the settings, the request and its references")
    settings = check_settings()
    noise_streams.require_usable(settings.noise_stream)  # NoiseStreamError: one line, exit 2
    upstream_overlap = getattr(args, "upstream_overlap", False)
    kind, why = _kind(getattr(args, "kind", None), upstream_overlap)
    with (
        _ReportFile(check_output_file(args.json, "--json")) as out,
        tempfile.TemporaryDirectory(prefix="prenoise-vllm-omni-") as scratch,
    ):
        given = H3Request(
            references
            or ((synthetic_image(Path(scratch) / "reference.png"),) if kind != "t2va" else ()),
            seed=args.seed,
            duration=args.duration,
            width=args.width,
            height=args.height,
            outputs=args.outputs,
            steps=args.steps,
        )
        check_kind(kind, given.references)  # (the default reference included)
        request = request_of_kind(kind, given)
        check_request(request)
        _say_paths_off(console)
        said = f"request: {kind}{why}"  # printed with the report
        if upstream_overlap:
            return _verify_upstream_overlap(request, out, console, progress, said)
        try:
            result = _verify(lambda: verify_request(request, stage=progress.stage))
            # prenoise's own preparation must have run: "equal" alone proves nothing of it
            result = dataclasses.replace(result, prenoise_required=True)
        except PredictionMismatchError as error:  # the plugin arm raised, as asked: a finding
            console.print(
                line(
                    ("NOT VERIFIED:", "red"),
                    " the plugin-on arm raised PredictionMismatchError "
                    f"({MISMATCH_ENV}=raise), upstream did not: {error}",
                ),
                soft_wrap=True,
            )
            return 1
        report = {"request_kind": kind, **result.to_json()}
        out.commit(json.dumps(report, indent=2))
    console.print(line(said), soft_wrap=True)
    _print_report(console, result, report)
    console.print(line(f"wrote {out.path}"))
    return 0 if result.verified else 1


def _verify_upstream_overlap(
    request: H3Request,
    out: _ReportFile,
    console: Console,
    progress: CommandProgress,
    said: str,
) -> int:
    """`--upstream-overlap`: upstream's serial path vs its overlap, then vs prenoise on top."""
    from prenoise.integrations.vllm_omni.upstream_overlap import (
        upstream_draws_ahead,
        verify_upstream_overlap,
    )

    if not upstream_draws_ahead():
        raise UsageError(
            "--upstream-overlap: this vllm-omni draws nothing ahead itself (0.32.0rc1 on does): "
            "there is no upstream overlap to verify"
        )
    progress.stage("MiniMax-H3: upstream serial, upstream overlapped, prenoise on top")
    result = _verify(lambda: verify_upstream_overlap(request))
    out.commit(json.dumps(result.to_json(), indent=2))
    console.print(line(said), soft_wrap=True)
    _print_report(
        console, result.upstream, result.upstream.to_json(), "upstream: serial vs own overlap"
    )
    _print_report(console, result.plugin, result.plugin.to_json(), "upstream serial vs prenoise on")
    console.print(line(f"wrote {out.path}"))
    return 0 if result.verified else 1


def _kind(given: str | None, upstream_overlap: bool) -> tuple[str, str]:
    """The request kind, and why when it is the default: by default one prenoise prepares
    itself on the installed code (Ref2VA, or FL2VA where upstream draws a Ref2VA request's
    first output ahead itself); with `--upstream-overlap` Ref2VA, the kind upstream overlaps."""
    from prenoise.integrations.vllm_omni import support

    if given is not None:
        return given, ""
    if upstream_overlap:
        return "ref2va", " (the default with --upstream-overlap)"
    if support.current().upstream_prepares_ref2va:
        return "fl2va", (
            " (the default here: this vllm-omni draws a Ref2VA request's first output ahead "
            "itself, so prenoise's own preparation is verified on FL2VA, whose noise upstream "
            "draws serially; --kind picks another)"
        )
    return "ref2va", " (the default: prenoise draws its noise ahead; --kind picks another)"


def _say_paths_off(console: Console) -> None:
    """One line per MiniMax-H3 path that runs upstream's code on the installed vllm-omni (the
    line the plugin logs in a serving process): the changed function, the releases it was
    reviewed on, what to do. The verdict then says that is why nothing was prepared."""
    from prenoise.integrations.vllm_omni import support
    from prenoise.integrations.vllm_omni.plugin import installed_version

    code = support.current()
    off = [path for path in support.H3_PATHS if path in code.problems][:1]  # streams: both
    for path in off:
        text = support.off_line(path, code.problems[path], installed_version("vllm-omni"))
        console.print(line(("warning:", "yellow"), " ", text), soft_wrap=True)


@contextlib.contextmanager
def _noise_stream_setting(value: str | None) -> Iterator[None]:
    """`--noise-stream`: checked (one line, exit 2), then set in the environment for the run
    (both arms read it there) and restored after; None: the environment's setting."""
    if value is None:
        yield
        return
    stream = value.strip().lower()
    if stream not in noise_streams.STREAMS:
        raise UsageError(
            f"--noise-stream {value!r}: expected one of {', '.join(noise_streams.STREAMS)}"
        )
    previous = os.environ.get(NOISE_STREAM_ENV)
    os.environ[NOISE_STREAM_ENV] = stream
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(NOISE_STREAM_ENV, None)
        else:
            os.environ[NOISE_STREAM_ENV] = previous


def _verify(arms: Callable[[], T]) -> T:
    """Run the arms; what upstream refuses only while preparing the media is bad input too."""
    from vllm_omni.errors import OmniClientError

    from prenoise.integrations.vllm_omni.preflight import VerifyInputError

    try:
        return arms()
    except OmniClientError as error:  # e.g. several reference videos over 15 s together
        raise VerifyInputError(str(error)) from None
    except subprocess.CalledProcessError as error:  # upstream's ffmpeg on a reference
        command = error.cmd[0] if isinstance(error.cmd, list | tuple) else error.cmd
        raise VerifyInputError(
            f"upstream's media code could not process a reference: {command} exited with "
            f"status {error.returncode}"
        ) from None


class _ReportFile:
    """The `--json` destination, claimed before the run and written whole or not at all.

    Entering makes its missing directories and a temporary file beside it: proof that it can be
    written (`os.access` cannot give that, e.g. to root on a read-only or virtual file system).
    `commit` renames the finished report into place; leaving without a commit removes the
    temporary file and the directories it made, so a refused or failed run leaves nothing.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._temporary: Path | None = None
        self._made: list[Path] = []  # directories made here, deepest first

    def __enter__(self) -> _ReportFile:
        self._made = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
            )
        except OSError as error:
            self._remove()
            raise UsageError(
                f"--json {self.path}: cannot write there ({error.strerror or error})"
            ) from None
        os.close(fd)
        self._temporary = Path(name)
        return self

    def commit(self, text: str) -> None:
        """Write `text` and move it into place (atomically: a reader sees all of it or none)."""
        assert self._temporary is not None
        self._temporary.write_text(text)
        os.replace(self._temporary, self.path)
        self._temporary = None
        self._made = []

    def __exit__(self, *exc: object) -> None:
        self._remove()

    def _remove(self) -> None:
        if self._temporary is not None:
            self._temporary.unlink(missing_ok=True)
            self._temporary = None
        for directory in self._made:
            with contextlib.suppress(OSError):  # not empty: something else wrote there since
                directory.rmdir()
        self._made = []


def _print_report(
    console: Console,
    result: VerifyResult,
    report: dict[str, object],
    heading: str = "plugin off vs on",
) -> None:
    """The noise fields and any difference as a table, then the verdict and its reasons."""
    table = Table(title=title(f"MiniMax-H3 (vllm-omni): {heading}"))
    # the second arm's label: upstream's own overlap runs with the plugin off
    second = "upstream overlapped" if result.upstream_overlap else "plugin on"
    for column in ("field", "equal", "shape", f"drawn on ({second})"):
        table.add_column(column)
    fields = report["fields"]
    assert isinstance(fields, dict)
    drawn_on = result.on.drawn_on
    for name, entry in fields.items():
        if not name.split(".")[-1].endswith("noise") and entry["equal"]:
            continue  # the table shows the noise fields and any difference; the JSON has all
        table.add_row(
            cell(name),
            cell(("yes", "green"))
            if entry["equal"]
            else cell(("NO", "red"), f" {entry['differences']}"),
            cell(str(entry["shape"])),
            cell(drawn_on.get(name, "")),
        )
    console.print(table)
    console.print(line(f"geometry: {report['geometry']}"), soft_wrap=True)
    console.print(line(f"noise stream: {report['noise_stream']} (both arms)"), soft_wrap=True)
    for reason in result.not_prepared_reasons:
        console.print(line(("not prepared ahead:", "red"), f" {reason}"), soft_wrap=True)
    for value in result.uncompared:
        console.print(line(("not compared:", "red"), f" {value}"), soft_wrap=True)
    style = "green" if result.verified else "red"
    console.print(line((result.summary(), style)), soft_wrap=True)
