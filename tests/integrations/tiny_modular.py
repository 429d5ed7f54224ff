"""Tiny diffusers *modular* pipelines (`diffusers.modular_pipelines`), built offline.

`ltx2_modular` and `_modular` are the package's (`prenoise.integrations.diffusers.tiny`, what
`prenoise demo diffusers --modular` runs). Each builder builds the matching classic tiny pipeline
(`diffusers_tiny.wan`, `diffusers_tiny.ltx2`, `tiny_hunyuan_video15.hunyuan_video15`), instantiates
the modular pipeline class (`SomeModularPipeline()` builds its `default_blocks_name` blocks and
creates the guiders and processors declared "from_config") and hands it the classic pipeline's
models, tokenizers and scheduler (`update_components`). The class is instantiated rather than
reached through `SomeBlocks().init_pipeline()`: that picks the class from the blocks' `model_name`
alone, so `Wan22Image2VideoBlocks().init_pipeline()` is a `WanImage2VideoModularPipeline` (and
`Wan22Blocks()`' a `WanModularPipeline`) unless a loaded config names a `boundary_ratio`. Everything
is built inside `torch.random.fork_rng()` with the global RNG seeded, as in `diffusers_tiny`, so
building never changes the caller's global RNG state and two builds are identical. Needs a diffusers
with modular Wan, LTX-2 and HunyuanVideo-1.5 pipelines (0.42.1); importing this module needs none
(conftest.py imports every `tiny_*.py`).

| name | pipeline class | workflow |
| --- | --- | --- |
| `wan_modular` | `WanModularPipeline` | Wan 2.1 text-to-video |
| `wan_i2v_modular` | `Wan22Image2VideoModularPipeline` | Wan 2.2 image-to-video (no CLIP) |
| `ltx2_modular` | `LTX2ModularPipeline` | LTX-2 text-to-video + audio |
| `ltx2_i2v_modular` | `LTX2ModularPipeline` | LTX-2 image-to-video + audio |
| `hunyuan_video15_modular` | `HunyuanVideo15ModularPipeline` | text-to-video |
| `hunyuan_video15_i2v_modular` | `HunyuanVideo15ModularPipeline` | image-to-video |

A call `pipe(**modular_call_kwargs(name, seed))` returns the whole `PipelineState`; the decoded
tensors are its values named in `OUTPUTS[name]` (`output_type="pt"`), and `"latents"` holds the
denoised latents.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

import diffusers_tiny
import tiny_hunyuan_video15
import torch
from diffusers_tiny import _seeded

from prenoise.integrations.diffusers.tiny import ltx2_modular
from prenoise.integrations.diffusers.tiny import modular as _modular

FTFY_MODULES = ("diffusers.modular_pipelines.wan.encoders",)
"""Modules that call `ftfy.fix_text` without importing ftfy when it is not installed (0.42.1),
like the classic Wan modules conftest.py stubs."""

OUTPUTS: dict[str, tuple[str, ...]] = {
    "wan_modular": ("videos",),
    "wan_i2v_modular": ("videos",),
    "ltx2_modular": ("videos", "audio"),
    "ltx2_i2v_modular": ("videos", "audio"),
    "hunyuan_video15_modular": ("videos",),
    "hunyuan_video15_i2v_modular": ("videos",),
}
"""The `PipelineState` values a call decodes, per builder name."""


def stub_ftfy() -> None:
    """Give `FTFY_MODULES` an identity `ftfy` where ftfy is not installed (both arms of every
    comparison see the same module, so the stub never separates them)."""
    stub = types.SimpleNamespace(fix_text=lambda text: text)
    for name in FTFY_MODULES:
        module = importlib.import_module(name)
        if not hasattr(module, "ftfy"):
            module.ftfy = stub


def wan_modular(image_to_video: bool = False) -> Any:
    """`WanModularPipeline` (2.1 text-to-video) or, with `image_to_video`,
    `Wan22Image2VideoModularPipeline` (2.2 A14B layout: the same transformer for both noise
    stages, no CLIP image encoder), from `diffusers_tiny.wan`'s components."""
    from diffusers import Wan22Image2VideoModularPipeline, WanModularPipeline

    stub_ftfy()
    classic = diffusers_tiny.wan(image_to_video=image_to_video)
    with _seeded():
        if image_to_video:
            return _modular(
                Wan22Image2VideoModularPipeline, classic, transformer_2=classic.transformer
            )
        return _modular(WanModularPipeline, classic)


def hunyuan_video15_modular(image_to_video: bool = False) -> Any:
    """`HunyuanVideo15ModularPipeline` from `tiny_hunyuan_video15.hunyuan_video15`'s components
    (with `image_to_video`: the image-to-video transformer, SigLIP encoder and processor; the
    class is the same, the `image` input selects the workflow). The modular class's token
    budgets and prompt crop are read-only properties (1000, 256 and 108 tokens), unlike the
    classic tiny pipeline's 16, 16 and 0: the tiny encoders run on the padded budgets."""
    from diffusers import HunyuanVideo15ModularPipeline

    classic = tiny_hunyuan_video15.hunyuan_video15(image_to_video=image_to_video)
    with _seeded():
        return _modular(HunyuanVideo15ModularPipeline, classic)


diffusers_tiny.BUILDERS.update(
    wan_modular=wan_modular,
    wan_i2v_modular=lambda: wan_modular(image_to_video=True),
    ltx2_modular=ltx2_modular,
    ltx2_i2v_modular=ltx2_modular,
    hunyuan_video15_modular=hunyuan_video15_modular,
    hunyuan_video15_i2v_modular=lambda: hunyuan_video15_modular(image_to_video=True),
)


def modular_call_kwargs(name: str, seed: int = 0, prompts: int = 1) -> dict[str, Any]:
    """Small call arguments for the tiny modular pipeline `name`, with
    `generator=torch.Generator("cpu").manual_seed(seed)` and `output_type="pt"`. `prompts > 1`:
    a list of prompts (Wan, LTX-2; HunyuanVideo-1.5's VAE cannot decode a batch and its modular
    decoder has no latent output, so it takes one prompt)."""
    if name not in OUTPUTS:
        raise KeyError(f"no tiny modular pipeline {name!r} (known: {', '.join(OUTPUTS)})")
    prompt: str | list[str] = "a cat dance on the moon"
    if prompts > 1:
        if name.startswith("hunyuan_video15"):
            raise ValueError(f"{name} takes one prompt")
        prompt = [f"a {w} in the sky" for w in diffusers_tiny.WORDS[1 : prompts + 1]]
    kwargs: dict[str, Any] = {
        "prompt": prompt,
        "negative_prompt": "bad",
        "num_inference_steps": 2,
        "output_type": "pt",
        "generator": torch.Generator("cpu").manual_seed(seed),
    }
    if name.startswith("wan"):
        kwargs.update(height=32, width=32, num_frames=5, max_sequence_length=16)
    elif name.startswith("ltx2"):
        kwargs.update(height=32, width=32, num_frames=5, frame_rate=25.0, max_sequence_length=16)
        kwargs.update(decode_timestep=0.05, decode_noise_scale=0.025)
    else:
        kwargs.update(num_frames=5)
        if "i2v" not in name:
            kwargs.update(height=16, width=16)  # image-to-video: from the image (target size)
    if "i2v" in name:
        kwargs["image"] = diffusers_tiny.image(0, 16 if name.startswith("hunyuan") else 32)
        if name.startswith("ltx2"):
            kwargs["image_crf"] = 0  # no H.264 re-compression of the image
    return kwargs
