"""`vllm-omni-verify` on bad input, and references typed by content (issue #20).

Bad input exited 70 ("internal error … please report it"), some of it after running the whole
pipeline (a bad `PRENOISE_VLLM_OMNI*` value) or allocating for it (`--width 100000`); references
were typed by their file names (an `.mkv` video or a `.wav` audio reference was opened as an
image). Now: one line, exit 2, before the pipeline runs, with upstream's own message where
upstream has the check; references typed by content, audio ones included.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from prenoise.cli.commands import main
from prenoise.integrations.vllm_omni import verification
from prenoise.integrations.vllm_omni.preflight import VerifyInputError, reference_kind
from prenoise.integrations.vllm_omni.settings import ENABLE_ENV, MISMATCH_ENV, NEXT_OUTPUT_ENV
from prenoise.integrations.vllm_omni.standins import StandInHooks, synthetic_audio
from prenoise.integrations.vllm_omni.verification import H3Request, verify_request

GUIDES = "vllm_omni.model_executor.models.minimax_h3.timeline_guides"


def needs_ffmpeg() -> None:
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        pytest.skip("ffmpeg/ffprobe not installed (make setup-vllm-omni installs them with apt)")


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", *args], check=True)


def video(
    path: Path, *, seconds: float = 2.5, size: str = "320x256", codec: str = "libx264"
) -> Path:
    """An ffmpeg test-pattern video with a tone (the container follows `path`'s suffix)."""
    needs_ffmpeg()
    ffmpeg(
        "-f", "lavfi", "-i", f"testsrc=size={size}:rate=24:duration={seconds}",
        "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}:sample_rate=16000",
        "-c:v", codec, "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path),
    )  # fmt: skip
    return path


def renamed(source: Path, target: Path) -> Path:
    shutil.copyfile(source, target)
    return target


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("media")


@pytest.fixture
def no_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command must refuse before it runs either arm."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the pipeline ran for input that should have been refused first")

    monkeypatch.setattr(verification, "verify_request", refuse)


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command, expecting exit 2, one line and nothing written; the line's message."""
    out = tmp_path / "report" / "v.json"
    capsys.readouterr()
    status = main(["vllm-omni-verify", "--steps", "1", *argv, "--json", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 2, lines
    assert not (tmp_path / "report").exists()  # no report, no temporary file, no directory
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0].removeprefix("error: ")


# -- the request --------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_pipeline")
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # upstream's own validation, its messages unchanged
        (["--duration", "2"], "MiniMax H3 output duration must be in [4, 15] seconds, got 2.0"),
        (["--duration", "15.5"], "MiniMax H3 output duration must be in [4, 15] seconds, got 15.5"),
        (["--duration", "nan"], "MiniMax H3 output duration must be in [4, 15] seconds, got nan"),
        (["--width", "100000"], "MiniMax H3 canvas aspect ratio must be in [1:4, 4:1]"),
        (["--width", "16"], "invalid MiniMax H3 canvas 0x256"),
        (["--outputs", "11"], "MiniMax H3 num_outputs_per_prompt must be in [1, 10], got 11"),
        (["--outputs", "0"], "MiniMax H3 num_outputs_per_prompt must be in [1, 10], got 0"),
        # prenoise's
        (
            ["--width", "100000", "--height", "100000"],
            "canvas 100000x100000 (10000000000 pixels) is over 1032192 pixels",
        ),
        (["--seed", str(-(2**63) - 1)], f"seed {-(2**63) - 1} is outside torch's seed range"),
        (["--seed", str(2**64)], f"seed {2**64} is outside torch's seed range"),
        (["--seed", str(2**64 - 1), "--outputs", "2"], f"seed + outputs - 1 = {2**64} is outside"),
        (["--steps", "0"], "--steps 0: expected 1..1000 (upstream needs at least 1"),
        # issue 42: ran ~10 min before upstream's own ValueError
        (["--steps", "100000000"], "--steps 100000000: expected 1..1000"),
        (["--steps", "1001"], "--steps 1001: expected 1..1000"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_bad_request_is_refused_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert refused(tmp_path, capsys, *argv).startswith(message)


@pytest.mark.usefixtures("no_pipeline")
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        # every command checks the PRENOISE_* variables at start-up (prenoise.guards.env)
        (ENABLE_ENV, "maybe", "PRENOISE_VLLM_OMNI='maybe' is not a known value (accepted: 0, 1"),
        (MISMATCH_ENV, "never", "PRENOISE_VLLM_OMNI_ON_MISMATCH='never' is not a known value"),
        (NEXT_OUTPUT_ENV, "yes", "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT='yes' is not a known"),
        (ENABLE_ENV, "0", "plugin disabled by PRENOISE_VLLM_OMNI=0: nothing to verify"),
    ],
)
def test_bad_setting_is_refused_before_running(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
    message: str,
) -> None:
    monkeypatch.setenv(name, value)
    assert refused(tmp_path, capsys).startswith(message)


