"""Fast unit tests of the vLLM-Omni plugin's settings, wrappers and install mechanics, with fakes.

No pipeline runs here: prenoise's implementations are called with recording fakes of upstream's
six functions (`Fakes`), and the request state is a `FakeState` (`plugin.current_request`).
Exact texts, keys and identities, so that a changed comparison, constant, string or argument
fails a test.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import math
import os
import sys
import types
from collections.abc import Callable, Iterator
from types import MappingProxyType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils._contextlib as torch_contextlib

from bitwise import bitwise_equal
from prenoise.integrations.vllm_omni import plugin, request, support
from prenoise.integrations.vllm_omni.request import ConditionKey, InitialNoiseKey
from prenoise.integrations.vllm_omni.settings import PluginSettings, SettingsError
from prenoise.preparation.prediction import MismatchPolicy

LOGGER = "prenoise.vllm_omni"
# The variable names, spelled out (not the module's constants) so a changed name fails a test.
ENABLE = "PRENOISE_VLLM_OMNI"
MISMATCH = "PRENOISE_VLLM_OMNI_ON_MISMATCH"
NEXT = "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT"
STREAM = "PRENOISE_VLLM_OMNI_NOISE_STREAM"
METHODS = ("forward", "_initial_noise", "encode_prompt")
FUNCTIONS = (
    "prepare_encoder_inputs",
    "minimax_h3_imgvid_cond_noise_aug_rows",
    "minimax_h3_audio_cond_noise_aug_rows",
    # upstream's own draw ahead, where it has it (0.32.0rc1)
    *(["minimax_h3_imgvid_cond_noise_rows"] * support.current().upstream_prepares_ref2va),
)
NAMES = METHODS + FUNCTIONS
SETTINGS = (
    "PRENOISE_VLLM_OMNI=1 PRENOISE_VLLM_OMNI_ON_MISMATCH=serial "
    "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=0 PRENOISE_VLLM_OMNI_NOISE_STREAM=native"
)


def installed_line(vllm_omni: str | None = None) -> str:
    """The one INFO line of an install: both versions, the settings, the process."""
    vllm_omni = vllm_omni or importlib.metadata.version("vllm-omni")
    return (
        f"prenoise {importlib.metadata.version('prenoise')}: overlapped noise preparation "
        f"installed in MiniMax-H3 (vllm-omni {vllm_omni}, {support.current().describe()}; "
        f"{SETTINGS}; pid {os.getpid()})"
    )


DISABLED = "prenoise: vLLM-Omni plugin disabled by PRENOISE_VLLM_OMNI=0"
FALLBACK, RAISE = MismatchPolicy.FALLBACK, MismatchPolicy.RAISE


def upstream() -> Any:
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3

    return pipeline_minimax_h3


def owner(name: str) -> Any:
    """Where upstream's `name` lives: the pipeline class (methods) or the pipeline module."""
    return upstream().MiniMaxH3Pipeline if name in METHODS else upstream()


def current() -> dict[str, Any]:
    """The six names as MiniMax-H3 sees them now (the class's own methods, unbound)."""
    return {n: owner(n).__dict__[n] if n in METHODS else getattr(owner(n), n) for n in NAMES}


def implementations() -> dict[str, Any]:
    """prenoise's function behind each name (called with upstream's function first)."""
    return {
        "forward": plugin._forward,
        "_initial_noise": plugin._initial_noise,
        "encode_prompt": plugin._encode_prompt,
        "prepare_encoder_inputs": plugin._prepare_encoder_inputs,
        "minimax_h3_imgvid_cond_noise_aug_rows": plugin._condition_noise_rows,
        "minimax_h3_audio_cond_noise_aug_rows": plugin._audio_condition_noise_rows,
        "minimax_h3_imgvid_cond_noise_rows": plugin._condition_noise_rows_ahead,
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[n] is b[n] for n in a)


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def foreign_wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What another plugin installs: `functools.wraps` copies the name and module, not code."""

    @functools.wraps(fn)
    def theirs(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return theirs


class AlwaysEqual:
    """Equal to everything: only an identity (`is`) check tells it from the real object."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


Log = list[tuple[Any, ...]]


class FakeState:
    """A `RequestPreparation` stand-in that records what the wrappers ask of it."""

    def __init__(
        self,
        log: Log,
        *,
        pipeline: Any = None,
        sampling: Any = None,
        initial: Any = None,
        condition: Any = None,
    ) -> None:
        self.log = log
        self.pipeline = pipeline
        self.sampling = sampling
        self.initial = initial
        self.condition = condition

    def start(self, prepared: Any) -> None:
        self.log.append(("start", prepared))

    def share_plan(self) -> None:
        self.log.append(("share_plan",))

    def take_initial_noise(self, key: InitialNoiseKey) -> Any:
        self.log.append(("take_initial_noise", key))
        return self.initial

    def take_condition_noise(self, key: ConditionKey) -> Any:
        self.log.append(("take_condition_noise", key))
        return self.condition

    def discard_condition_noise(self, seed: int) -> None:
        self.log.append(("discard_condition_noise", seed, type(seed)))


