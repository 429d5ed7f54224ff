"""Wan, LTX-2 and HunyuanVideo-1.5 modular pipelines with prenoise enabled: the initial noise
prepared ahead, every output bit, the caller's generator(s) and the global RNG as the plain call
leaves them. Both arms run in this process on one tiny pipeline (`tiny_modular.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("diffusers.modular_pipelines.hunyuan_video1_5")

import diffusers
import tiny_modular
from test_diffusers_modular_h3 import assert_states_equal, both_arms

from prenoise.integrations.diffusers import disable, supported_modular

BUILDERS: dict[str, Callable[[], Any]] = {
    "wan_modular": tiny_modular.wan_modular,
    "wan_i2v_modular": lambda: tiny_modular.wan_modular(image_to_video=True),
    "ltx2_modular": tiny_modular.ltx2_modular,
    "hunyuan_video15_modular": tiny_modular.hunyuan_video15_modular,
    "hunyuan_video15_i2v_modular": lambda: tiny_modular.hunyuan_video15_modular(
        image_to_video=True
    ),
}
PLANNED = {
    "wan_modular": ("noise",),
    "wan_i2v_modular": ("noise",),
    "ltx2_modular": ("video", "audio"),
    "hunyuan_video15_modular": ("noise",),
    "hunyuan_video15_i2v_modular": ("noise",),
}
_pipes: dict[str, Any] = {}


def pipeline(name: str) -> Any:
    if name not in _pipes:
        try:
            _pipes[name] = BUILDERS[name]()
        except ImportError as error:  # a diffusers without this modular family
            pytest.skip(f"{name} cannot be built on diffusers {diffusers.__version__}: {error}")
    pipe = _pipes[name]
    disable(pipe)
    return pipe


@pytest.fixture(autouse=True)
def _ftfy() -> None:
    tiny_modular.stub_ftfy()


@pytest.mark.parametrize("seed", [0, 9])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_initial_noise_prepared_bitwise(name: str, seed: int) -> None:
    pipe = pipeline(name)
    plain, out, report = both_arms(pipe, lambda: tiny_modular.modular_call_kwargs(name, seed))
    assert_states_equal(plain, out)
    assert report.overlapped and report.planned == PLANNED[name], report
    assert report.served == len(PLANNED[name]) and report.left_plan is None
    path = f"{type(pipe).__module__}.{type(pipe).__qualname__}"
    assert path in supported_modular()


@pytest.mark.parametrize("name", ["wan_modular", "ltx2_modular"])
def test_two_prompts_with_a_generator_list(name: str) -> None:
    def kwargs() -> dict[str, Any]:
        kw = tiny_modular.modular_call_kwargs(name, 3, prompts=2)
        kw["generator"] = [torch.Generator().manual_seed(3), torch.Generator().manual_seed(4)]
        return kw

    pipe = pipeline(name)
    plain, out, report = both_arms(pipe, kwargs)
    assert_states_equal(plain, out)
    assert report.served == len(PLANNED[name])


def test_wan_two_videos_per_prompt() -> None:
    pipe = pipeline("wan_modular")
    make = lambda: {  # noqa: E731
        **tiny_modular.modular_call_kwargs("wan_modular", 5),
        "num_videos_per_prompt": 2,
    }
    plain, out, report = both_arms(pipe, make)
    assert_states_equal(plain, out)
    assert report.served == 1


def test_wan_caller_latents_run_plain() -> None:
    """Caller latents: no draw to prepare, the plain call, the same bits."""
    pipe = pipeline("wan_modular")
    shape = (1, int(pipe.num_channels_latents), 2, 4, 4)
    noise = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    make = lambda: {  # noqa: E731
        **tiny_modular.modular_call_kwargs("wan_modular", 1),
        "latents": noise.clone(),
    }
    plain, out, report = both_arms(pipe, make)
    assert_states_equal(plain, out)
    assert not report.overlapped and report.reason == "caller-supplied latents"
