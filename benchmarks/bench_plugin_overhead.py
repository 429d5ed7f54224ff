"""What the vLLM-Omni plugin's per-request checks and log line cost on the request thread.

Run in the vLLM-Omni venv: `.venv-vllm-omni/bin/python benchmarks/bench_plugin_overhead.py`.
vLLM's own logging is configured as in `vllm serve` (the `vllm` logger's handler, its format),
with its stream pointed at /dev/null so the terminal is not what is timed. Each figure is the
median of 7 `timeit` repeats; results are printed as microseconds per request.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import timeit
from types import SimpleNamespace
from typing import Any

import vllm.logger  # noqa: F401  (configures the `vllm` logger, as every vLLM process does)

from prenoise.integrations.vllm_omni import plugin
from prenoise.integrations.vllm_omni.logs import route_to_vllm_logging
from prenoise.integrations.vllm_omni.request import (
    DrawRecord,
    RequestPreparation,
    _request_seed,
    torch_seed,
)
from prenoise.integrations.vllm_omni.settings import PluginSettings


def _median_us(fn: Any, number: int) -> float:
    return 1e6 * statistics.median(timeit.repeat(fn, number=number, repeat=7)) / number


def _prepared_request() -> RequestPreparation:
    prep = RequestPreparation(SimpleNamespace(), SimpleNamespace(seed=42), PluginSettings(), "r1")
    prep.records = {
        name: DrawRecord(name, 42, "prenoise-vllm-omni#0-0_0", 1.0, 1.2, 2.0, True, 2.0001)
        for name in ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")
    }
    return prep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    for handler in logging.getLogger("vllm").handlers:  # vLLM's handler, writing nowhere
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(open("/dev/null", "w"))  # noqa: SIM115
    assert route_to_vllm_logging()
    logger = logging.getLogger("prenoise.vllm_omni")
    prep = _prepared_request()
    sampling = SimpleNamespace(seed=-1, num_outputs_per_prompt=2)
    request = SimpleNamespace(sampling_params=sampling, request_id="r1")

    def checks() -> None:
        plugin._request_settings()  # the environment, read per request
        plugin._attribute(request, "sampling_params")
        plugin._attribute(request, "request_id")
        seed = _request_seed(sampling)
        assert seed is not None
        torch_seed(seed), torch_seed(seed + 1)

    figures = {
        "settings + request reads + seed checks": _median_us(checks, 20_000),
        "request line: summary()": _median_us(prep.summary, 20_000),
        "request line: summary() + logger.info via vLLM's handler": _median_us(
            lambda: logger.info("%s", prep.summary()), 5_000
        ),
    }
    figures["total per request"] = (
        figures["settings + request reads + seed checks"]
        + figures["request line: summary() + logger.info via vLLM's handler"]
    )
    for name, value in figures.items():
        print(f"{name}: {value:.1f} us")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({k: round(v, 2) for k, v in figures.items()}, out, indent=2)


if __name__ == "__main__":
    main()
