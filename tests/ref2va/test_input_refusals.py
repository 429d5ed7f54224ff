"""Bad input the OS, a parser or FFmpeg trips on is still bad input (issue #21): one line naming
the file or field and exit 2 (422 in `prenoise serve`), never `internal error` and exit 70; a
system failure is never blamed on the file; a truncated MP4 is refused, not half-decoded."""

from __future__ import annotations

import errno
import os
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import pytest
from tests.hostile_media import truncated_faststart_mp4

from cli_refusals import one_line
from prenoise.cli.commands import main
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.media import reading as media
from prenoise.ref2va.models import Ref2VAModels
from prenoise.serve.app import _decode_json
from prenoise.serve.paths import PathRejected, resolve_media_path
from prenoise.serve.schema import RequestRejected

TINY = Path(__file__).with_name("tiny-recipe.yaml")
LONG = "a" * 300 + ".mp4"
LONG_NAME = (
    "has a 304-byte component ('aaaaaaaaaaaaaaaaaaaaaaaa…'), over the 255-byte file-name limit"
)
BIG_INT = "9" * 5000
INT_LIMIT = "has an integer literal longer than 4300 digits (Python's int-string limit)"


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding the tiny recipe as `tiny.yaml`."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    return tmp_path


def _recipe_with(workdir: Path, text: str) -> str:
    (workdir / "bad.yaml").write_text((workdir / "tiny.yaml").read_text() + text)
    return "bad.yaml"


# -- class 1: bad input that ended as exit 70 --------------------------------------------------


@pytest.mark.parametrize(
    ("recipe_text", "extra", "message"),
    [
        ("model: {init_seed: " + BIG_INT + "}\n", [], f"error: bad.yaml: YAML {INT_LIMIT}"),
        ("x: " + "[" * 3000 + "]" * 3000 + "\n", [], "error: bad.yaml: YAML nested too deeply"),
        ('output_dir: "o\\0x"\n', [], "error: bad.yaml: output_dir: contains a NUL byte"),
        ('checkpoint: "c\\0x"\n', [], "error: bad.yaml: checkpoint: contains a NUL byte"),
        (
            'references: [{kind: video, path: "a\\0b.mp4"}]\n',
            [],
            "error: bad.yaml: references.0.path: contains a NUL byte",
        ),
        ("", ["--reference", LONG], f"error: bad.yaml: references.0.path: {LONG_NAME}"),
        ("", ["--out", LONG], f"error: --out: the path {LONG_NAME}"),
        ("", ["--out", "x\0.mp4"], "error: --out: the path contains a NUL byte"),
    ],
)
def test_bad_names_and_numbers_are_exit_2(
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    recipe_text: str,
    extra: list[str],
    message: str,
) -> None:
    recipe = _recipe_with(workdir, recipe_text)
    assert main(["generate", "--recipe", recipe, *extra]) == 2
    assert one_line(capsys) == message


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def _huge_header(path: Path) -> None:
    path.write_bytes(struct.pack("<Q", 2**62) + path.read_bytes()[8:])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny recipe's models saved as a checkpoint (read-only: tests copy it)."""
    out = tmp_path_factory.mktemp("ckpt") / "ckpt"
    Ref2VAModels.default(load_recipe(TINY).model).save(out)
    return out


WEIGHTS = "audio_vae.safetensors"  # the first component loaded
HEADER = "not a valid safetensors file (Error while deserializing header: "


