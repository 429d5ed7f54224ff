"""`prenoise rollout-check`: each finding class from records the real recorder writes, a rerun
diff (missing, extra, changed), bad input refused with one line and exit 2 before any check,
and a real diffusers call with per-step sampler noise recorded twice and found reproduced."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.observe import noise_record
from prenoise.observe.noise_record import RECORD_ENV, record_noise
from prenoise.verify.bits import tensor_sha256
from prenoise.verify.rollout_noise import check_rollout, load_records


@pytest.fixture(autouse=True)
def fresh_recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(RECORD_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    noise_record._reset()
    yield
    noise_record._reset()


def _noise(seed: int, n: int = 32) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


Draw = tuple[str, int, int | None, int, torch.Tensor]  # request, seed, step, rank, noise


def _write(
    monkeypatch: pytest.MonkeyPatch, directory: Path, draws: list[Draw], group: str | None = None
) -> Path:
    """Record `draws` with the real recorder, one process file per rank (as engines do)."""
    directory.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv(RECORD_ENV, str(directory))
    for rank in sorted({d[3] for d in draws}):
        noise_record._reset()
        for request, seed, step, r, noise in draws:
            if r == rank:
                record_noise(
                    engine="test",
                    site="step" if step is not None else "initial",
                    request=request,
                    seed=seed,
                    step=step,
                    noise=noise,
                    rank=rank,
                    group=group,
                )
        # one file per rank: rename this process's file after the rank
        (produced,) = [p for p in directory.glob("noise-*.jsonl") if "rank" not in p.name]
        produced.rename(directory / f"noise-rank{rank}-{rank}.jsonl")
    monkeypatch.delenv(RECORD_ENV)
    noise_record._reset()
    return directory


def _batch(requests: int = 3, steps: int = 3, ranks: int = 2) -> list[Draw]:
    """A clean batch: each request its own seed, every rank of the group the same noise."""
    draws: list[Draw] = []
    for q in range(requests):
        for rank in range(ranks):
            draws.append((f"req{q}", 100 + q, None, rank, _noise(1000 * q)))
            for step in range(steps):
                draws.append((f"req{q}", 100 + q, step, rank, _noise(1000 * q + step + 1)))
    return draws


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["rollout-check", *argv])
    return status, capsys.readouterr().out


def test_a_clean_batch_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _write(monkeypatch, tmp_path / "a", _batch(), group="dp0")
    status, out = _check(capsys, str(directory), "--json", str(tmp_path / "out" / "r.json"))
    assert status == 0, out
    assert "noise trusted: 24 draws of 3 requests on 2 ranks, no finding" in out
    report = json.loads((tmp_path / "out" / "r.json").read_text())
    assert report["clean"] and report["counts"] == {
        "collision": 0,
        "rank_disagreement": 0,
        "repeated_within_request": 0,
        "rerun": 0,
    }
    assert "created the directory" in out


def test_a_seed_collision_is_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draws = _batch(ranks=1)
    # request 2 reuses request 0's seed: its noise is request 0's (verl #6857, verl-omni #561)
    draws = [(q, 100, s, r, _noise(int(n_seed))) for q, _, s, r, n_seed in _seeded(draws)]
    status, out = _check(capsys, str(_write(monkeypatch, tmp_path / "a", draws)))
    assert status == 1, out
    assert "collision:" in out and "the same seed 100" in out
    assert "'req0'" in out and "'req2'" in out
    report = check_rollout(load_records(tmp_path / "a"))
    assert report.counts == {"collision": 4}  # the initial draw and 3 steps of req0 == req2


def _seeded(draws: list[Draw]) -> list[tuple[str, int, int | None, int, int]]:
    """`draws` with each noise replaced by the seed it is drawn from; req2 draws req0's."""
    out = []
    for request, seed, step, rank, _ in draws:
        q = 0 if request == "req2" else int(request[3:])
        out.append((request, seed, step, rank, 1000 * q + (0 if step is None else step + 1)))
    return out


def test_a_seed_that_is_ignored_is_a_collision_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    same = _noise(5)
    draws: list[Draw] = [("a", 1, 0, 0, same), ("b", 2, 0, 0, same)]
    report = check_rollout(load_records(_write(monkeypatch, tmp_path / "d", draws)))
    (finding,) = report.findings["collision"]
    assert "seeds 1, 2" in finding.message


def test_ranks_of_a_group_that_disagree_are_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draws = _batch(requests=2, ranks=4)
    # rank 3 draws its own noise for req1's step 1 (e.g. seeded with rank + seed)
    draws = [
        (q, s, st, r, _noise(777) if (q, st, r) == ("req1", 1, 3) else n)
        for q, s, st, r, n in draws
    ]
    status, out = _check(capsys, str(_write(monkeypatch, tmp_path / "a", draws, group="sp0")))
    assert status == 1, out
    assert "rank_disagreement:" in out and "ranks [0, 1, 2] drew" in out and "ranks [3]" in out
    assert "group 'sp0'" in out
    report = check_rollout(load_records(tmp_path / "a"))
    assert report.counts == {"rank_disagreement": 1}


