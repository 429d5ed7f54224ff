"""`prenoise doctor` reports the SGLang plugin per path, from the installed source files (SGLang
0.5.23 here): every path on, and a changed function turning its paths off by name — never
"active" for a plugin whose paths are all off."""

from __future__ import annotations

from typing import Any

import pytest

from prenoise.integrations.sglang import reviewed, status, support


def test_here_every_path_runs_and_the_plugin_is_active(h3: Any) -> None:
    found = status.sglang_status({})
    rows = dict(found.rows())
    assert found.sglang_version == "0.5.23" and rows["sglang"] == "0.5.23 (code of 0.5.23)"
    assert rows["SGLang plugin"].startswith("active in every SGLang diffusion process for: ")
    assert "(off here" not in rows["SGLang plugin"]
    for path in reviewed.PATHS:
        if path != reviewed.H3_RECORD_PATH:
            assert rows[path] == "on (the reviewed code)"
    assert rows["sglang-verify"].startswith("proves")
    assert rows["entry point"] == (
        "sglang.multimodal_gen.plugins: prenoise.integrations.sglang:register"
    )
    assert rows["plugin settings"] == (
        "PRENOISE_SGLANG=(unset) PRENOISE_SGLANG_NOISE_STREAM=native"
    )


def test_a_changed_function_names_itself_and_turns_its_paths_off(
    h3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The H3 latent stage changed: every MiniMax-H3 path is off with the function named and the
    next step; the Wan/LTX-2 paths stay on, so the verdict says which (never all "active")."""
    key = next(k for k in reviewed.REVIEWED if k.endswith(":MiniMaxH3LatentPreparationStage"))
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    support.reset()
    try:
        found = status.sglang_status({})
        rows = dict(found.rows())
        off = rows[reviewed.H3_INITIAL_PATH]
        assert off.startswith("off, upstream's code runs: MiniMaxH3LatentPreparationStage (")
        assert "changed: digest" in off and off.endswith(status.NEXT_STEP)
        assert rows["sglang-verify"].startswith("exits 1 here")
        verdict = rows["SGLang plugin"]
        assert verdict.startswith("active in every SGLang diffusion process for: Wan/")
        assert f"off here: {reviewed.H3_INITIAL_PATH}" in verdict
        # all paths off: inactive, never "active"
        for other in reviewed.REVIEWED:
            monkeypatch.setitem(reviewed.REVIEWED, other, {"000000000000": ("0.5.23",)})
        support.reset()
        verdict = status.sglang_status({}).verdict
        assert verdict == "inactive: every path runs upstream's code untouched here"
    finally:
        monkeypatch.undo()
        support.reset()
    assert support.current().h3_initial


@pytest.mark.parametrize(
    ("environ", "verdict"),
    [
        ({"PRENOISE_SGLANG": "0"}, "inactive: disabled by PRENOISE_SGLANG=0"),
        ({"PRENOISE_SGLANG": "yes"}, "inactive: PRENOISE_SGLANG='yes' is not 0 or 1"),
        ({"SGLANG_PLUGINS": "other"}, "inactive: SGLANG_PLUGINS='other' does not name"),
        ({"PRENOISE_SGLANG_NOISE_STREAM": "avx2"}, "inactive: PRENOISE_SGLANG_NOISE_STREAM="),
    ],
)
def test_settings_that_register_nothing_say_so(
    h3: Any, environ: dict[str, str], verdict: str
) -> None:
    assert status.sglang_status(environ).verdict.startswith(verdict)
