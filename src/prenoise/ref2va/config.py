"""Pydantic configs: model sizes (:class:`ModelConfig`) and requests (:class:`Recipe`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from prenoise.guards.devices import check_device
from prenoise.guards.documents import DocumentError, load_yaml, read_document
from prenoise.guards.path_checks import check_path
from prenoise.guards.seeds import check_seed_range
from prenoise.noise.streams import NoiseStreamError, stream_status
from prenoise.ref2va import catalog, geometry
from prenoise.ref2va.audio_vae import AudioVAEConfig
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.text_encoder import TextEncoderConfig
from prenoise.ref2va.transformer import TransformerConfig
from prenoise.ref2va.video_vae import VideoVAEConfig

DEFAULT_FRAMES = 124
"""Default Ref2VA length in frames when a recipe gives neither duration nor frames."""


class RecipeError(ValueError):
    """A recipe file is missing, not YAML, or invalid; one line naming the file and the key."""


OsPath = Annotated[Path, AfterValidator(check_path)]
"""A path the OS accepts as a name (no NUL byte, components within 255 bytes): refused as the
recipe's field, not later as `ValueError`/`ENAMETOOLONG` from whatever first opens it."""


class ModelConfig(BaseModel):
    """Sizes of every Ref2VA component plus the weight-initialisation seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: TextEncoderConfig = Field(
        default=TextEncoderConfig(), description="the T5-style text encoder's sizes"
    )
    video_vae: VideoVAEConfig = Field(
        default=VideoVAEConfig(), description="the video VAE's sizes (24 latent channels, /16)"
    )
    audio_vae: AudioVAEConfig = Field(
        default=AudioVAEConfig(), description="the audio VAE's sizes (latents at 40 Hz)"
    )
    transformer: TransformerConfig = Field(
        default=TransformerConfig(), description="the joint video/audio transformer's sizes"
    )
    init_seed: int = Field(
        default=0, description="seed of the random weights (used when no checkpoint is given)"
    )


class SyntheticSpec(BaseModel):
    """How to create a missing reference file (a moving pattern with a tone)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    seconds: float = Field(default=2.0, gt=0, description="length of the file written")
    width: int = Field(default=256, ge=32, description="frame width in pixels")
    height: int = Field(default=160, ge=32, description="frame height in pixels")


class ReferenceSpec(BaseModel):
    """One reference medium: an image, a video (with its audio track) or an audio clip."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["image", "video", "audio"] = Field(
        description="image and video give a visual condition; a video's soundtrack and an audio "
        "clip give an audio condition"
    )
    path: OsPath = Field(description="the file, relative to the current directory")
    synthetic: SyntheticSpec | None = Field(
        default=None, description="when the file is missing, write a synthetic one of this size"
    )
    use_audio: bool = Field(default=True, description="a video's soundtrack conditions the audio")
    max_seconds: float | None = Field(
        default=None, gt=0, description="use at most this many seconds of a video or audio clip"
    )

    @property
    def is_visual(self) -> bool:
        """Whether this reference gives a visual condition (images and videos)."""
        return self.kind in ("image", "video")


class ParallelConfig(BaseModel):
    """Parallel layout of a request run under ``torchrun`` (see ``prenoise.distributed``).

    ``ranks`` must equal ``WORLD_SIZE`` when given; ``text_encoder_tp = k > 1`` shards the text
    encoder's heads and feed-forward over groups of ``k`` consecutive ranks (Megatron style;
    embeddings within 1e-5 of the replicated encoder); ``timeout_s`` bounds every wait for
    another rank.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    ranks: int | None = Field(
        default=None, ge=1, description="must equal torchrun's WORLD_SIZE when given"
    )
    text_encoder_tp: int = Field(
        default=1, ge=1, description="shard the text encoder over groups of this many ranks"
    )
    sequence_parallel: bool = Field(
        default=True, description="split the transformer's sequence over the ranks"
    )
    host_shared_noise: bool = Field(
        default=True,
        description="the ranks of one host split the draws and map one copy from shared memory",
    )
    timeout_s: float = Field(
        default=300.0, gt=0, description="the longest wait for another rank, in seconds"
    )


