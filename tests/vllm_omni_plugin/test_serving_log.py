"""What an operator sees in the ordinary `vllm serve --omni` log, with vLLM's default logging.

A process of its own does what a vLLM-Omni worker does — import vLLM (which configures its `vllm`
logger only: done once in the `vllm_forkserver` it is forked from, `forked.py`),
`load_omni_general_plugins()`, then serve requests — and its stdout (vLLM's stream)
must show, in vLLM's format: one line at install (prenoise and vllm-omni versions, settings) and
one line per request (prepared ahead and how many ms left the request thread, or why not).
"""

from __future__ import annotations

import logging
import os
import re
from multiprocessing.context import ForkServerContext
from pathlib import Path
from types import SimpleNamespace

import forked
import pytest

from prenoise.integrations.vllm_omni import logs
from prenoise.integrations.vllm_omni.request import DrawRecord, RequestPreparation
from prenoise.integrations.vllm_omni.settings import PluginSettings

_WORKER = """
import sys
from pathlib import Path
import vllm_omni.plugins as omni_plugins
omni_plugins.load_omni_general_plugins()
from prenoise.integrations.vllm_omni.verification import H3Request, run_forward
request = H3Request((Path(sys.argv[1]),), seed=int(sys.argv[2]), outputs=2)
run_forward(request, plugin_on=True)
run_forward(H3Request((Path(sys.argv[1]),), seed=2**64), plugin_on=True)
"""


def _worker_log(
    forkserver: ForkServerContext, image_ref: Path, tmp: Path, seed: int, **env: str
) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PRENOISE_")}
    environ.pop("VLLM_PLUGINS", None)
    environ = {**environ, "VLLM_LOGGING_COLOR": "0", **env}
    proc = forked.run(forkserver, _WORKER, [str(image_ref), str(seed)], environ, tmp)
    assert proc.returncode != 0  # the seed 2**64 request: upstream's own error ends the script
    assert "Overflow when unpacking long" in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_install_and_every_request_are_in_vllms_log(
    image_ref: Path, tmp_path: Path, vllm_forkserver: ForkServerContext
) -> None:
    stdout = _worker_log(vllm_forkserver, image_ref, tmp_path, seed=-1)
    lines = [line for line in stdout.splitlines() if "prenoise" in line]
    version = r"\d+\.\d+\.\d+\S*"
    assert len(lines) == 3, stdout
    assert re.fullmatch(
        rf"INFO \S+ \S+ \[plugin\.py:\d+\] prenoise {version}: overlapped noise preparation "
        rf"installed in MiniMax-H3 \(vllm-omni 0\.30\.\d+, code of 0\.30\.0; on: MiniMax-H3 "
        r"noise streams, MiniMax-H3 noise prepared ahead, Wan2\.2 T2V latents prepared ahead; "
        r"PRENOISE_VLLM_OMNI=1 "
        r"PRENOISE_VLLM_OMNI_ON_MISMATCH=serial PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=0 "
        r"PRENOISE_VLLM_OMNI_NOISE_STREAM=native; "
        r"pid \d+\)",
        lines[0],
    ), lines[0]
    # seed -1 (upstream accepts it: torch maps it to 2^64 - 1) is prepared ahead
    assert re.fullmatch(
        r"INFO \S+ \S+ \[request\.py:\d+\] prenoise: request \(no id\): noise prepared ahead, "
        r"3 of 3 draws taken, \d+\.\d ms drawn off the request thread \(\d+\.\d ms waited\)",
        lines[1],
    ), lines[1]
    assert re.fullmatch(
        r"INFO \S+ \S+ \[request\.py:\d+\] prenoise: request \(no id\): failed \(ValueError\); "
        r"noise not prepared ahead: seed 18446744073709551616 is outside torch's seed range "
        r"\(upstream decides\)",
        lines[2],
    ), lines[2]


def test_an_application_logging_config_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_logger = logging.getLogger(logs.PLUGIN_LOGGER)
    monkeypatch.setattr(plugin_logger, "handlers", [])
    monkeypatch.setattr(plugin_logger, "level", logging.NOTSET)
    vllm_logger = logging.getLogger(logs.VLLM_LOGGER)
    monkeypatch.setattr(vllm_logger, "handlers", [logging.NullHandler()])
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])  # the application's own
    assert not logs.route_to_vllm_logging()
    assert plugin_logger.handlers == [] and plugin_logger.level == logging.NOTSET
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(vllm_logger, "handlers", [])  # VLLM_CONFIGURE_LOGGING=0
    assert not logs.route_to_vllm_logging()
    assert plugin_logger.handlers == []


def test_routing_forwards_to_vllms_handlers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_logger = logging.getLogger(logs.PLUGIN_LOGGER)
    monkeypatch.setattr(plugin_logger, "handlers", [])
    monkeypatch.setattr(plugin_logger, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    vllm_logger = logging.getLogger(logs.VLLM_LOGGER)
    seen: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(f"{record.name} {record.levelname} {record.getMessage()}")

    monkeypatch.setattr(vllm_logger, "handlers", [Recorder(logging.INFO)])
    monkeypatch.setattr(vllm_logger, "level", logging.INFO)
    assert logs.route_to_vllm_logging() and logs.route_to_vllm_logging()
    assert len(plugin_logger.handlers) == 1 and plugin_logger.level == logging.INFO
    plugin_logger.debug("hidden")
    plugin_logger.info("shown")
    assert seen == ["prenoise.vllm_omni INFO shown"]


def test_routing_takes_vllms_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """`VLLM_LOGGING_LEVEL=WARNING`: the plugin's INFO lines are dropped as vLLM's are."""
    plugin_logger = logging.getLogger(logs.PLUGIN_LOGGER)
    monkeypatch.setattr(plugin_logger, "handlers", [])
    monkeypatch.setattr(plugin_logger, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    vllm_logger = logging.getLogger(logs.VLLM_LOGGER)
    monkeypatch.setattr(vllm_logger, "handlers", [logging.NullHandler()])
    monkeypatch.setattr(vllm_logger, "level", logging.WARNING)
    assert logs.route_to_vllm_logging()
    assert plugin_logger.level == logging.WARNING
    assert not plugin_logger.isEnabledFor(logging.INFO)


def _record(name: str, used: bool, draw: float, waited: float) -> DrawRecord:
    return DrawRecord(name, 7, "prenoise-vllm-omni-0", 1.0, 1.0 + draw, 5.0, used, 5.0 + waited)


def test_the_request_line_counts_what_left_the_request_thread() -> None:
    prep = RequestPreparation(SimpleNamespace(), SimpleNamespace(), PluginSettings(), "req-1")
    prep.records = {
        "a": _record("a", True, draw=0.100, waited=0.020),
        "b": _record("b", True, draw=0.050, waited=0.0),
        "c": _record("c", False, draw=0.300, waited=0.001),  # a mismatch: upstream drew it
    }
    assert prep.summary() == (
        "prenoise: request req-1: noise prepared ahead, 2 of 3 draws taken, 130.0 ms drawn off "
        "the request thread (20.0 ms waited)"
    )
    assert prep.summary(KeyError("x")) == (
        "prenoise: request req-1: failed (KeyError); draws dropped"
    )
    prep.skipped = "task 't2va' (only ref2va is prepared ahead)"
    assert prep.summary() == (
        "prenoise: request req-1: noise not prepared ahead, upstream drew it (task 't2va' "
        "(only ref2va is prepared ahead))"
    )