@pytest.mark.parametrize(
    ("damage", "file", "message"),
    [
        (_cut, WEIGHTS, f"{HEADER}incomplete metadata, file not fully covered)"),
        (
            _zero,
            WEIGHTS,
            f"{HEADER}invalid JSON in header: EOF while parsing a value at line 1 column 0)",
        ),
        (_huge_header, WEIGHTS, f"{HEADER}header too large)"),
        (_empty, WEIGHTS, f"{HEADER}header too small)"),
    ],
)
def test_damaged_checkpoint_weights_are_exit_2(
    workdir: Path,
    checkpoint: Path,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Path], None],
    file: str,
    message: str,
) -> None:
    shutil.copytree(checkpoint, workdir / "ck")
    damage(workdir / "ck" / file)
    assert main(["verify", "--recipe", "tiny.yaml", "--checkpoint", "ck"]) == 2
    assert one_line(capsys) == f"error: ck/{file}: {message}"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            '{"format": "prenoise-ref2va", "model": {"init_seed": ' + BIG_INT + "}}",
            f"JSON {INT_LIMIT}",
        ),
        (
            '{"format": "prenoise-ref2va", "model": ' + '{"a": ' * 5000 + "1" + "}" * 5001,
            "JSON nested too deeply",
        ),
        (
            '{"format": "prenoise-ref2va", "model": ' + '{"a": ' * 100 + "1" + "}" * 101,
            "JSON nested more than 64 levels deep",
        ),
    ],
)
def test_checkpoint_config_numbers_and_nesting_are_exit_2(
    workdir: Path,
    checkpoint: Path,
    capsys: pytest.CaptureFixture[str],
    config: str,
    message: str,
) -> None:
    shutil.copytree(checkpoint, workdir / "ck")
    (workdir / "ck" / "config.json").write_text(config)
    assert main(["verify", "--recipe", "tiny.yaml", "--checkpoint", "ck"]) == 2
    assert one_line(capsys) == f"error: ck/config.json: {message}"


def test_serve_body_with_a_huge_integer_is_422() -> None:
    with pytest.raises(RequestRejected) as caught:
        _decode_json('{"seed": ' + BIG_INT + "}", "body")
    assert (caught.value.field, caught.value.status) == ("body", 422)
    assert caught.value.message == f"JSON {INT_LIMIT}"


def test_serve_reference_with_a_too_long_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PathRejected, match="^the path " + LONG_NAME.replace("(", r"\(")[:40]):
        resolve_media_path(tmp_path, f"dir/{LONG}")


# -- class 2: messages that blamed the wrong thing ----------------------------------------------


def test_a_huge_frame_pixel_cap_is_no_decode_error(synthetic_mp4: Path) -> None:
    # 10**18 is above FFmpeg's max_pixels range: opening the decoder failed with ERANGE
    frames = list(media.iter_video_frames(synthetic_mp4, limits=Limits(max_frame_pixels=10**18)))
    assert len(frames) == 24


def test_a_device_is_not_called_missing(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--recipe", "tiny.yaml", "--reference", "/dev/zero"]) == 2
    assert one_line(capsys) == "error: /dev/zero: not a regular file (a character device)"


def test_serve_names_a_pipe_under_the_media_root(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.mp4")
    with pytest.raises(PathRejected) as caught:
        resolve_media_path(tmp_path, "pipe.mp4")
    assert (
        str(caught.value) == "'pipe.mp4': not a regular file (a named pipe) (under the media root)"
    )


def test_thread_exhaustion_is_not_blamed_on_the_file(
    workdir: Path,
    synthetic_mp4: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_threads(*_args: Any) -> Iterator[Any]:
        raise av.error.BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        yield

    import types

    from prenoise.ref2va.media import demux

    monkeypatch.setattr(media, "counted_frames", no_threads)
    # the memory the line names is the host's at that moment: fixed here
    described = "the 1.0 GiB of memory available on this host"
    monkeypatch.setattr(demux, "memory_limit", lambda: types.SimpleNamespace(described=described))
    shutil.copy(synthetic_mp4, workdir / "ref.mp4")
    assert main(["generate", "--recipe", "tiny.yaml", "--reference", "ref.mp4"]) == 70
    assert one_line(capsys) == (
        "error: BlockingIOError: [Errno 11] decoding ref.mp4: the system refused the decoder "
        "threads or memory (Resource temporarily unavailable); the file is not at fault, retry "
        f"with fewer processes running ({described}) (rerun with --debug for the traceback)"
    )


# -- class 3: a truncated MP4 -------------------------------------------------------------------


def test_a_truncated_mp4_is_refused(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truncated_faststart_mp4(workdir / "half.mp4")
    assert main(["generate", "--recipe", "tiny.yaml", "--reference", "half.mp4"]) == 2
    assert one_line(capsys) == (
        "error: half.mp4: the file is truncated: its header declares 48 video frames, only 22 "
        "are in the file"
    )


def test_a_whole_faststart_mp4_still_decodes(workdir: Path) -> None:
    truncated_faststart_mp4(workdir / "half.mp4")
    assert sum(1 for _ in media.iter_video_frames(workdir / "faststart-half.mp4")) == 48
    assert media.read_audio(workdir / "faststart-half.mp4").shape[1] > 0
