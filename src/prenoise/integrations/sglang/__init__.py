"""prenoise inside SGLang's diffusion runtime (`sglang.multimodal_gen`): MiniMax-H3's initial
and visual-condition noise, and the initial noise of Wan, HunyuanVideo and LTX-2 on CPU
generators, drawn on a request-owned worker while the encoders run, and MiniMax-H3's rollout
noise on a CPU generator drawn one step ahead, bit-identical to upstream; opt-in, MiniMax-H3's
noise in a named noise stream (`PRENOISE_SGLANG_NOISE_STREAM`).

Loaded by the `sglang.multimodal_gen.plugins` entry point `prenoise` (`plugin.register`).
`PRENOISE_SGLANG=0` turns it off. Nothing here imports SGLang's runtime until a hook runs.
"""

from prenoise.integrations.sglang.plugin import ENABLE_ENV, register

__all__ = ["ENABLE_ENV", "register"]
