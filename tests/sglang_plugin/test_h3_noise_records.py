"""MiniMax-H3's noise records for `prenoise rollout-check` (SGLang 0.5.23's real stages, a fake
DiT): a rollout request records its initial video / audio noise and each stochastic step under
one stable name (`sglang#N`), a rerun reproduces them and is matched by that name (no
`--match seed`), a forced seed collision is found, and the visual-condition noise records the
same digests whether prenoise served it or upstream drew it. Recording changes no bit.
(Two ranks of one replica: `test_h3_two_ranks`.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from _h3_harness import encode_visual, make_request, run, same
from _h3_rollout_harness import differing, rollout_request, run_rollout

from prenoise.integrations.sglang import h3_initial, h3_record, plugin
from prenoise.noise.layouts import Patchify
from prenoise.observe import noise_record
from prenoise.verify.rollout_noise import check_rollout, load_records


def _lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for f in sorted(folder.iterdir()) for x in f.read_text().splitlines()]


@pytest.fixture
def record_into(monkeypatch: pytest.MonkeyPatch) -> Any:
    def into(folder: Path | None) -> None:
        if folder is None:
            monkeypatch.delenv(noise_record.RECORD_ENV, raising=False)
        else:
            folder.mkdir(exist_ok=True)
            monkeypatch.setenv(noise_record.RECORD_ENV, str(folder))

    yield into
    noise_record._reset()


def test_rollout_request_recorded_and_rerun_matched_by_name(
    h3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, record_into: Any
) -> None:
    request = {"steps": 5, "sde_steps": [0, 2, 3]}
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_rollout(h3, rollout_request(h3, 14, **request), monkeypatch)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    runs = []
    for name in ("a", "b"):
        record_into(tmp_path / name)
        runs.append(run_rollout(h3, rollout_request(h3, 14, **request), monkeypatch))
    record_into(None)
    assert differing(off, runs[0]) == [] and differing(off, runs[1]) == []
    lines = _lines(tmp_path / "a")
    assert [(r["site"], r["step"], r["seed"]) for r in lines] == [
        ("h3.initial.video", None, 14),
        ("h3.initial.audio", None, 14),
        *(("h3.rollout", step, 14) for step in (0, 2, 3)),
    ]
    assert {(r["request"], r["group"], r["engine"]) for r in lines} == {
        ("sglang#0", None, "sglang")
    }
    # the initial video record is the digest of upstream's own draw, patchified
    video = torch.randn(
        1, 24, *off["latent_shape"][2:], generator=torch.Generator().manual_seed(14)
    )
    assert lines[0]["digest"] == noise_record.noise_digest(Patchify().apply(video))
    first = check_rollout(load_records(tmp_path / "a"))
    assert first.clean and first.requests == 1, first.summary()
    rerun = check_rollout(load_records(tmp_path / "a"), load_records(tmp_path / "b", "DIR2"))
    assert rerun.clean, rerun.summary()  # matched by request name: no --match seed


def test_forced_seed_collision_is_found(
    h3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, record_into: Any
) -> None:
    """Two requests given one seed (the verl #6857 class): rollout-check names the collision
    across the two requests (sglang#0, sglang#1), for the initial noise and each step."""
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    record_into(tmp_path / "a")
    for _ in range(2):
        run_rollout(h3, rollout_request(h3, 21, steps=4, sde_steps=[1, 2]), monkeypatch)
    record_into(None)
    assert {r["request"] for r in _lines(tmp_path / "a")} == {"sglang#0", "sglang#1"}
    report = check_rollout(load_records(tmp_path / "a"))
    assert not report.clean and report.counts == {"collision": 4}, report.summary()
    assert "the same seed 21" in report.findings["collision"][0].message


def test_recording_off_writes_nothing_and_warmups_are_not_recorded(
    h3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, record_into: Any
) -> None:
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    run_rollout(h3, rollout_request(h3, 3, steps=3), monkeypatch)  # not recording
    record_into(tmp_path / "a")
    req = rollout_request(h3, 3, steps=3)
    req.is_warmup = True
    run_rollout(h3, req, monkeypatch)
    record_into(None)
    assert list((tmp_path / "a").iterdir()) == []


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("h3_record_media")
    files = {}
    for name, size, colour in (
        ("first", (200, 112), (10, 200, 30)),
        ("last", (160, 96), (200, 20, 30)),
        ("wide", (300, 200), (20, 20, 230)),
        ("tall", (120, 160), (20, 120, 230)),
    ):
        path = folder / f"{name}.png"
        Image.new("RGB", size, colour).save(path)
        files[name] = str(path)
    return files


def _fl2va(h3: Any, files: dict[str, str]) -> Any:
    conditions = [
        {"type": "image", "uri": files["first"], "role": "keyframe", "frame_index": 0},
        {"type": "image", "uri": files["last"], "role": "keyframe", "frame_index": -1},
    ]
    return make_request(h3, 17, 64, 4.0, task="fl2va", conditions=conditions,
                        aspect_ratio="auto")  # fmt: skip


def _ref2va(h3: Any, files: dict[str, str]) -> Any:
    conditions = [
        {"type": "image", "uri": files["wide"], "role": "reference"},
        {"type": "image", "uri": files["tall"], "role": "reference"},
    ]
    return make_request(h3, 2**40 + 3, 64, 4.0, task="ref2va", conditions=conditions)


@pytest.mark.parametrize(
    ("make", "sites"),
    [(_fl2va, ["h3.condition.0"]), (_ref2va, ["h3.condition.0", "h3.condition.1"])],
    ids=["fl2va_first_last", "ref2va_two_images"],
)
def test_condition_noise_recorded_served_or_drawn_by_upstream(
    h3: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    record_into: Any,
    images: dict[str, str],
    make: Any,
    sites: list[str],
) -> None:
    """Served by prenoise (a) or drawn by upstream (b: the serve refused, upstream's draws read
    by the recording mode): the same records, bit for bit; and the same tensors as the plugin
    off. FL2VA's two keyframes have one key (upstream's one seed, one shape: the same bits by
    its recipe), recorded once."""
    encode = encode_visual(h3, {})
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run(h3, make(h3, images), before_latents=encode)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    record_into(tmp_path / "a")
    served = run(h3, make(h3, images), before_latents=encode)
    record_into(tmp_path / "b")
    with monkeypatch.context() as patch:
        patch.setattr(h3_initial.RequestDraws, "serve_condition_rows", lambda *_a: None)
        drawn = run(h3, make(h3, images), before_latents=encode)
    record_into(None)
    for arm in (served, drawn):
        arm.pop("served_ptrs")
    off.pop("served_ptrs")
    assert same(off, served) == [] and same(off, drawn) == []
    lines = _lines(tmp_path / "a")
    assert [r["site"] for r in lines] == ["h3.initial.video", "h3.initial.audio", *sites]
    assert [r["site"] for r in _lines(tmp_path / "b")] == [r["site"] for r in lines]
    report = check_rollout(load_records(tmp_path / "a"), load_records(tmp_path / "b", "DIR2"))
    assert report.clean, report.summary()


def test_condition_records_are_the_noise_upstream_mixes(tmp_path: Path, record_into: Any) -> None:
    """The captured draw, cut and patchified, is the noise upstream's function mixes: with
    `noise_aug = 0` its result is that noise itself."""
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.condition_noise import (  # noqa: E501
        minimax_h3_imgvid_cond_noise_aug_rows as upstream,
    )

    record_into(tmp_path / "a")
    kwargs = {"condition_shapes": [(1, 4, 6), (2, 2, 4)], "target_latent_t": 3,
              "imgvid_cond_num_frames": 2, "seed": 5, "noise_aug": 0.0}  # fmt: skip
    out = h3_record.captured_condition_noise(object(), upstream, (torch.zeros(10, 96),), kwargs)
    record_into(None)
    lines = _lines(tmp_path / "a")
    assert [r["site"] for r in lines] == ["h3.condition.0", "h3.condition.1"]
    assert lines[0]["digest"] == noise_record.noise_digest(out[:6])
    assert lines[1]["digest"] == noise_record.noise_digest(out[6:])


def test_changed_replica_group_code_records_no_group(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A changed `get_replica_group`: records carry no group (never a wrong one), one WARNING
    naming it; the noise paths are untouched."""
    import logging
    import sys
    from types import SimpleNamespace

    from prenoise.integrations.sglang import reviewed, support

    replica = SimpleNamespace(ranks=[3, 2])
    state = sys.modules[h3_record._PARALLEL_STATE]
    monkeypatch.setattr(state, "world_group_is_initialized", lambda: True)
    monkeypatch.setattr(state, "get_replica_group", lambda: replica)
    assert h3_record.replica_group() == "replica:2,3"
    key = next(k for k in reviewed.REVIEWED if k.endswith(":get_replica_group"))
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(h3_record, "_said_off", False)
    support.reset()
    try:
        with caplog.at_level(logging.WARNING, logger="prenoise.sglang"):
            assert h3_record.replica_group() is None
            assert h3_record.replica_group() is None
        (line,) = [r.getMessage() for r in caplog.records if r.name == "prenoise.sglang"]
        assert "get_replica_group" in line and reviewed.H3_RECORD_PATH in line
        assert support.current().runs(reviewed.H3_ROLLOUT_PATH)
    finally:
        monkeypatch.undo()
        support.reset()
