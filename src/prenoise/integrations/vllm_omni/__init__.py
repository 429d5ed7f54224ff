"""prenoise inside vLLM-Omni's MiniMax-H3 pipeline: overlapped, bit-identical noise preparation.

Installed by the `vllm_omni.general_plugins` entry point `prenoise` (`plugin.register`), which
vLLM-Omni loads in every process that builds a pipeline. Settings (environment variables, see
`settings`): `PRENOISE_VLLM_OMNI=0` turns it off, `PRENOISE_VLLM_OMNI_ON_MISMATCH=serial|raise`,
`PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=1`. Nothing here imports vllm-omni until a function
that needs it is called.
"""

from prenoise.integrations.vllm_omni.plugin import (
    SUPPORTED_VERSIONS,
    install,
    is_installed,
    register,
    uninstall,
)
from prenoise.integrations.vllm_omni.settings import PluginSettings, SettingsError

__all__ = [
    "SUPPORTED_VERSIONS",
    "PluginSettings",
    "SettingsError",
    "install",
    "is_installed",
    "register",
    "uninstall",
]