@pytest.mark.usefixtures("no_pipeline")
def test_unwritable_json_is_refused_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("")
    destinations = {
        tmp_path / "a-directory": "is a directory",
        tmp_path / "a-file" / "v.json": "is a file, not a directory",
    }
    if Path("/proc/self").is_dir():  # writable by os.access even for root, yet not writable
        destinations[Path("/proc/prenoise-verify.json")] = "directory /proc is not writable"
    for destination, message in destinations.items():
        status = main(["vllm-omni-verify", "--json", str(destination)])
        [line] = capsys.readouterr().out.strip().splitlines()
        assert status == 2 and line.startswith(f"error: --json {destination}") and message in line


def test_request_upstream_refuses_while_preparing_media_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], media: Path
) -> None:
    """What only upstream's media preparation checks (two reference videos over 15 s together)
    is refused by upstream inside the run: still its message, one line, exit 2, no report."""
    long = video(media / "eight-seconds.mp4", seconds=8.0)
    message = refused(tmp_path, capsys, "--reference", str(long), "--reference", str(long))
    assert message == "reference videos must be at most 15 seconds in total"


def test_an_arm_failing_alone_is_an_internal_error(
    tmp_path: Path, image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream refusing a request only with the plugin on is prenoise's fault, not bad input."""
    from vllm_omni.errors import OmniClientError

    run_arm = verification.run_arm

    def plugin_on_refused(request: H3Request, *, plugin_on: bool, **kwargs: object) -> object:
        if plugin_on:
            raise OmniClientError("stand-in refusal")
        return run_arm(request, plugin_on=plugin_on, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verification, "run_arm", plugin_on_refused)
    with pytest.raises(RuntimeError, match="the plugin-on arm failed on a request the plugin-off"):
        verify_request(H3Request((image_ref,), steps=1))
    out = tmp_path / "v.json"
    assert main(["vllm-omni-verify", "--steps", "1", "--json", str(out)]) == 70
    assert not out.exists()


# -- reference files ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def text_as_png(media: Path) -> Path:
    path = media / "notes.png"
    path.write_text("not a picture\n")
    return path


def test_a_text_file_named_png_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text_as_png: Path
) -> None:
    message = refused(tmp_path, capsys, "--reference", str(text_as_png))
    assert message == (
        f"reference {text_as_png}: not an image, video or audio file (neither Pillow nor PyAV "
        "can read it)"
    )


