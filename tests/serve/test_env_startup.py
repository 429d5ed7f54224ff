"""Every PRENOISE_* variable is checked when a command starts: `prenoise serve` refuses a bad
value with exit 2 and one line (variable, value, accepted values) before it loads a model, so
a server-side typo never reaches a client as a 422."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

import uvicorn

from prenoise.cli.commands import main
from prenoise.guards import env
from prenoise.guards.env import VARIABLES, EnvVarError, check_environment
from prenoise.integrations.vllm_omni import settings as plugin_settings
from prenoise.noise import kernel

SRC = Path(env.__file__).parent
BAD = {variable.name: "maybe" for variable in VARIABLES} | {"PRENOISE_SHM_DIR": "/no/such/dir"}


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """uvicorn.run records the app instead of serving it."""
    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    return served


@pytest.mark.parametrize("name", [variable.name for variable in VARIABLES])
def test_serve_refuses_a_bad_value_at_startup(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_server: list[Any],
    recipe_path: Path,
    tmp_path: Path,
    name: str,
) -> None:
    monkeypatch.setenv(name, BAD[name])
    argv = ["serve", "--recipe", str(recipe_path), "--output-dir", str(tmp_path)]
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("error: "), out
    assert f"{name}={BAD[name]!r}" in out and "accepted: " in out, out
    assert no_server == []


def test_the_library_start_up_checks_too(
    monkeypatch: pytest.MonkeyPatch, recipe: Any, pipeline: Any, tmp_path: Path
) -> None:
    from prenoise.serve import ServeSettings, create_app

    monkeypatch.setenv("PRENOISE_X86_STREAM_IMPL", "protable")
    with pytest.raises(EnvVarError, match="accepted: auto, portable"):
        create_app(ServeSettings(recipe=recipe, output_dir=tmp_path), pipeline)


def test_accepted_values_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in VARIABLES:
        for value in variable.choices or (str(tmp_path),):
            # choices are matched stripped and case-insensitively, as their readers do
            monkeypatch.setenv(variable.name, f" {value.upper()} " if variable.choices else value)
            check_environment()
        monkeypatch.delenv(variable.name)
    check_environment()


def test_the_table_names_every_variable_the_package_reads() -> None:
    read = set()
    for path in SRC.rglob("*.py"):
        read |= set(re.findall(r"[\"'](PRENOISE_[A-Z0-9_]+)[\"']", path.read_text()))
    assert read == {variable.name for variable in VARIABLES}


def test_the_table_accepts_what_the_readers_accept() -> None:
    choices = {variable.name: variable.choices for variable in VARIABLES}
    assert choices[kernel.ENV_VAR] == kernel.BACKEND_CHOICES
    assert choices[plugin_settings.ENABLE_ENV] == tuple(plugin_settings._BOOLS)
    assert choices[plugin_settings.NEXT_OUTPUT_ENV] == tuple(plugin_settings._BOOLS)
    assert choices[plugin_settings.MISMATCH_ENV] == tuple(plugin_settings._POLICIES)


def test_serve_options_reach_the_settings(
    no_server: list[Any], recipe_path: Path, tmp_path: Path
) -> None:
    argv = ["serve", "--recipe", str(recipe_path), "--output-dir", str(tmp_path)]
    limits = ["--max-queued", "3", "--max-queued-upload-mb", "5", "--body-idle-timeout", "7"]
    assert main([*argv, *limits]) == 0
    settings = no_server[0].state.service.settings
    assert (settings.limits.max_queued, settings.limits.max_queued_upload_bytes) == (3, 5 << 20)
    assert settings.body_idle_timeout_s == 7
