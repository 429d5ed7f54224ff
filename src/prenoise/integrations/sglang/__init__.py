"""prenoise inside SGLang's diffusion runtime (`sglang.multimodal_gen`): MiniMax-H3's initial
and visual-condition noise drawn on a request-owned worker while the encoders run,
bit-identical to upstream.

Loaded by the `sglang.multimodal_gen.plugins` entry point `prenoise` (`plugin.register`).
`PRENOISE_SGLANG=0` turns it off. Nothing here imports SGLang's runtime until a hook runs.
"""

from prenoise.integrations.sglang.plugin import ENABLE_ENV, register

__all__ = ["ENABLE_ENV", "register"]
