"""2-rank gloo runs on loopback: identical inputs, host sharing, failures, hangs, SP denoise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from _workers import fail_hang_die_in_draw

from prenoise.distributed.launch import spawn_ranks
from prenoise.distributed.shm import leftover_segments
from prenoise.distributed.verification import field_digests
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
SP_TOLERANCE = 1e-5
"""Max |distributed − single-process| of the final rows (measured ~1e-7 on the tiny recipe)."""


def _single_process(workdir: Path) -> tuple[dict, torch.Tensor, torch.Tensor]:
    # The ranks run torch with one thread (as torchrun does): encoder convolutions sum in a
    # thread-count-dependent order, so the reference must use the same setting.
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(workdir)
    torch.set_num_threads(1)
    try:
        recipe = load_recipe(TINY)
        pipeline = Ref2VAPipeline(Ref2VAModels.default(recipe.model))
        plan = plan_request(recipe)
        _, prepared, _ = pipeline.prepare(plan, "serial", keep_noise=True)
        digests = field_digests([prepared])
        video, audio = pipeline.denoise(plan, prepared)
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
    return digests, video, audio


def test_two_ranks_prepare_identical_inputs_and_denoise_in_parallel(shared_ranks: Any) -> None:
    """`prepare_both_modes_and_denoise`, run first in the shared 2-rank job (`conftest.py`)."""
    before = shared_ranks.before
    r0, r1 = shared_ranks.values("prepare_both_modes_and_denoise")
    single, video, audio = _single_process(shared_ranks.workdir)

    # every prepared field (noise as drawn + every denoise input), both modes, both ranks
    assert set(single) == set(r0["per_rank"]) and len(single) >= 9
    assert r0["per_rank"] == single and r1["per_rank"] == single
    assert r0["shared"] == single and r1["shared"] == single
    assert single["visual_condition_noise"] is not None
    # host-shared fields live in /dev/shm mappings whose names are already unlinked
    assert all(name and "/prenoise-" in name for name in r0["mapped"] + r1["mapped"])
    assert r0["mapped"] == r1["mapped"]
    assert r0["leftovers"] == [] or set(map(Path, r0["leftovers"])) <= before
    assert set(leftover_segments()) <= before
    assert r0["used_prepared_noise"] and r1["used_prepared_noise"]

    # sequence-parallel output: equal on both ranks, equal to one process within tolerance
    assert torch.equal(r0["video"], r1["video"]) and torch.equal(r0["audio"], r1["audio"])
    assert r0["video"].shape == video.shape and r0["audio"].shape == audio.shape
    err = max((r0["video"] - video).abs().max().item(), (r0["audio"] - audio).abs().max().item())
    print(f"sequence-parallel max abs error vs single process: {err:.3e}")
    assert err <= SP_TOLERANCE

    # `torchrun … bench` progress: the single-process labels, with the bench's modes as arms
    labels = ["warm-up 1/1 (per_rank)", "pair 1/1 (per_rank)", "pair 1/1 (host_shared)"]
    assert r0["bench_labels"] == labels and r1["bench_labels"] == labels
    # `bench --encoder-threads 2` under torchrun: every rank's every request ran with 2 torch
    # threads (the ranks start with 1), and each rank gets its own count back afterwards
    assert r1["bench"] is None and r0["bench"]["threads"]["encoder_threads_flag"] == 2
    assert r0["bench"]["threads"]["torch_intra_op_threads"] == 2
    ran_with = [s["torch_threads"] for m in r0["bench"]["per_rank"].values() for p in m for s in p]
    assert ran_with == [2] * 4  # 2 modes x 1 pair x 2 ranks
    assert r0["threads_after_bench"] == 1 and r1["threads_after_bench"] == 1


def test_a_failing_hung_or_dead_rank_fails_the_others_cleanly(tmp_path: Path) -> None:
    before = set(leftover_segments())
    timeout_s = 3.0
    outcomes = spawn_ranks(
        fail_hang_die_in_draw, 2, (str(TINY), str(tmp_path), timeout_s), timeout_s=READY_CEILING_S
    )
    r0_outcome, r1_outcome = outcomes
    assert r0_outcome.ok, r0_outcome.error  # rank 0 got through all three: nothing hung
    assert not r1_outcome.finished  # rank 1 died in the third request
    r0 = r0_outcome.value

    # a draw failure: the original text on the failing rank and on the other one
    # (rank 1 owns the video stream: the condition stream is larger and went to rank 0)
    original = "injected draw failure in initial_video_noise on rank 1"
    assert r0["fail"][0] == (
        f"RankFailedError: rank 1 failed in host-shared draw of seed 42: RuntimeError: {original}"
    )
    assert (tmp_path / "rank1-fail.txt").read_text() == f"RuntimeError: {original}"
    # (failed on rank 1's report, not on a timeout: the RankFailedError above, no 'within 3 s')
    # the hung rank gives up too (its own draw timed out, or it saw rank 0's report)
    hung = (tmp_path / "rank1-hang.txt").read_text()
    assert hung.startswith(("RankTimeoutError:", "RankFailedError:")), hung

    # a hung draw: after the timeout rank 0 names rank 1 itself, or relays rank 1's own report
    # that its draw thread did not finish (whichever deadline passes first)
    assert r0["hang"][0].startswith(
        (
            "RankTimeoutError: rank 0: rank(s) [1] did not finish '42/drawn' within 3 s",
            "RankFailedError: rank 1 failed in preparation: RankTimeoutError: rank 1: this "
            "rank's draw thread did not finish 'its host-shared draws of seed 42' within 3 s",
        )
    ), r0["hang"][0]
    # a dead rank reports nothing: rank 0 names it after the timeout
    assert r0["die"][0].startswith(
        "RankTimeoutError: rank 0: rank(s) [1] did not finish '42/drawn' within 3 s (died or hung)"
    ), r0["die"][0]
    for how in ("hang", "die"):  # not given up before the timeout the test sets
        assert r0[how][1] >= timeout_s

    # no shared-memory name left behind, after any of them
    for how in ("fail", "hang", "die"):
        assert set(map(Path, r0[how][2])) <= before
    assert set(leftover_segments()) <= before