def _png_header(path: Path, width: int, height: int) -> Path:
    """A PNG whose header declares `width` x `height` (1-bit gray) and whose data is one byte:
    what a decoder would allocate for, Pillow refuses to open as a decompression bomb."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)
    return path


@pytest.mark.usefixtures("no_pipeline")
def test_an_image_over_upstreams_size_is_refused_from_its_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], media: Path
) -> None:
    """Issue 42: a PNG declaring 100000x100000 was Pillow's DecompressionBombError, an internal
    error. Now one line, exit 2, from the header alone (before the command imports vLLM-Omni:
    7 s instead of 54 s on a busy 2-core machine)."""
    bomb = _png_header(media / "bomb.png", 100_000, 100_000)
    big = _png_header(media / "big.png", 7000, 7000)
    line = refused(tmp_path, capsys, "--reference", str(bomb))
    assert line == (
        f"reference {bomb}: an image of more than 178956970 pixels, read from its header "
        "(nothing decoded), over the largest image upstream takes (5760x5760: 256..5760 px a "
        "side); use a smaller image"
    )
    assert refused(tmp_path, capsys, "--reference", str(big)).startswith(
        f"reference {big}: an image of 7000x7000 (49000000 pixels), read from its header"
    )


@pytest.mark.usefixtures("no_pipeline")
def test_request_kinds_refuse_references_they_cannot_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image_ref: Path, video_ref: Path
) -> None:
    image, clip = str(image_ref), str(video_ref)
    cases = {
        ("t2va", image): "--kind t2va: a text-only request takes no --reference",
        ("fl2va", clip): "--kind fl2va: the keyframes are 1 or 2 --reference images (first, or "
        "first and last), got video",
        ("fl2va", image, image, image): "--kind fl2va: the keyframes are 1 or 2 --reference "
        "images (first, or first and last), got image, image, image",
    }
    if importlib.util.find_spec(GUIDES) is None:
        cases[("guided", image)] = (
            "--kind guided: this vllm-omni has no timeline guides (new in vllm-omni 0.32.0rc1); "
            "pick another --kind"
        )
    else:
        cases[("guided", clip)] = "--kind guided: the guide is the first --reference image"
    for (kind, *paths), message in cases.items():
        argv = [arg for path in paths for arg in ("--reference", path)]
        assert refused(tmp_path, capsys, "--kind", kind, *argv) == message, kind


@pytest.mark.usefixtures("no_pipeline")
def test_bad_reference_files_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], media: Path, image_ref: Path
) -> None:
    truncated = media / "truncated.png"
    truncated.write_bytes(image_ref.read_bytes()[:2000])
    small = media / "small.png"
    Image.new("RGB", (200, 200), "red").save(small)
    gif = media / "picture.gif"
    Image.new("RGB", (320, 320), "red").save(gif)
    empty = media / "empty.jpg"
    empty.write_bytes(b"")
    cases = {
        (str(truncated),): f"reference {truncated}: cannot decode the image",
        (str(small),): "reference image dimensions must be in [256, 5760] pixels, got 200x200",
        (
            str(gif),
        ): "MiniMax H3 reference image must use JPG, JPEG, PNG, WEBP, HEIC, or HEIF, got GIF",
        (str(empty),): f"reference {empty}: not an image, video or audio file",
        (str(media),): f"reference {media}: is a directory",
        (str(image_ref),) * 10: "ref2va accepts at most 9 image references",
    }
    for paths, message in cases.items():
        argv = [arg for path in paths for arg in ("--reference", path)]
        assert refused(tmp_path, capsys, *argv).startswith(message), paths


@pytest.mark.usefixtures("no_pipeline")
def test_bad_video_and_audio_references_get_upstreams_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], media: Path, image_ref: Path
) -> None:
    matroska = video(media / "real.mkv")
    short_audio = synthetic_audio(media / "short.wav", seconds=1.0)
    truncated = media / "truncated.mp4"
    truncated.write_bytes(video(media / "whole.mp4").read_bytes()[:4000])
    cases = {
        (matroska,): "reference video 0 must use an MP4 or MOV container, got matroska, webm",
        (video(media / "mpeg4.mp4", codec="mpeg4"),): "reference video 0 must use H.264 or H.265",
        (video(media / "short.mp4", seconds=1.0),): "reference video 0 duration must be in [2, 15]",
        (
            video(media / "small.mp4", size="200x200"),
        ): "reference video 0 dimensions must be in [256",
        (
            image_ref,
            short_audio,
        ): "reference audio 0 duration must be in [2, 15] seconds, got 1.000",
        (short_audio,): "ref2va requires at least one image or video reference",
        (truncated,): f"reference {truncated}: not an image, video or audio file",
    }
    for paths, message in cases.items():
        argv = [arg for path in paths for arg in ("--reference", str(path))]
        assert refused(tmp_path, capsys, *argv).startswith(message), paths


def test_references_are_typed_by_content(media: Path, image_ref: Path, text_as_png: Path) -> None:
    jpeg = media / "photo.jpeg"
    Image.open(image_ref).convert("RGB").save(jpeg)
    wav = synthetic_audio(media / "tone.wav")
    kinds = {
        image_ref: "image",
        renamed(image_ref, media / "png-named.jpg"): "image",
        renamed(jpeg, media / "jpeg-named.bin"): "image",
        wav: "audio",
        renamed(wav, media / "wav-named.png"): "audio",
        renamed(wav, media / "wav-without-suffix"): "audio",
    }
    if shutil.which("ffmpeg") is not None:
        mp4 = video(media / "clip.mp4")
        mp3 = media / "cover-art.mp3"  # an attached picture is a video stream to PyAV
        ffmpeg(
            "-i", str(wav), "-i", str(image_ref), "-map", "0", "-map", "1",
            "-c:a", "libmp3lame", "-c:v", "mjpeg", "-disposition:v", "attached_pic", str(mp3),
        )  # fmt: skip
        kinds |= {
            mp4: "video",
            renamed(mp4, media / "mp4-named.mkv"): "video",
            renamed(mp4, media / "mp4-named.wav"): "video",
            video(media / "matroska.mkv"): "video",  # a video (upstream refuses its container)
            mp3: "audio",
        }
    assert {path: reference_kind(path) for path in kinds} == kinds
    with pytest.raises(VerifyInputError, match="not an image, video or audio file"):
        reference_kind(text_as_png)


def test_video_named_mkv_and_wav_audio_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], video_ref: Path, media: Path
) -> None:
    """An MP4 saved under a `.mkv` name (upstream accepts MP4/MOV containers, by content) and
    a `.wav` audio reference: typed right, bitwise equal, the plugin arm prepared ahead."""
    mkv = renamed(video_ref, media / "reference-video.mkv")
    wav = synthetic_audio(media / "reference-audio.wav")
    out = tmp_path / "v.json"
    argv = ["--steps", "1", "--reference", str(mkv), "--reference", str(wav), "--json", str(out)]
    status = main(["vllm-omni-verify", *argv])
    assert status == 0, capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["verified"] and report["prepared"] and report["equal"]
    assert len(report["geometry"]["condition_shapes"]) == 1  # the video: one visual condition
    # the video's soundtrack and the wav: two audio conditions in the anchor
    assert report["fields"]["denoise.audio_anchor"]["shape"] is not None


def test_renamed_image_and_audio_verify(media: Path, image_ref: Path) -> None:
    needs_ffmpeg()  # upstream probes audio references with ffprobe
    image = renamed(image_ref, media / "reference-image.dat")
    audio = renamed(synthetic_audio(media / "a.wav", seconds=3.0), media / "reference-audio.png")
    result = verify_request(H3Request((audio, image), seed=7, steps=1))
    assert result.verified, result.summary()
    [(t, _, _)] = result.off.geometry["condition_shapes"]  # the image
    assert t == 1
    anchor = result.off.fields["denoise.audio_anchor"]
    assert anchor is not None and anchor.shape[0] == 2 * 3 * 40  # 3 s of stereo rows, 40/s
    for name in ("initial_video_noise", "initial_audio_noise", "visual_condition_noise"):
        assert result.on.drawn_on[name].startswith("prenoise-vllm-omni")


@pytest.mark.parametrize("seed", [-1, -(2**63)])
def test_a_negative_seed_upstream_accepts_is_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """Upstream takes any seed torch's manual_seed takes (torch maps s < 0 to 2^64 + s)."""
    out = tmp_path / "v.json"
    status = main(["vllm-omni-verify", "--steps", "1", "--seed", str(seed), "--json", str(out)])
    assert status == 0, capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["verified"] and report["prepared"] and report["equal"]


def test_a_mismatch_raised_by_the_plugin_arm_is_not_verified_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    video_ref: Path,
) -> None:
    """With PRENOISE_VLLM_OMNI_ON_MISMATCH=raise a missed shape raises in the plugin arm alone:
    a finding about the plugin (exit 1), not bad input (2) and not a crash (70)."""
    missed = StandInHooks(video_latent_t_offset=1)  # the encoded video is one latent longer
    monkeypatch.setattr(
        verification, "verify_request", functools.partial(verification.verify_request, hooks=missed)
    )
    monkeypatch.setenv("PRENOISE_VLLM_OMNI_ON_MISMATCH", "raise")
    out = tmp_path / "v.json"
    capsys.readouterr()
    argv = ["--steps", "1", "--reference", str(video_ref), "--json", str(out)]
    assert main(["vllm-omni-verify", *argv]) == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert printed.startswith(
        "NOT VERIFIED: the plugin-on arm raised PredictionMismatchError "
        "(PRENOISE_VLLM_OMNI_ON_MISMATCH=raise), upstream did not:"
    ), printed
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_device_as_reference_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(tmp_path, capsys, "--reference", "/dev/zero")
    assert line == "reference /dev/zero: not a regular file (a character device)", line