class FakePreparation:
    """A `RequestPreparation` stand-in for `_forward`: records its opening, entry and exit."""

    def __init__(
        self,
        log: Log,
        pipeline: Any,
        sampling: Any,
        settings: PluginSettings,
        request_id: Any = None,
        code: Any = None,
    ) -> None:
        self.log = log
        assert code is support.current()
        log.append(("open", pipeline, sampling, settings, request_id))

    def __enter__(self) -> FakePreparation:
        self.log.append(("enter",))
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(("exit",))


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """No plugin variable set, no reason said yet."""
    for name in (ENABLE, MISMATCH, NEXT, STREAM):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(plugin, "_said", set())


@pytest.fixture
def log() -> Log:
    return []


@dataclasses.dataclass
class Fakes:
    """Recording stand-ins for upstream's six functions (`fn`), and what each returns."""

    fn: dict[str, Callable[..., Any]]
    returned: dict[str, object]


@pytest.fixture
def fakes(log: Log) -> Fakes:
    returned = {name: object() for name in NAMES}

    def fake(name: str) -> Callable[..., Any]:
        def upstream_fn(*args: Any, **kwargs: Any) -> Any:
            log.append(("original", name, args, kwargs))
            return returned[name]

        return upstream_fn

    return Fakes({name: fake(name) for name in NAMES}, returned)


def enter(monkeypatch: pytest.MonkeyPatch, state: FakeState | None) -> None:
    monkeypatch.setattr(plugin, "current_request", lambda: state)


# -- settings ------------------------------------------------------------------------------------


def test_plugin_settings_defaults() -> None:
    settings = PluginSettings()
    assert settings.enabled is True
    assert settings.on_mismatch is FALLBACK
    assert settings.prepare_next_output is False


def test_plugin_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        PluginSettings().enabled = False  # type: ignore[misc]


def test_unset_variables_give_the_defaults() -> None:
    settings = PluginSettings.from_env({"UNRELATED": "x"})
    assert settings.enabled is True and settings.prepare_next_output is False
    assert settings.on_mismatch is FALLBACK


@pytest.mark.parametrize(
    ("name", "raw", "field", "value"),
    [
        (ENABLE, "0", "enabled", False),
        (ENABLE, "1", "enabled", True),
        (ENABLE, " 0\n", "enabled", False),
        (ENABLE, "", "enabled", True),  # empty: the default
        (ENABLE, "   ", "enabled", True),  # blank: the default
        (MISMATCH, "raise", "on_mismatch", RAISE),
        (MISMATCH, " RAISE ", "on_mismatch", RAISE),
        (MISMATCH, "serial", "on_mismatch", FALLBACK),
        (MISMATCH, "Serial", "on_mismatch", FALLBACK),
        (MISMATCH, "", "on_mismatch", FALLBACK),
        (MISMATCH, " \t", "on_mismatch", FALLBACK),
        (NEXT, "1", "prepare_next_output", True),
        (NEXT, "\t1 ", "prepare_next_output", True),
        (NEXT, "0", "prepare_next_output", False),
        (NEXT, "", "prepare_next_output", False),
        (STREAM, "x86", "noise_stream", "x86"),
        (STREAM, " LIBM ", "noise_stream", "libm"),
        (STREAM, "native", "noise_stream", "native"),
        (STREAM, "", "noise_stream", "native"),
    ],
)
def test_each_variable_sets_its_field_only(name: str, raw: str, field: str, value: Any) -> None:
    defaults = {
        "enabled": True,
        "on_mismatch": FALLBACK,
        "prepare_next_output": False,
        "noise_stream": "native",
    }
    settings = PluginSettings.from_env({name: raw})
    assert dataclasses.asdict(settings) == {**defaults, field: value}
    assert getattr(settings, field) == value


def test_all_three_variables_together() -> None:
    env = {ENABLE: "0", MISMATCH: "raise", NEXT: "1"}
    assert PluginSettings.from_env(env) == PluginSettings(False, RAISE, True)


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        (ENABLE, "yes", "PRENOISE_VLLM_OMNI='yes': expected one of 0, 1"),
        (ENABLE, "2", "PRENOISE_VLLM_OMNI='2': expected one of 0, 1"),
        (
            MISMATCH,
            " Fallback ",
            "PRENOISE_VLLM_OMNI_ON_MISMATCH=' Fallback ': expected one of serial, raise",
        ),
        (NEXT, "true", "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT='true': expected one of 0, 1"),
        (
            STREAM,
            "arm",
            "PRENOISE_VLLM_OMNI_NOISE_STREAM='arm': expected one of native, x86, libm",
        ),
    ],
)
def test_unknown_values_raise_with_the_exact_message(name: str, raw: str, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        PluginSettings.from_env({name: raw})
    assert type(raised.value) is SettingsError and isinstance(raised.value, ValueError)
    assert str(raised.value) == message


def test_from_env_reads_os_environ_only_without_a_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENABLE, "0")
    monkeypatch.setenv(MISMATCH, " Raise")
    monkeypatch.setenv(NEXT, "1")
    assert PluginSettings.from_env() == PluginSettings(False, RAISE, True)
    assert PluginSettings.from_env(None) == PluginSettings(False, RAISE, True)
    assert PluginSettings.from_env({}) == PluginSettings(True, FALLBACK, False)
    assert PluginSettings.from_env(MappingProxyType({NEXT: "1"})) == PluginSettings(
        True, FALLBACK, True
    )