def test_different_groups_may_draw_differently(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a = _write(monkeypatch, tmp_path / "a", [("x", 1, 0, 0, _noise(1))], group="g0")
    _write(monkeypatch, tmp_path / "b", [("x", 1, 0, 1, _noise(2))], group="g1")
    (tmp_path / "b" / "noise-rank1-1.jsonl").rename(a / "noise-rank1-1.jsonl")
    assert check_rollout(load_records(a)).clean


def test_steps_repeating_their_noise_are_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draws = _batch(requests=2, ranks=1)
    # req1's step 2 draws step 1's noise again (a generator reset between steps)
    draws = [
        (q, s, st, r, _noise(1002) if (q, st) == ("req1", 2) else n) for q, s, st, r, n in draws
    ]
    status, out = _check(capsys, str(_write(monkeypatch, tmp_path / "a", draws)))
    assert status == 1, out
    assert "repeated_within_request:" in out and "step-to-step noise must differ" in out
    report = check_rollout(load_records(tmp_path / "a"))
    assert report.counts == {"repeated_within_request": 1}


def test_a_rerun_that_reproduces_every_draw_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _write(monkeypatch, tmp_path / "a", _batch())
    b = _write(monkeypatch, tmp_path / "b", _batch())
    status, out = _check(capsys, str(a), str(b))
    assert status == 0, out
    assert "against a rerun of 24 draws" in out


def test_a_rerun_diff_names_missing_extra_and_changed_draws(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _batch()
    rerun = [d for d in first if not (d[0] == "req2" and d[2] == 2 and d[3] == 1)]  # missing
    rerun.append(("req9", 109, 0, 0, _noise(9999)))  # extra
    rerun = [
        (q, s, st, r, _noise(4242) if (q, st, r) == ("req0", 0, 0) else n)
        for q, s, st, r, n in rerun
    ]  # changed on one rank (also a disagreement within the rerun, not checked: DIR's is)
    a = _write(monkeypatch, tmp_path / "a", first)
    b = _write(monkeypatch, tmp_path / "b", rerun)
    status, out = _check(capsys, str(a), str(b), "--json", str(tmp_path / "r.json"))
    assert status == 1, out
    messages = [
        f["message"] for f in json.loads((tmp_path / "r.json").read_text())["findings"]["rerun"]
    ]
    assert len(messages) == 3, messages
    assert any("'req2' step 2 rank 1: missing in the rerun" in m for m in messages)
    assert any("'req9' step 0 rank 0: extra in the rerun" in m for m in messages)
    assert any("'req0' step 0 rank 0: not reproduced" in m for m in messages)


def test_a_rerun_with_new_request_ids_is_matched_by_seed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An engine whose request ids are random (a uuid per request): the rerun's draws differ by
    request, not by seed; `--match seed` matches them, and still finds a changed draw."""
    first = _batch()
    renamed = [(f"uuid-{q}-rerun", s, st, r, n) for q, s, st, r, n in first]
    a = _write(monkeypatch, tmp_path / "a", first)
    b = _write(monkeypatch, tmp_path / "b", renamed)
    status, out = _check(capsys, str(a), str(b))
    assert status == 1 and "missing in the rerun" in out  # by request: nothing matches
    status, out = _check(capsys, str(a), str(b), "--match", "seed")
    assert status == 0, out
    changed = [
        (q, s, st, r, _noise(31337) if (s, st, r) == (101, 1, 0) else n)
        for q, s, st, r, n in renamed
    ]
    c = _write(monkeypatch, tmp_path / "c", changed)
    status, out = _check(capsys, str(a), str(c), "--match", "seed")
    assert status == 1 and "test/step seed 101 step 1 rank 0: not reproduced" in out, out
    # two requests with one seed cannot be matched by seed: refused, not guessed
    collide = _write(
        monkeypatch, tmp_path / "d", [("x", 5, 0, 0, _noise(1)), ("y", 5, 0, 0, _noise(2))]
    )
    status, out = _check(capsys, str(collide), str(a), "--match", "seed")
    assert status == 2 and "two requests with one seed: match by request" in out, out
    status, out = _check(capsys, str(a), "--match", "seed")
    assert status == 2 and "give the rerun's records as DIR2" in out, out


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: None, "no noise records"),
        (
            lambda d: (d / "noise-h-1.jsonl").write_text("{not json\n"),
            "noise-h-1.jsonl:1: not a JSON",
        ),
        (lambda d: (d / "noise-h-1.jsonl").write_text('{"engine": "x"}\n'), "no 'site' field"),
        (
            lambda d: (d / "noise-h-1.jsonl").write_text(_line(step="3") + "\n"),
            "field 'step' is '3'",
        ),
        (lambda d: (d / "noise-h-1.jsonl").write_text(_line(digest="zz")), "cut short"),
        (
            lambda d: (d / "noise-h-1.jsonl").write_text(_line(digest="zz") + "\n"),
            "not a hex digest",
        ),
        (lambda d: (d / "noise-h-1.jsonl").mkdir(), "a directory, not a record file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], Any],
    expected: str,
) -> None:
    make(tmp_path)
    status, out = _check(capsys, str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert status == 2 and out.count("\n") == 1 and out.startswith("error: "), out
    assert expected in out, out
    assert not (tmp_path / "r.json").exists()


def _line(**fields: object) -> str:
    record: dict[str, object] = {
        "engine": "e",
        "site": "step",
        "request": "r",
        "seed": 1,
        "step": 0,
        "rank": 0,
        "world_size": 1,
        "group": None,
        "shape": [2],
        "dtype": "float32",
        "digest": "00" * 32,
        "host": "h",
        "pid": 1,
        "time": 0.0,
    }
    record.update(fields)
    return json.dumps(record)


def test_other_refusals(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _write(monkeypatch, tmp_path / "a", _batch(requests=1))
    for argv, expected in [
        ([str(tmp_path / "nowhere")], "no such directory"),
        ([str(a / "noise-rank0-0.jsonl")], "not a directory"),
        ([str(a), str(a)], "the same directory as DIR"),
        ([str(a), str(tmp_path / "a" / ".." / "a")], "the same directory as DIR"),
        ([str(a), "--json", str(a / "noise-rank0-0.jsonl")], "is the input DIR"),
        ([str(a), "--json", str(tmp_path)], "is a directory"),
    ]:
        status, out = _check(capsys, *argv)
        assert status == 2 and out.count("\n") == 1 and expected in out, (argv, out)
    # a draw two processes both recorded cannot be matched against a rerun
    (a / "noise-copy-9.jsonl").write_text((a / "noise-rank0-0.jsonl").read_text())
    status, out = _check(capsys, str(a), str(_write(monkeypatch, tmp_path / "b", _batch(1))))
    assert status == 2 and "is recorded twice" in out, out


# --- a real diffusers call, per-step sampler noise recorded ---------------------------------


@pytest.fixture(scope="module")
def cogvideox() -> Any:
    pytest.importorskip("diffusers")
    sys.path.insert(0, str(Path(__file__).parent / "integrations"))
    try:
        import diffusers_tiny
    finally:
        sys.path.pop(0)
    from prenoise.integrations.diffusers import enable

    pipe = diffusers_tiny.cogvideox()  # CogVideoX-DPM: per-step noise from the caller's generator
    enable(pipe)
    return pipe, diffusers_tiny.call_kwargs("cogvideox")


def _diffusers_batch(
    monkeypatch: pytest.MonkeyPatch,
    directory: Path,
    pipe: Any,
    kwargs: dict[str, Any],
    seeds: list[int],
) -> list[torch.Tensor]:
    directory.mkdir()
    monkeypatch.setenv(RECORD_ENV, str(directory))
    outputs = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        out = pipe(generator=generator, **{**kwargs, "num_inference_steps": 3, "output_type": "pt"})
        outputs.append(out.frames if hasattr(out, "frames") else out[0])
    monkeypatch.delenv(RECORD_ENV)
    return outputs


def test_a_real_diffusers_run_recorded_twice_is_reproduced(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cogvideox: Any,
) -> None:
    pipe, kwargs = cogvideox
    first = _diffusers_batch(monkeypatch, tmp_path / "a", pipe, kwargs, [1, 2])
    second = _diffusers_batch(monkeypatch, tmp_path / "b", pipe, kwargs, [1, 2])
    for x, y in zip(first, second, strict=True):
        assert torch.equal(x, y)
    records = load_records(tmp_path / "a")
    steps = [r for r in records if r.site == "step"]
    # CogVideoX-DPM with 3 steps draws 2 * 3 - 2 = 4 per-step tensors per call
    assert sorted({r.request for r in records}) == ["call@rank0#0", "call@rank0#1"]
    assert len(steps) == 8 and {r.step for r in steps} == {0, 1, 2, 3}
    assert {r.site for r in records} - {"step"} == {"plan:noise"}
    # the digest is of the noise drawn: the initial latents are the generator's first draw
    (initial,) = [r for r in records if r.site == "plan:noise" and r.seed == 1]
    dtype = getattr(torch, initial.dtype)
    drawn = torch.randn(initial.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    assert initial.digest == tensor_sha256(drawn)
    assert {r.seed for r in records} == {1, 2} and {r.engine for r in records} == {"diffusers"}
    status, out = _check(capsys, str(tmp_path / "a"), str(tmp_path / "b"))
    assert status == 0, out
    # the same seed for both requests of a batch: a collision, found
    _diffusers_batch(monkeypatch, tmp_path / "c", pipe, kwargs, [3, 3])
    status, out = _check(capsys, str(tmp_path / "c"))
    assert status == 1 and "collision" in out and "the same seed 3" in out, out


def test_recording_off_costs_no_record(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cogvideox: Any
) -> None:
    pipe, kwargs = cogvideox
    monkeypatch.chdir(tmp_path)
    pipe(generator=torch.Generator().manual_seed(0), **{**kwargs, "num_inference_steps": 2})
    assert list(tmp_path.iterdir()) == []
