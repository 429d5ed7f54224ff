"""Where the plugin's log lines go inside vLLM's processes.

vLLM configures a handler for its own `vllm` logger only (`propagate=False`), so a record on
`prenoise.vllm_omni` reaches no handler in `vllm serve`: Python's last-resort handler prints
warnings without vLLM's format and drops INFO. `route_to_vllm_logging` hands the plugin's
records to the `vllm` logger's handlers instead — vLLM's format, stream and level — unless the
application already configured logging for prenoise (a handler on `prenoise`,
`prenoise.vllm_omni` or the root logger), which is then left exactly as it is.
"""

from __future__ import annotations

import logging

__all__ = ["PLUGIN_LOGGER", "VLLM_LOGGER", "VllmLogForwarder", "route_to_vllm_logging"]

PLUGIN_LOGGER = "prenoise.vllm_omni"
VLLM_LOGGER = "vllm"


class VllmLogForwarder(logging.Handler):
    """Hands each record to the `vllm` logger's handlers (their levels and format apply)."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(VLLM_LOGGER).handle(record)


def route_to_vllm_logging() -> bool:
    """Show the plugin's lines in vLLM's log; True when they are routed there (idempotent).

    Does nothing when vLLM did not configure its logger (`VLLM_CONFIGURE_LOGGING=0`) or when
    the application configured a handler for prenoise's lines itself. When routed and no level
    was set on `prenoise` or `prenoise.vllm_omni`, the plugin logger takes the `vllm` logger's
    level (`VLLM_LOGGING_LEVEL`, INFO by default), so its INFO lines show as vLLM's do.
    """
    plugin_logger = logging.getLogger(PLUGIN_LOGGER)
    if any(isinstance(h, VllmLogForwarder) for h in plugin_logger.handlers):
        return True
    vllm_logger = logging.getLogger(VLLM_LOGGER)
    if not vllm_logger.handlers or _configured_by_application(plugin_logger):
        return False
    plugin_logger.addHandler(VllmLogForwarder())
    package_logger = logging.getLogger("prenoise")
    if plugin_logger.level == logging.NOTSET and package_logger.level == logging.NOTSET:
        plugin_logger.setLevel(vllm_logger.getEffectiveLevel())
    return True


def _configured_by_application(logger: logging.Logger) -> bool:
    """True if `logger` or one of its ancestors (the root included) has a handler."""
    current: logging.Logger | None = logger
    while current is not None:
        if current.handlers:
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False