def test_an_os_environ_error_quotes_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MISMATCH, "loud")
    with pytest.raises(SettingsError) as raised:
        PluginSettings.from_env()
    assert str(raised.value) == (
        "PRENOISE_VLLM_OMNI_ON_MISMATCH='loud': expected one of serial, raise"
    )


# -- register, the version guard, the logs -------------------------------------------------------


def test_register_installs_whatever_the_version_says(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The version string decides nothing: the installed code does (`support`)."""
    monkeypatch.setattr(plugin, "_vllm_omni_version", lambda: "0.33.7")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin.register()
    assert plugin.is_installed() is True
    said = [line for line in logged(caplog) if line[0] != logging.INFO]
    assert logged(caplog)[0] == (logging.INFO, installed_line("0.33.7"))
    assert said == [
        (logging.WARNING, _path_off_line("0.33.7", path, problem))
        for path, problem in support.current().problems.items()
    ]
    assert plugin._said == {f"code:{path}" for path in support.current().problems}


NEXT_STEP = (
    "prenoise supports the code of vllm-omni 0.30.0, 0.31.0rc1, 0.32.0rc1: install one of them, "
    "or report the changed function to prenoise"
)


def _path_off_line(version: str, path: str, problem: str) -> str:
    return (
        f"prenoise: vllm-omni {version}: {path}: off, upstream's code runs untouched: {problem}; "
        f"{NEXT_STEP}"
    )


@pytest.mark.parametrize(
    "path", [support.H3_STREAMS_PATH, support.H3_AHEAD_PATH, support.WAN_AHEAD_PATH]
)
def test_register_names_a_path_whose_code_changed_once(
    path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    problem = "SomeClass.method (some.module) changed: digest 0123456789ab; reviewed x (0.30.0)"
    changed = support.Support({path: problem})
    monkeypatch.setattr(support, "current", lambda: changed)
    monkeypatch.setattr(plugin, "_vllm_omni_version", lambda: "0.40.0")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plugin.register()
        plugin.register()
    if path == support.H3_STREAMS_PATH:
        line = (
            "prenoise: vllm-omni 0.40.0: MiniMax-H3 runs upstream's code untouched (noise "
            "streams and noise prepared ahead off); with a named PRENOISE_VLLM_OMNI_NOISE_STREAM "
            f"its requests fail (NoiseStreamError): {problem}; {NEXT_STEP}"
        )
        assert set(plugin._installed) == {"forward"}  # the guard alone
    else:
        line = _path_off_line("0.40.0", path, problem)
        assert "_initial_noise" in plugin._installed
    assert logged(caplog) == [(logging.WARNING, line)]


def test_register_without_vllm_omni(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(plugin, "_vllm_omni_version", lambda: None)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin.register()
    assert plugin.is_installed() is False
    assert logged(caplog) == [
        (logging.WARNING, "prenoise: vllm-omni is not installed; plugin did nothing")
    ]
    assert plugin._said == {"version"}


def test_register_disabled_does_not_even_ask_the_version(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def version() -> str:
        raise AssertionError("the version is not consulted when disabled")

    monkeypatch.setattr(plugin, "_vllm_omni_version", version)
    monkeypatch.setenv(ENABLE, " 0 ")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin.register()
    assert plugin.is_installed() is False
    assert logged(caplog) == [(logging.WARNING, DISABLED)]
    assert plugin._said == {"disabled"}


def test_each_reason_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Disabled twice, then not installed twice: two warnings, one per reason."""
    monkeypatch.setattr(plugin, "_vllm_omni_version", lambda: None)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        monkeypatch.setenv(ENABLE, "0")
        plugin.register()
        plugin.register()
        monkeypatch.setenv(ENABLE, "1")
        plugin.register()
        plugin.register()
    assert [m for _, m in logged(caplog)] == [
        DISABLED,
        "prenoise: vllm-omni is not installed; plugin did nothing",
    ]
    assert plugin._said == {"disabled", "version"}


def test_say_once_keys_on_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin._say_once("a", "first")
        plugin._say_once("a", "second")
        plugin._say_once("b", "third")
    assert logged(caplog) == [(logging.WARNING, "first"), (logging.WARNING, "third")]
    assert plugin._said == {"a", "b"}


def test_vllm_omni_version_is_the_installed_distributions() -> None:
    version = plugin._vllm_omni_version()
    assert version == importlib.metadata.version("vllm-omni")
    assert version is not None and version.startswith("0.30.")


def test_vllm_omni_version_asks_for_vllm_omni(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def version(name: str) -> str:
        asked.append(name)
        return "9.8.7"

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert plugin._vllm_omni_version() == "9.8.7"
    assert asked == ["vllm-omni"]


def test_vllm_omni_version_is_none_when_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def version(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert plugin._vllm_omni_version() is None


# -- install / uninstall / original --------------------------------------------------------------


def test_install_wraps_exactly_the_six_names() -> None:
    """Each name becomes a new function, `functools.wraps`'d onto upstream's own; prenoise's
    implementations keep their own names and module."""
    before = current()
    plugin.install()
    assert plugin.is_installed() is True
    assert same(plugin._originals, before)
    now = current()
    assert same(plugin._installed, now)
    for name, impl in implementations().items():
        if name not in NAMES:
            continue  # an optional name this upstream does not have
        assert now[name] is not impl and now[name] is not before[name], name
        assert now[name].__wrapped__ is before[name], name
        assert now[name].__name__ == name
        assert impl.__module__ == "prenoise.integrations.vllm_omni.plugin", name
        assert impl.__name__ != name or name == "_initial_noise", name
    assert plugin._forward.__name__ == "_forward"


def test_a_wrapper_outliving_uninstall_still_reaches_upstream() -> None:
    """A request in flight (or a reference kept) after `uninstall` runs upstream's code."""
    upstream_fn = current()["_initial_noise"]
    plugin.install()
    wrapper = current()["_initial_noise"]
    plugin.uninstall()
    args = {"seed": 3, "latent_t": 1, "latent_h": 2, "latent_w": 2, "audio_t": 1}
    for got, expected in zip(wrapper(None, **args), upstream_fn(None, **args), strict=True):
        assert bitwise_equal(got, expected)


@pytest.mark.parametrize("name", NAMES)
def test_uninstall_leaves_a_later_plugins_patch_in_place(
    name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plugin.install()
    monkeypatch.setattr(owner(name), name, foreign_wrapper(current()[name]))
    patched = current()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin.uninstall()
        plugin.uninstall()
    assert plugin.is_installed() is True and same(current(), patched)
    assert logged(caplog) == [
        (
            logging.WARNING,
            f"prenoise: MiniMax-H3 ['{name}'] patched by another plugin after prenoise; "
            "prenoise left installed",
        )
    ]
    assert plugin._said == {"uninstall"}


def test_install_says_so_once_and_twice_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    before = current()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin.install()
        installed = current()
        plugin.install()
    assert logged(caplog) == [(logging.INFO, installed_line())]
    assert same(current(), installed)
    assert same(plugin._originals, before)
    assert plugin._said == set()


def test_uninstall_restores_upstreams_own_functions() -> None:
    before = current()
    plugin.install()
    plugin.uninstall()
    assert same(current(), before)
    assert plugin.is_installed() is False
    assert plugin._originals == {} and plugin._installed == {}


def test_uninstall_when_not_installed_is_a_no_op() -> None:
    before = current()
    plugin.uninstall()
    assert same(current(), before)
    assert plugin.is_installed() is False


@pytest.mark.parametrize("name", NAMES)
def test_install_refuses_when_one_name_is_already_patched(
    name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(owner(name), name, foreign_wrapper(current()[name]))
    before = current()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin.install()
    assert plugin.is_installed() is False and plugin._originals == {}
    assert same(current(), before)
    assert logged(caplog) == [
        (
            logging.WARNING,
            f"prenoise: MiniMax-H3 ['{name}'] already patched by another plugin; "
            "prenoise did nothing",
        )
    ]
    assert plugin._said == {"foreign"}


def test_install_names_every_foreign_name_in_order(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, fn in current().items():
        monkeypatch.setattr(owner(name), name, foreign_wrapper(fn))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plugin.install()
    assert plugin.is_installed() is False
    assert [m for _, m in logged(caplog)] == [
        "prenoise: MiniMax-H3 ['forward', '_initial_noise', 'encode_prompt', "
        "'prepare_encoder_inputs', 'minimax_h3_imgvid_cond_noise_aug_rows', "
        "'minimax_h3_audio_cond_noise_aug_rows'] already patched by another plugin; "
        "prenoise did nothing"
    ]


@pytest.mark.parametrize("name", NAMES)
def test_original_when_not_installed_is_upstreams(name: str) -> None:
    assert plugin.original(name) is current()[name]


def test_original_when_installed_is_the_saved_one(monkeypatch: pytest.MonkeyPatch) -> None:
    saved = object()
    monkeypatch.setattr(plugin, "_originals", {"forward": saved})
    assert plugin.original("forward") is saved
    assert plugin.original("encode_prompt") is current()["encode_prompt"]
    assert plugin.original("prepare_encoder_inputs") is current()["prepare_encoder_inputs"]


# -- _is_upstream ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_upstreams_own_functions_are_upstream(name: str) -> None:
    assert plugin._is_upstream(current()[name]) is True


def test_a_no_grad_upstream_method_is_upstream() -> None:
    """`forward` is `@torch.no_grad()`: its code is torch's; the wrapped function is upstream's."""
    forward = current()["forward"]
    assert forward.__code__.co_filename == torch_contextlib.__file__  # the premise
    assert plugin._is_upstream(forward) is True


@pytest.mark.parametrize("name", NAMES)
def test_a_wraps_wrapper_of_upstream_is_not(name: str) -> None:
    assert plugin._is_upstream(foreign_wrapper(current()[name])) is False


def test_prenoises_own_wrappers_are_not_upstream() -> None:
    plugin.install()
    assert [plugin._is_upstream(fn) for fn in current().values()] == [False] * 6


def _local(x: int) -> int:
    return x


def test_a_function_outside_vllm_omni_is_not_upstream() -> None:
    """Its code's file is its module's file, but the module is not `vllm_omni.*`."""
    assert _local.__code__.co_filename == sys.modules[__name__].__file__  # the premise
    assert plugin._is_upstream(_local) is False


def test_a_no_grad_function_outside_vllm_omni_is_not_upstream() -> None:
    assert plugin._is_upstream(torch.no_grad()(_local)) is False


def test_a_no_grad_wrapper_without_wrapped_is_not_upstream() -> None:
    decorated: Any = torch.no_grad()(_local)
    del decorated.__wrapped__
    assert plugin._is_upstream(decorated) is False


def _copy(fn: Any, module: str | None) -> Any:
    """Upstream's own code (its file), claiming to come from `module`."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__)
    copy.__module__ = module  # type: ignore[assignment]
    return copy


def test_upstream_code_from_a_module_not_imported_is_not_upstream() -> None:
    upstream_fn = current()["prepare_encoder_inputs"]
    assert plugin._is_upstream(_copy(upstream_fn, upstream_fn.__module__)) is True  # control
    assert plugin._is_upstream(_copy(upstream_fn, "vllm_omni.prenoise_not_imported")) is False
    assert plugin._is_upstream(_copy(upstream_fn, None)) is False


def test_a_vllm_omni_module_without_a_file_is_not_upstream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.ModuleType("vllm_omni.prenoise_fileless")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert plugin._is_upstream(_copy(_local, module.__name__)) is False


@pytest.mark.parametrize(
    "thing",
    [
        SimpleNamespace(__module__="vllm_omni.diffusion.models.minimax_h3.pipeline_minimax_h3"),
        len,
        None,
    ],
)
def test_an_object_without_code_is_not_upstream(thing: object) -> None:
    assert plugin._is_upstream(thing) is False


# -- _condition_key ------------------------------------------------------------------------------

SHAPES = ((1, 4, 2), (2, 6, 4))  # rows: 1*2*1 + 2*3*2 = 14
ROWS = 14


def call_args(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "condition_shapes": [list(s) for s in SHAPES],
        "target_latent_t": 3,
        "imgvid_cond_num_frames": 2,
        "seed": 7,
        "noise_aug": 0.25,
    }
    return {**base, **changes}


def key_of(rows: int | torch.Tensor = ROWS, **changes: Any) -> ConditionKey | None:
    """`_condition_key` of `rows` (a row count: float32 zeros with 96 columns) and `changes`."""
    clean = torch.zeros(rows, 96) if isinstance(rows, int) else rows
    return plugin._condition_key(clean, **call_args(**changes))


def case(name: str, rows: int | torch.Tensor = ROWS, **changes: Any) -> Any:
    return pytest.param(rows, changes, id=name)


def test_condition_key_of_a_servable_call() -> None:
    key = key_of(
        seed=np.int64(7),
        target_latent_t=np.int32(3),
        condition_shapes=[np.array(s) for s in SHAPES],
        imgvid_cond_num_frames=np.int64(2),
    )
    assert key == ConditionKey(7, 3, SHAPES)
    assert key is not None
    assert type(key.seed) is int and type(key.target_latent_t) is int
    assert type(key.condition_shapes) is tuple
    assert all(type(s) is tuple and {type(v) for v in s} == {int} for s in key.condition_shapes)


@pytest.mark.parametrize(
    ("rows", "changes"),
    [
        case("tau-0", noise_aug=0.0),
        case("tau-below-1", noise_aug=math.nextafter(1.0, 0.0)),
        case("tau-str", noise_aug="0.5"),
        case("target-t-1", target_latent_t=1),
        case("smallest-shape", 1, condition_shapes=[(1, 2, 2)], imgvid_cond_num_frames=1),
        case("one-video", 12, condition_shapes=[(4, 2, 6)], imgvid_cond_num_frames=1),
    ],
)
def test_condition_key_accepts_the_boundaries(
    rows: int | torch.Tensor, changes: dict[str, Any]
) -> None:
    args = call_args(**changes)
    shapes = tuple(tuple(s) for s in args["condition_shapes"])
    assert key_of(rows, **changes) == ConditionKey(7, args["target_latent_t"], shapes)


@pytest.mark.parametrize(
    ("rows", "changes"),
    [
        case("tau-1", noise_aug=1.0),  # upstream returns the clean rows
        case("tau-above-1", noise_aug=1.5),
        case("tau-negative", noise_aug=-0.25),
        case("tau-nan", noise_aug=float("nan")),
        case("ndim-1", torch.zeros(ROWS * 96)),
        case("ndim-3", torch.zeros(ROWS, 96, 1)),  # 96 columns, 14 rows
        case("95-columns", torch.zeros(ROWS, 95)),
        case("97-columns", torch.zeros(ROWS, 97)),
        case("float64", torch.zeros(ROWS, 96, dtype=torch.float64)),
        case("float16", torch.zeros(ROWS, 96, dtype=torch.float16)),
        case("bfloat16", torch.zeros(ROWS, 96, dtype=torch.bfloat16)),
        case("target-t-0", target_latent_t=0),
        case("target-t-negative", target_latent_t=-1),
        case("no-conditions", 0, condition_shapes=[], imgvid_cond_num_frames=0),
        case("fewer-frames", imgvid_cond_num_frames=1),
        case("more-frames", imgvid_cond_num_frames=3),
        case("shape-of-2", condition_shapes=[(1, 4, 2), (2, 6)]),
        case("shape-of-4", condition_shapes=[(1, 4, 2), (2, 6, 4, 1)]),
        case("t-0", 12, condition_shapes=[(0, 4, 2), (2, 6, 4)]),
        case("h-0", 12, condition_shapes=[(1, 0, 2), (2, 6, 4)]),
        case("w-0", 12, condition_shapes=[(1, 4, 0), (2, 6, 4)]),
        case("negative", 13, condition_shapes=[(1, -2, -2), (2, 6, 4)]),
        case("odd-h", 13, condition_shapes=[(1, 3, 2), (2, 6, 4)]),
        case("odd-w", 14, condition_shapes=[(1, 4, 3), (2, 6, 4)]),
        case("a-row-short", ROWS - 1),
        case("a-row-over", ROWS + 1),
    ],
)
def test_condition_key_refuses_what_upstream_must_handle(
    rows: int | torch.Tensor, changes: dict[str, Any]
) -> None:
    """Each case meets every other condition (the rows match its shapes): only its own decides."""
    assert key_of(rows, **changes) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"condition_shapes": None},
        {"condition_shapes": [1, 2]},
        {"condition_shapes": [("a", 4, 2), (2, 6, 4)]},
        {"noise_aug": None},
        {"noise_aug": "much"},
        {"seed": None},
        {"seed": "x"},
        {"target_latent_t": None},
        {"target_latent_t": "3.5"},
        {"imgvid_cond_num_frames": None},
        {"imgvid_cond_num_frames": "two"},
    ],
)
def test_condition_key_of_non_numeric_arguments_is_none(changes: dict[str, Any]) -> None:
    assert key_of(**changes) is None


# -- _condition_noise_rows ----------------------------------------------------------------------


def clean_and_noise() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return torch.randn(ROWS, 96, generator=generator), torch.randn(ROWS, 96, generator=generator)


def test_condition_noise_outside_a_request_is_upstreams(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    enter(monkeypatch, None)
    clean, _ = clean_and_noise()
    out = plugin._condition_noise_rows(
        fakes.fn["minimax_h3_imgvid_cond_noise_aug_rows"], clean, **call_args()
    )
    assert out is fakes.returned["minimax_h3_imgvid_cond_noise_aug_rows"]
    [(what, name, args, kwargs)] = log
    assert (what, name) == ("original", "minimax_h3_imgvid_cond_noise_aug_rows")
    assert len(args) == 1 and args[0] is clean
    assert kwargs == call_args()


def test_condition_noise_prepared_is_mixed_exactly(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    """The prepared noise is mixed with upstream's shapes and tau; upstream does not run."""
    clean, noise = clean_and_noise()
    enter(monkeypatch, FakeState(log, condition=noise))
    out = plugin._condition_noise_rows(
        fakes.fn["minimax_h3_imgvid_cond_noise_aug_rows"], clean, **call_args()
    )
    expected = request.mix_condition_rows(clean, noise, SHAPES, 0.25)
    assert bitwise_equal(out, expected)
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))
    assert not torch.equal(out, clean) and not torch.equal(out, noise)
    assert log == [("take_condition_noise", ConditionKey(7, 3, SHAPES))]


def test_condition_noise_not_prepared_runs_upstream(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    clean, _ = clean_and_noise()
    enter(monkeypatch, FakeState(log, condition=None))
    out = plugin._condition_noise_rows(
        fakes.fn["minimax_h3_imgvid_cond_noise_aug_rows"], clean, **call_args()
    )
    assert out is fakes.returned["minimax_h3_imgvid_cond_noise_aug_rows"]
    assert [entry[0] for entry in log] == ["take_condition_noise", "original"]
    assert log[0] == ("take_condition_noise", ConditionKey(7, 3, SHAPES))
    assert log[1][2][0] is clean and log[1][3] == call_args()


@pytest.mark.parametrize(
    ("changes", "seed"),
    [
        ({"noise_aug": 1.0}, 7),  # key None: upstream's early return decides
        ({"noise_aug": 1.0, "seed": np.int64(9)}, 9),
        ({"seed": "12", "imgvid_cond_num_frames": 5}, 12),
    ],
)
def test_condition_noise_upstream_must_handle_is_discarded_then_serial(
    changes: dict[str, Any],
    seed: int,
    monkeypatch: pytest.MonkeyPatch,
    log: Log,
    fakes: Fakes,
) -> None:
    clean, noise = clean_and_noise()
    enter(monkeypatch, FakeState(log, condition=noise))
    out = plugin._condition_noise_rows(
        fakes.fn["minimax_h3_imgvid_cond_noise_aug_rows"], clean, **call_args(**changes)
    )
    assert out is fakes.returned["minimax_h3_imgvid_cond_noise_aug_rows"]
    assert log[0] == ("discard_condition_noise", seed, int)
    assert [entry[0] for entry in log] == ["discard_condition_noise", "original"]
    assert log[1][2][0] is clean and log[1][3] == call_args(**changes)


@pytest.mark.parametrize("seed", [None, "x", [1]])
def test_condition_noise_without_a_numeric_seed_is_upstreams_alone(
    seed: object, monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    """A missing or non-numeric seed is upstream's to reject (or ignore): nothing is discarded,
    nothing raises before upstream's own code runs."""
    clean, noise = clean_and_noise()
    enter(monkeypatch, FakeState(log, condition=noise))
    kwargs = call_args(seed=seed)
    if seed is None:
        del kwargs["seed"]
    out = plugin._condition_noise_rows(
        fakes.fn["minimax_h3_imgvid_cond_noise_aug_rows"], clean, **kwargs
    )
    assert out is fakes.returned["minimax_h3_imgvid_cond_noise_aug_rows"]
    assert log == [("original", "minimax_h3_imgvid_cond_noise_aug_rows", (clean,), kwargs)]


def test_unused_condition_noise_with_a_non_numeric_seed_equals_plugin_off(
    monkeypatch: pytest.MonkeyPatch, log: Log
) -> None:
    """Upstream returns the clean rows for noise_aug == 1 whatever the seed; so does the plugin."""
    clean, noise = clean_and_noise()
    enter(monkeypatch, FakeState(log, condition=noise))
    kwargs = call_args(seed="not-a-seed", noise_aug=1.0)
    assert plugin.original("minimax_h3_imgvid_cond_noise_aug_rows")(clean, **kwargs) is clean
    plugin.install()
    assert upstream().minimax_h3_imgvid_cond_noise_aug_rows(clean, **kwargs) is clean
    assert log == []


def test_condition_noise_with_an_unknown_argument_is_upstreams(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    """An argument upstream does not take (TypeError in the key): no key, upstream raises."""
    clean, noise = clean_and_noise()
    enter(monkeypatch, FakeState(log, condition=noise))
    out = plugin._condition_noise_rows(
        fakes.fn["minimax_h3_imgvid_cond_noise_aug_rows"], clean, **call_args(), extra=1
    )
    assert out is fakes.returned["minimax_h3_imgvid_cond_noise_aug_rows"]
    assert log[0] == ("discard_condition_noise", 7, int)
    assert [entry[0] for entry in log] == ["discard_condition_noise", "original"]
    assert log[1][3] == {**call_args(), "extra": 1}


# -- _initial_noise ------------------------------------------------------------------------------

NOISE_ARGS = {"seed": 11, "latent_t": 2, "latent_h": 3, "latent_w": 4, "audio_t": 5}


def test_initial_noise_outside_a_request_is_upstreams(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    enter(monkeypatch, None)
    pipe = object()
    assert (
        plugin._initial_noise(fakes.fn["_initial_noise"], pipe, **NOISE_ARGS)
        is fakes.returned["_initial_noise"]
    )
    assert log == [("original", "_initial_noise", (pipe,), NOISE_ARGS)]


def test_initial_noise_of_another_pipeline_is_upstreams(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    enter(monkeypatch, FakeState(log, pipeline=AlwaysEqual(), initial=("v", "a")))
    pipe = object()
    assert (
        plugin._initial_noise(fakes.fn["_initial_noise"], pipe, **NOISE_ARGS)
        is fakes.returned["_initial_noise"]
    )
    assert log == [("original", "_initial_noise", (pipe,), NOISE_ARGS)]


def test_initial_noise_prepared_is_returned_as_is(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    """The key holds plain ints (upstream may pass numpy ints); upstream does not run."""
    pipe, prepared = object(), (torch.zeros(1), torch.ones(1))
    enter(monkeypatch, FakeState(log, pipeline=pipe, initial=prepared))
    numpy_args: dict[str, Any] = {k: np.int64(v) for k, v in NOISE_ARGS.items()}
    assert plugin._initial_noise(fakes.fn["_initial_noise"], pipe, **numpy_args) is prepared
    assert log == [("take_initial_noise", InitialNoiseKey(11, 2, 3, 4, 5))]
    key = log[0][1]
    assert [type(v) for v in dataclasses.astuple(key)] == [int] * 5


def test_initial_noise_not_prepared_runs_upstream_with_the_same_arguments(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    pipe = object()
    enter(monkeypatch, FakeState(log, pipeline=pipe, initial=None))
    assert (
        plugin._initial_noise(fakes.fn["_initial_noise"], pipe, **NOISE_ARGS)
        is fakes.returned["_initial_noise"]
    )
    assert log == [
        ("take_initial_noise", InitialNoiseKey(11, 2, 3, 4, 5)),
        ("original", "_initial_noise", (pipe,), NOISE_ARGS),
    ]


# -- _prepare_encoder_inputs and _encode_prompt --------------------------------------------------


def test_prepare_encoder_inputs_outside_a_request_is_upstreams(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    enter(monkeypatch, None)
    prompt, sampling = object(), object()
    out = plugin._prepare_encoder_inputs(
        fakes.fn["prepare_encoder_inputs"], prompt, sampling, device="cpu", rank=0
    )
    assert out is fakes.returned["prepare_encoder_inputs"]
    assert log == [
        ("original", "prepare_encoder_inputs", (prompt, sampling), {"device": "cpu", "rank": 0})
    ]


def test_prepare_encoder_inputs_starts_the_request_with_the_plan(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    prompt, sampling = object(), object()
    enter(monkeypatch, FakeState(log, sampling=sampling))
    out = plugin._prepare_encoder_inputs(
        fakes.fn["prepare_encoder_inputs"], prompt, sampling, device="cpu"
    )
    assert out is fakes.returned["prepare_encoder_inputs"]
    assert log == [
        ("original", "prepare_encoder_inputs", (prompt, sampling), {"device": "cpu"}),
        ("start", fakes.returned["prepare_encoder_inputs"]),
    ]


def test_prepare_encoder_inputs_of_another_request_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    prompt, sampling = object(), object()
    enter(monkeypatch, FakeState(log, sampling=AlwaysEqual()))
    assert (
        plugin._prepare_encoder_inputs(fakes.fn["prepare_encoder_inputs"], prompt, sampling)
        is fakes.returned["prepare_encoder_inputs"]
    )
    assert log == [("original", "prepare_encoder_inputs", (prompt, sampling), {})]


def test_encode_prompt_outside_a_request_is_upstreams(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    enter(monkeypatch, None)
    pipe, prepared = object(), object()
    assert (
        plugin._encode_prompt(fakes.fn["encode_prompt"], pipe, prepared)
        is fakes.returned["encode_prompt"]
    )
    assert log == [("original", "encode_prompt", (pipe, prepared), {})]


def test_encode_prompt_shares_the_plan_before_encoding(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    pipe, prepared = object(), object()
    enter(monkeypatch, FakeState(log, pipeline=pipe))
    assert (
        plugin._encode_prompt(fakes.fn["encode_prompt"], pipe, prepared)
        is fakes.returned["encode_prompt"]
    )
    assert log == [("share_plan",), ("original", "encode_prompt", (pipe, prepared), {})]


def test_encode_prompt_of_another_pipeline_shares_nothing(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes
) -> None:
    pipe, prepared = object(), object()
    enter(monkeypatch, FakeState(log, pipeline=AlwaysEqual()))
    assert (
        plugin._encode_prompt(fakes.fn["encode_prompt"], pipe, prepared)
        is fakes.returned["encode_prompt"]
    )
    assert log == [("original", "encode_prompt", (pipe, prepared), {})]


# -- _forward ------------------------------------------------------------------------------------


@pytest.fixture
def preparations(monkeypatch: pytest.MonkeyPatch, log: Log) -> Iterator[None]:
    monkeypatch.setattr(plugin, "RequestPreparation", functools.partial(FakePreparation, log))
    yield


def test_forward_runs_upstream_inside_a_request_preparation(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes, preparations: None
) -> None:
    """Opened with the pipeline, the request's sampling params and the settings of the env."""
    monkeypatch.setenv(MISMATCH, "raise")
    monkeypatch.setenv(NEXT, "1")
    enter(monkeypatch, None)
    pipe, req = object(), SimpleNamespace(sampling_params=object(), request_id="req-7")
    assert plugin._forward(fakes.fn["forward"], pipe, req) is fakes.returned["forward"]
    assert log == [
        ("open", pipe, req.sampling_params, PluginSettings(True, RAISE, True), "req-7"),
        ("enter",),
        ("original", "forward", (pipe, req), {}),
        ("exit",),
    ]


def test_forward_disabled_prepares_nothing(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes, preparations: None
) -> None:
    monkeypatch.setenv(ENABLE, "0")
    enter(monkeypatch, None)
    pipe, req = object(), SimpleNamespace(sampling_params=object())
    assert plugin._forward(fakes.fn["forward"], pipe, req) is fakes.returned["forward"]
    assert log == [("original", "forward", (pipe, req), {})]


def test_forward_inside_a_request_opens_no_second_one(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes, preparations: None
) -> None:
    enter(monkeypatch, FakeState(log))
    pipe, req = object(), SimpleNamespace(sampling_params=object())
    assert plugin._forward(fakes.fn["forward"], pipe, req) is fakes.returned["forward"]
    assert log == [("original", "forward", (pipe, req), {})]


def test_forward_with_an_unknown_setting_runs_upstream_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch,
    log: Log,
    fakes: Fakes,
    preparations: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(NEXT, "maybe")
    enter(monkeypatch, None)
    pipe, req = object(), SimpleNamespace(sampling_params=object())
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(2):
            assert plugin._forward(fakes.fn["forward"], pipe, req) is fakes.returned["forward"]
    assert log == [("original", "forward", (pipe, req), {})] * 2
    assert logged(caplog) == [
        (
            logging.ERROR,
            "prenoise: PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT='maybe': expected one of 0, 1; "
            "requests run upstream's code only",
        )
    ]


class _Batch:
    """A batch of several requests: upstream's `sampling_params` property asserts."""

    @property
    def sampling_params(self) -> Any:
        raise AssertionError("RequestBatch with multiple requests does not have one")

    @property
    def request_id(self) -> str:
        raise IndexError("list index out of range")


@pytest.mark.parametrize(
    "req", [_Batch(), SimpleNamespace(), SimpleNamespace(sampling_params=None)]
)
def test_forward_leaves_a_request_it_cannot_read_to_upstream(
    monkeypatch: pytest.MonkeyPatch, log: Log, fakes: Fakes, preparations: None, req: Any
) -> None:
    """Upstream's own validation (e.g. its OmniClientError for a batch) meets it first."""
    enter(monkeypatch, None)
    pipe = object()
    assert plugin._forward(fakes.fn["forward"], pipe, req) is fakes.returned["forward"]
    assert log == [("original", "forward", (pipe, req), {})]
