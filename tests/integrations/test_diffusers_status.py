"""`prenoise doctor` on the diffusers integration: what is used here and, for what runs plain, the
changed function (the verdicts of `digests.py`, the ones `enable()` reaches); and its torch rows."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("diffusers")

import diffusers
from rich.console import Console

from prenoise.cli.doctor import doctor_table
from prenoise.integrations.diffusers import digests, supported, supported_modular
from prenoise.integrations.diffusers.status import DiffusersStatus, diffusers_status
from prenoise.integrations.diffusers.step_noise import STEP_DRAWS
from prenoise.noise import kernel

WAN = "diffusers.pipelines.wan.pipeline_wan:WanPipeline.prepare_latents"
DDIM = "diffusers.schedulers.scheduling_ddim:DDIMScheduler.step"
FAKE = {"0123456789ab": ("0.42.1",)}


@pytest.fixture
def fresh_digests(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(digests, "_reviewed", {k: dict(v) for k, v in digests._reviewed.items()})
    monkeypatch.setattr(digests, "_explicit", dict(digests._explicit))
    monkeypatch.setattr(digests, "_problems", {})
    monkeypatch.setattr(digests, "_verdicts", {})
    return digests


def test_this_install_uses_everything() -> None:
    status = diffusers_status()
    assert status.version == diffusers.__version__
    assert len(status.classes) == len(supported()) and not any(status.classes.values())
    assert len(status.schedulers) == len(STEP_DRAWS) and not any(status.schedulers.values())
    assert status.windows == {"LTXImageToVideoPipeline": None}
    assert len(status.modular) == len(supported_modular()) and not any(status.modular.values())
    assert "MiniMaxH3ModularPipeline" not in status.modular_unreviewed
    rows = dict(status.rows())
    assert rows["diffusers classes planned"] == f"{len(supported())} of {len(supported())} planned"
    assert rows["diffusers per-step noise ahead"] == f"{len(STEP_DRAWS)} of 10 schedulers"
    assert rows["diffusers stream windows"] == "1 of 1 armed in named streams"
    assert rows["diffusers"].startswith(f"{diffusers.__version__} (support decided by source")


def test_changed_code_is_named_per_class(fresh_digests: Any) -> None:
    installed = {key: fresh_digests.installed_digest(key) for key in (WAN, DDIM)}
    fresh_digests._reviewed[WAN] = dict(FAKE)
    fresh_digests._reviewed[DDIM] = dict(FAKE)
    status = diffusers_status()
    n = len(supported())
    assert [name for name, problem in status.classes.items() if problem] == ["WanPipeline"]
    rows = dict(status.rows())
    assert rows["diffusers classes planned"] == (
        f"{n - 1} of {n} planned; plain (code changed): WanPipeline: WanPipeline.prepare_latents "
        f"(diffusers.pipelines.wan.pipeline_wan) changed: digest {installed[WAN]}, reviewed "
        f"0123456789ab (0.42.1); {fresh_digests.NEXT_STEP}"
    )
    assert rows["diffusers per-step noise ahead"] == (
        f"{len(STEP_DRAWS) - 1} of {len(STEP_DRAWS)} schedulers; plain (code changed): "
        "DDIMScheduler: DDIMScheduler.step (diffusers.schedulers.scheduling_ddim) changed: "
        f"digest {installed[DDIM]}, reviewed 0123456789ab (0.42.1); {fresh_digests.NEXT_STEP}"
    )
    text = _rendered()
    assert "WanPipeline.prepare_latents" in text and "DDIMScheduler.step" in text


def test_not_installed_and_broken() -> None:
    assert DiffusersStatus(None).rows() == [
        ("diffusers", "not installed (pip install 'prenoise[diffusers]')")
    ]
    assert DiffusersStatus(None, broken="ImportError('x')").rows() == [
        ("diffusers", "installed, not importable (ImportError('x')): every call plain")
    ]


def _rendered() -> str:
    console = Console(record=True, width=400)
    console.print(doctor_table())
    return " ".join(console.export_text().split())


def test_doctor_says_what_torch_and_diffusers_do_here() -> None:
    text = _rendered()
    tested = ", ".join(kernel.TESTED_TORCH_RELEASES)
    assert f"(tested: {tested}; any torch is self-checked here)" in text
    assert f"torch bf16/f16 rule │ ok: torch {kernel.torch.__version__} draws bfloat16" in text
    assert "diffusers classes planned │" in text and "diffusers modular plans │" in text
