"""SGLang 0.5.23's real MiniMax-H3 stages on the CPU, no checkpoint (`make pytest-sglang`).

Skipped where sglang is not installed (the main venv). Every sglang import costs ~15-45 s, so
the whole package is imported once per session (`h3`), and the plugin is loaded the way SGLang's
workers load it: `load_plugins(); apply_plugin_hooks()` (the real entry point).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("sglang")


class ServerArgs(SimpleNamespace):
    """The stand-in server args upstream's unit tests use (`test/unit/conftest.py`), plus what
    the H3 denoising stage reads."""


def _server_args() -> ServerArgs:
    dit = SimpleNamespace(
        hidden_size=64,
        num_attention_heads=4,
        boundary_ratio=None,
        arch_config=SimpleNamespace(in_channels=16, patch_size=2),
    )
    pipeline = SimpleNamespace(
        dit_config=dit,
        dit_precision="bfloat16",
        vae_precision="bfloat16",
        get_latent_dtype=lambda dtype: dtype,
        uses_subblock_attention=lambda _sa: False,
    )
    return ServerArgs(
        attention_backend=None,
        attention_backend_config=None,
        component_attention_backends=None,
        comfyui_mode=False,
        disable_autocast=False,
        enable_cfg_parallel=False,
        enable_breakable_cuda_graph=False,
        enable_layerwise_nvtx_marker=False,
        enable_torch_compile=False,
        kv_gather_degree=1,
        sp_split_auto=False,
        model_loaded={},
        model_paths={},
        pipeline_config=pipeline,
    )


@pytest.fixture(scope="session")
def h3() -> Any:
    """Upstream's modules, the server args, and the plugin loaded by SGLang's own loader."""
    from sglang.multimodal_gen.configs.sample.minimax_h3 import MiniMaxH3SamplingParams
    from sglang.multimodal_gen.runtime import server_args as server_args_module
    from sglang.multimodal_gen.runtime.pipelines import minimax_h3_pipeline
    from sglang.multimodal_gen.runtime.pipelines_core import composed_pipeline_base
    from sglang.multimodal_gen.runtime.pipelines_core.schedule_batch import Req
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3 import (  # noqa: E501
        prequeue,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.stages import (  # noqa: E501
        denoising,
        latent_preparation,
        timestep_preparation,
        visual_encoding,
    )
    from sglang.multimodal_gen.runtime.platforms import plugins

    plugins.load_plugins()
    plugins.apply_plugin_hooks()
    args = _server_args()
    previous = server_args_module._global_server_args
    server_args_module.set_global_server_args(args)
    yield SimpleNamespace(
        SA=args,
        Req=Req,
        SamplingParams=MiniMaxH3SamplingParams,
        prepare_for_queue=prequeue.minimax_h3_prepare_for_queue,
        Pipeline=minimax_h3_pipeline.MiniMaxH3Pipeline,
        ComposedPipelineBase=composed_pipeline_base.ComposedPipelineBase,
        LatentStage=latent_preparation.MiniMaxH3LatentPreparationStage,
        TimestepStage=timestep_preparation.MiniMaxH3TimestepPreparationStage,
        DenoisingStage=denoising.MiniMaxH3DenoisingStage,
        VisualStage=visual_encoding.MiniMaxH3VisualEncodingStage,
        plugins=plugins,
    )
    server_args_module.set_global_server_args(previous)
