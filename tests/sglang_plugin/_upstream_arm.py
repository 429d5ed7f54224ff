"""One arm of `test_upstream_suite`: a pytest plugin (`-p _upstream_arm`) loaded into a pytest
run of SGLang's own unit tests.

`PRENOISE_UPSTREAM_ARM=on` loads the diffusion plugins the way SGLang's processes do
(`load_plugins(); apply_plugin_hooks()`) before any test runs; `off` loads nothing. Either way
it writes, to the JSON file named by `PRENOISE_UPSTREAM_REPORT`: every test report (node id,
phase, outcome, skip or xfail reason), a digest of the global CPU RNG state after each test's
call (seeded with `RNG_SEED` before each test's setup, in both arms, so the digests
compare), the targets where a prenoise hook is applied, and any prenoise thread left at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

ARM_ENV = "PRENOISE_UPSTREAM_ARM"
REPORT_ENV = "PRENOISE_UPSTREAM_REPORT"
RNG_SEED = 20261206

_report: dict[str, Any] = {"reports": [], "rng_after_call": {}, "applied": [], "threads": []}


def _applied_hooks() -> list[str]:
    """The targets where SGLang's registry applied a prenoise hook. Both arms import the
    targets' modules here (the `on` arm's `apply_plugin_hooks` imports them anyway), so both
    run the tests with the same modules already imported."""
    import importlib

    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry

    from prenoise.integrations.sglang import plugin

    for target, _hook in plugin.HOOKS + plugin.CONDITION_HOOKS:
        module = target.split(".")
        while module:
            try:
                importlib.import_module(".".join(module))
                break
            except ImportError:
                module.pop()
    return sorted(
        target
        for target, hooks in HookRegistry._hooks.items()
        for _type, hook, _source in hooks
        if hook.__module__ == plugin.__name__ and target in HookRegistry._patched
    )


def pytest_configure(config: pytest.Config) -> None:
    arm = os.environ[ARM_ENV]
    if arm == "on":
        from sglang.multimodal_gen.runtime.platforms import plugins

        plugins.load_plugins()
        plugins.apply_plugin_hooks()
    elif arm != "off":
        raise pytest.UsageError(f"{ARM_ENV}={arm!r}: expected on or off")
    _report["arm"] = arm
    _report["applied"] = _applied_hooks()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    import torch

    torch.manual_seed(RNG_SEED)  # both arms: the same global RNG state when each test starts
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield
    import torch

    state = torch.get_rng_state().numpy().tobytes()
    _report["rng_after_call"][item.nodeid] = hashlib.sha256(state).hexdigest()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    reason = None
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
    _report["reports"].append(
        {
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "reason": reason,
            "xfail": getattr(report, "wasxfail", None),
            "kind": type(report).__name__,
        }
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _report["exitstatus"] = int(exitstatus)
    _report["threads"] = [t.name for t in threading.enumerate() if "prenoise" in t.name]
    with open(os.environ[REPORT_ENV], "w", encoding="utf-8") as out:
        json.dump(_report, out)