SHIFT_MIN, SHIFT_MAX = 0.01, 100.0
"""Where the sigma shift `shift·s / (1 + (shift − 1)·s)` is defined in float32 for every `s` in
[0, 1] with room to spare (1e308 overflowed to inf/inf, 1e-30 gave 0/0: NaN, found only by the
MP4 encoder after the whole run). Defaults: 12 (video) and 3 (audio)."""

MAX_NAME_SUFFIX = 9999
"""The longest output-index suffix checked when a name must fit a file name (`NAME-9999.mp4`)."""


class Recipe(BaseModel):
    """One Ref2VA request: prompt, references, length, size, seed, sampling and outputs.

    ``noise_stream`` picks the arithmetic of the noise (``prenoise.noise.streams``): "native"
    (default, local torch's), or the opt-in cross-machine streams "x86" and "libm", which give
    the same noise for a seed on x86 and ARM hosts but differ from local torch on one of them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(default="ref2va", description="names the outputs: OUTPUT_DIR/NAME.mp4")
    prompt: str = Field(description="the text prompt")
    references: list[ReferenceSpec] = Field(
        default=[], description="reference media, in order (each key below)"
    )
    duration: float | None = Field(
        default=None, gt=0, description="seconds (24 fps, frames aligned up to 17k + 5)"
    )
    frames: int | None = Field(
        default=None, ge=1, description=f"frames instead of duration (neither: {DEFAULT_FRAMES})"
    )
    width: int | None = Field(
        default=None, ge=32, description="pixels, with height (floored to a multiple of 32)"
    )
    height: int | None = Field(
        default=None, ge=32, description="pixels, with width (floored to a multiple of 32)"
    )
    short_edge: int | None = Field(
        default=None, ge=32, description="instead of width+height: the short side in pixels"
    )
    aspect: str = Field(default="16:9", description="with short_edge: width:height")
    orientation: Literal["landscape", "portrait"] = Field(
        default="landscape", description="with short_edge: which side is the long one"
    )
    seed: int = Field(
        default=42, description="noise seed; output i uses seed + i (0 .. 2^64 - 1 for all)"
    )
    noise_stream: Literal["native", "x86", "libm"] = Field(
        default="native",
        description="noise arithmetic: local torch's, or the same on every machine (streams.md)",
    )
    steps: int = Field(default=50, ge=1, description="denoising steps")
    shift_video: float = Field(
        default=12.0, ge=SHIFT_MIN, le=SHIFT_MAX, description="the video sampler's sigma shift"
    )
    shift_audio: float = Field(
        default=3.0, ge=SHIFT_MIN, le=SHIFT_MAX, description="the audio sampler's sigma shift"
    )
    outputs: int = Field(default=1, ge=1, description="MP4s per request (NAME.mp4, NAME-1.mp4, …)")
    output_dir: OsPath = Field(default=Path("outputs"), description="where the MP4s go")
    tau_visual: float = Field(
        default=0.999, ge=0, le=1, description="how much of a visual condition is kept"
    )
    tau_audio: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="must be 1.0 (the contract has no audio-condition noise)",
    )
    device: str = Field(default="cpu", description="cpu, cuda or cuda:N")
    model: ModelConfig = Field(
        default=ModelConfig(), description="model sizes; a checkpoint's config must match"
    )
    checkpoint: OsPath | None = Field(
        default=None, description="directory with safetensors + config (none: random weights)"
    )
    parallel: ParallelConfig | None = Field(
        default=None, description="the layout under torchrun (distributed.md)"
    )
    limits: Limits = Field(
        default=Limits(), description="caps checked before heavy work (cli.md#limits)"
    )

    @field_validator("name")
    @classmethod
    def _plain_file_name(cls, name: str) -> str:
        """`name` names the outputs (`OUTPUT_DIR/NAME.mp4`, `NAME-1.mp4`, …): one plain file
        name, so every output stays in `output_dir`."""
        if name in ("", ".", "..") or any(c in name for c in "/\\\0"):
            raise ValueError(
                f"{name!r} is not a plain file name (no '/', '\\', NUL, '.' or '..'): it names "
                "OUTPUT_DIR/NAME.mp4"
            )
        longest = f"{name}-{MAX_NAME_SUFFIX}.mp4"
        if len(os.fsencode(longest)) > 255:
            raise ValueError(
                f"{len(os.fsencode(name))} bytes is too long: NAME-{MAX_NAME_SUFFIX}.mp4 must "
                "fit in a 255-byte file name"
            )
        return name

    @model_validator(mode="after")
    def _check(self) -> Recipe:
        """Exactly one way to give the length and the size."""
        if self.duration is not None and self.frames is not None:
            raise ValueError("give either duration or frames, not both")
        has_wh = self.width is not None or self.height is not None
        if has_wh and (self.width is None or self.height is None):
            raise ValueError("give both width and height")
        if has_wh and self.short_edge is not None:
            raise ValueError("give either width+height or short_edge, not both")
        if not has_wh and self.short_edge is None:
            raise ValueError("give width+height or short_edge")
        geometry.parse_aspect(self.aspect)
        return self

    @model_validator(mode="after")
    def _check_run(self) -> Recipe:
        """What the run would refuse late (after models load) is refused here instead."""
        check_seed_range(self.seed, self.outputs)  # every output's seed, not just the first
        check_device(self.device)
        if self.noise_stream != "native":
            # A stream this host cannot draw exactly is refused now, not after models load.
            try:
                status = stream_status(self.noise_stream)
            except NoiseStreamError as exc:
                raise ValueError(str(exc)) from None
            if not status.usable:
                raise ValueError(
                    f"noise_stream {self.noise_stream!r} is refused on this host: "
                    f"{status.float32_error}"
                )
        if self.tau_audio != 1.0:
            raise ValueError(
                f"tau_audio must be 1.0 (got {self.tau_audio}): the Ref2VA contract defines no "
                "noise for audio conditions"
            )
        return self

    def size(self) -> tuple[int, int]:
        """Output ``(width, height)``, floored to multiples of 32."""
        if self.width is not None and self.height is not None:
            return geometry.floor_size(self.width, self.height)
        assert self.short_edge is not None
        return geometry.size_from_short_edge(self.short_edge, self.aspect, self.orientation)

    def num_frames(self) -> int:
        """Output frames, aligned up to ``17k + 5``."""
        if self.duration is not None:
            return geometry.frames_for_duration(self.duration)
        return geometry.align_frames_17k5(self.frames or DEFAULT_FRAMES)

    def geometry(self) -> geometry.RequestGeometry:
        """The request's :class:`~prenoise.ref2va.geometry.RequestGeometry`: worked out once per
        request, by `plan_request`; everything downstream reads the plan's `geometry`."""
        width, height = self.size()
        return geometry.RequestGeometry.from_frames(self.num_frames(), width, height)

    def output_seed(self, index: int) -> int:
        """Seed of output ``index`` (``seed + index``)."""
        return self.seed + index


