"""One-line errors, exit 2, before any work: argument types, env vars, output paths, --debug."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from prenoise.cli.args import UsageError, check_output_dir, check_output_file
from prenoise.cli.commands import build_parser, main
from prenoise.guards.env import EnvVarError
from prenoise.guards.seeds import SEED_MAX, check_seed_range
from prenoise.noise import kernel
from prenoise.preparation.draws import Draw, Stream

# -- seeds: one rule, matching what torch's generator accepts ---------------------------------


@given(seed=st.integers(0, SEED_MAX), count=st.integers(1, 8))
def test_seed_rule_accepts_exactly_the_seeds_torch_takes(seed: int, count: int) -> None:
    last = seed + count - 1
    if last <= SEED_MAX:
        assert check_seed_range(seed, count) == seed
        torch.Generator().manual_seed(last)  # torch takes every seed the rule lets through
    else:
        with pytest.raises(ValueError, match="seed \\+ outputs - 1"):
            check_seed_range(seed, count)
        with pytest.raises((ValueError, RuntimeError)):
            torch.Generator().manual_seed(last)


def test_negative_seeds_are_refused_as_aliases() -> None:
    g_neg, g_pos = torch.Generator().manual_seed(-1), torch.Generator().manual_seed(SEED_MAX)
    assert torch.equal(g_neg.get_state(), g_pos.get_state())  # why -1 is refused
    with pytest.raises(ValueError, match=">= 0"):
        check_seed_range(-1)


def test_stream_refuses_an_out_of_range_seed_at_construction() -> None:
    draw = Draw("x", (64,))
    Stream("ok", SEED_MAX, (draw,))
    with pytest.raises(ValueError, match="seed range"):
        Stream("bad", SEED_MAX + 1, (draw,))


# -- argument types: argparse refuses, exit 2 ---------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["bench", "--recipe", "r.yaml", "--pairs", "0"], "--pairs: must be >= 1"),
        (["bench", "--recipe", "r.yaml", "--warmup", "-1"], "--warmup: must be >= 0"),
        (["bench", "--recipe", "r.yaml", "--encoder-threads", "0"], "--encoder-threads"),
        (["serve", "--recipe", "r.yaml", "--port", "70000"], "TCP port 0..65535"),
        (["serve", "--recipe", "r.yaml", "--prepare-ahead", "-1"], "--prepare-ahead"),
        (["serve", "--recipe", "r.yaml", "--max-upload-mb", "-1"], "--max-upload-mb"),
        (["serve", "--recipe", "r.yaml", "--log-level", "bogus"], "invalid choice: 'bogus'"),
        (["demo", "--seed", str(SEED_MAX + 1)], "seed range"),
        (["bench", "--recipe", "r.yaml", "--pairs", "two"], "not an integer"),
    ],
)
def test_impossible_numbers_are_argparse_errors(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_valid_edges_parse() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--recipe",
            "r.yaml",
            "--port",
            "0",
            "--prepare-ahead",
            "0",
            "--log-level",
            "DEBUG",
        ]
    )
    assert (args.port, args.prepare_ahead, args.log_level) == (0, 0, "debug")


# -- environment variables: unknown values are errors ------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [(kernel.ENV_VAR, "avx9000"), (kernel.HUGE_PAGES_ENV_VAR, "yes"), ("PRENOISE_DEBUG", "2")],
)
def test_unknown_env_values_are_one_line_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert main(["doctor"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error:") and f"{name}='{value}'" in out and "Traceback" not in out


def test_env_values_are_refused_by_the_library_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, "off")
    with pytest.raises(EnvVarError, match="accepted: 0, 1"):
        kernel.huge_page_status()
    monkeypatch.setenv(kernel.HUGE_PAGES_ENV_VAR, "0")
    monkeypatch.setenv(kernel.ENV_VAR, "cuda")
    kernel._reset_backend()
    try:
        with pytest.raises(EnvVarError, match=kernel.ENV_VAR):
            kernel.backend_status()
    finally:
        monkeypatch.delenv(kernel.ENV_VAR)
        kernel._reset_backend()
    for accepted in ("AUTO", " torch ", ""):
        monkeypatch.setenv(kernel.ENV_VAR, accepted)
        kernel.check_environment()


# -- output paths: refused before the run, not after it -----------------------------------------


def test_output_file_checks(tmp_path: Path) -> None:
    assert check_output_file(tmp_path / "new" / "deeper" / "x.json", "--json").name == "x.json"
    with pytest.raises(UsageError, match="is a directory"):
        check_output_file(tmp_path, "--json")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        check_output_file(tmp_path / "file" / "x.json", "--json")


def test_output_dir_checks(tmp_path: Path) -> None:
    assert check_output_dir(tmp_path / "a" / "b", "--trace-dir") == tmp_path / "a" / "b"
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="not a directory"):
        check_output_dir(tmp_path / "file", "--trace-dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_output_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UsageError, match="not writable"):
        check_output_file(locked / "x.json", "--json")


def test_unwritable_output_directory_as_seen_by_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "access", lambda _path, _mode: False)
    with pytest.raises(UsageError, match="not writable"):
        check_output_file(tmp_path / "x.json", "--json")
    with pytest.raises(UsageError, match="not writable"):
        check_output_dir(tmp_path / "traces", "--trace-dir")


def test_compare_json_directory_is_refused_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save(torch.ones(2), tmp_path / "a.pt")
    args = ["compare", str(tmp_path / "a.pt"), str(tmp_path / "a.pt"), "--json", str(tmp_path)]
    assert main(args) == 2
    assert "--json" in capsys.readouterr().out


# -- --debug / PRENOISE_DEBUG=1: the traceback instead of the one line ------------------------


def test_debug_flag_reraises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(tmp_path / "nope.pt")
    assert main(["compare", missing, missing]) == 2
    from prenoise.verify import UncomparableError

    for argv in (
        ["--debug", "compare", missing, missing],
        ["compare", missing, missing, "--debug"],
    ):
        with pytest.raises(UncomparableError):
            main(argv)
    monkeypatch.setenv("PRENOISE_DEBUG", "1")
    with pytest.raises(UncomparableError):
        main(["compare", missing, missing])