def _format_error(exc: ValidationError) -> str:
    """One-line summary of a pydantic validation error."""
    parts: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            where = ".".join(str(p) for p in err["loc"][:-1])
            parts.append(f"unknown key {err['loc'][-1]!r}" + (f" in {where}" if where else ""))
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def recipe_from_dict(data: Any, source: str = "<recipe>") -> Recipe:
    """Validate a mapping as a :class:`Recipe`, raising :class:`RecipeError` naming ``source``."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: a recipe must be a mapping, got {type(data).__name__}")
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(f"{source}: {_format_error(exc)}") from None


def load_recipe(path: str | os.PathLike[str], **overrides: Any) -> Recipe:
    """Read a YAML recipe; ``overrides`` replace top-level keys before validation.

    Read by `guards.documents.read_document`, as every entry point reads it (the CLI's
    `--recipe`, `serve --recipe`, the library): a regular file of at most 1 MiB, read in bounded
    chunks, so a device, a named pipe or a huge file is one `RecipeError`, never read whole."""
    p = Path(path)
    try:
        text = read_document(p)
    except FileNotFoundError as exc:
        names = ", ".join(catalog.shipped())
        raise RecipeError(
            f"{p}: cannot read recipe ({exc.strerror}); the shipped recipes are {names} "
            "(prenoise recipes lists them)"
        ) from None
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read recipe ({exc.strerror or exc})") from None
    except DocumentError as exc:  # not a regular file, too big, not UTF-8
        said = str(exc).replace("not a text file", "not a YAML text file")
        raise RecipeError(f"{p}: {said}") from None
    try:
        data = load_yaml(text)
    except DocumentError as exc:
        raise RecipeError(f"{p}: {exc}") from None
    if isinstance(data, dict):
        data = {**data, **overrides}
    return recipe_from_dict(data, str(p))
