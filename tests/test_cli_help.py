"""The smaller first-hour items of issue 34 (item 10), each at its root.

Help text on every option with its default; `prenoise --version`; no abbreviated options;
byte sizes as the docs write them; `stream-digest --dtype float16` as docs/streams.md promises;
`doctor` not folding words at 80 columns; the docs' class counts equal `supported()`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console

from prenoise.cli.commands import build_parser, main
from prenoise.guards.sizes import byte_count

REPO = Path(__file__).resolve().parents[1]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    return [
        (name, sub, action)
        for name, sub in _subcommands().items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction)
    ]


def test_every_option_of_every_subcommand_has_help() -> None:
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, _sub, a in _options()
        if not (a.help and a.help.strip()) or a.help == argparse.SUPPRESS
    ]
    assert missing == []


def test_every_option_shows_its_default() -> None:
    """A value default is printed; an option without one says in words what happens without
    it; required options and flags need neither."""
    unsaid = []
    for name, sub, action in _options():
        if not action.option_strings or action.required or action.nargs == 0:
            continue
        text = sub._get_formatter()._expand_help(action)
        flag = "/".join(action.option_strings)
        if action.default not in (None, [], argparse.SUPPRESS):
            if f"default: {action.default}" not in text and str(action.default) not in text:
                unsaid.append(f"{name} {flag}: {text!r}")
        elif "default" not in text:
            unsaid.append(f"{name} {flag}: {text!r}")
    assert unsaid == []


def test_the_help_page_prints_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--pairs PAIRS timed pairs (the order alternates) (default: 5)" in text
    assert "--seed SEED noise seed; output i uses seed + i (default: the recipe's seed)" in text
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--port PORT TCP port; 0: any free port (default: 8000)" in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"prenoise {importlib.metadata.version('prenoise')}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "--recipe", "r.yaml", "--dur", "2"],  # was taken as --duration
        ["bench", "--recipe", "r.yaml", "--pair", "3"],  # was taken as --pairs
        ["--deb", "doctor"],  # was taken as --debug
        ["stream-digest", "--stream", "x86", "--seed", "0", "--count", "16", "--dt", "float32"],
    ],
)
def test_abbreviated_options_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


# -- byte sizes as the docs write them ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "count"),
    [("256MiB", 256 << 20), ("8GiB", 8 << 30), ("500MB", 500_000_000), ("1048576", 1 << 20),
     (" 1KiB ", 1024), (268435456, 268435456), (0, 0)],
)  # fmt: skip
def test_byte_count_takes_integers_and_size_texts(value: object, count: int) -> None:
    assert byte_count(value, "bytes_ahead") == count


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("lots", ValueError, "bytes_ahead must be a byte count such as 268435456 or '256MiB', "
         "got 'lots'"),
        (-1, ValueError, "bytes_ahead must be >= 0 bytes, got -1"),
        (1.5, TypeError, "bytes_ahead must be a byte count such as 268435456 or '256MiB', got "
         "1.5 (float)"),
        (True, TypeError, "bytes_ahead must be a byte count such as 268435456 or '256MiB', got "
         "True (bool)"),
    ],
)  # fmt: skip
def test_byte_count_refuses_by_name(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as refusal:
        byte_count(value, "bytes_ahead")
    assert str(refusal.value) == message


def test_the_cli_memory_budget_uses_the_same_rule() -> None:
    args = build_parser().parse_args(["compare", "a", "b", "--memory-budget", "256MiB"])
    assert args.memory_budget == 256 << 20


def test_enable_takes_a_size_text_as_docs_diffusers_md_writes_it() -> None:
    pytest.importorskip("diffusers")
    from diffusers import DiffusionPipeline

    from prenoise.integrations.diffusers import disable, enable
    from prenoise.integrations.diffusers.step_noise import lookahead_limits_of

    class Pipe(DiffusionPipeline):
        pass

    pipe = Pipe()
    pipe.register_to_config()  # a pipeline's config, as from_pretrained leaves it
    try:
        enable(pipe, bytes_ahead="256MiB", steps_ahead=2)
        assert lookahead_limits_of(pipe).bytes == 256 << 20
        enable(pipe, bytes_ahead="1KiB")
        assert lookahead_limits_of(pipe).bytes == 1024
        with pytest.raises(ValueError, match="bytes_ahead must be a byte count"):
            enable(pipe, bytes_ahead="lots")
    finally:
        disable(pipe)


# -- stream-digest --dtype float16, as docs/streams.md covers it --------------------------------


def test_stream_digest_draws_float16(capsys: pytest.CaptureFixture[str]) -> None:
    assert "float16" in (REPO / "docs" / "streams.md").read_text()
    capsys.readouterr()
    argv = ["stream-digest", "--stream", "native", "--seed", "3", "--count", "1000,17"]
    assert main([*argv, "--dtype", "float16"]) == 0
    digest = capsys.readouterr().out.strip()
    g = torch.Generator().manual_seed(3)
    raw = b"".join(
        torch.randn(n, generator=g, dtype=torch.float16).numpy().tobytes() for n in (1000, 17)
    )
    assert digest == hashlib.sha256(raw).hexdigest()


# -- doctor at 80 columns: no word folded across lines ------------------------------------------


def test_doctor_keeps_words_whole_at_80_columns() -> None:
    from prenoise.cli.doctor import doctor_table

    table = doctor_table()
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    rendered = console.export_text()
    cells = [str(cell) for column in table.columns for cell in column._cells]
    tokens = {token for cell in cells for token in cell.split() if len(token) <= 40}
    folded = sorted(token for token in tokens if token not in rendered)
    assert folded == [], rendered
    assert "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=0" in rendered  # was split as …OUTP / UT=0


# -- the docs' counts equal what the code supports -----------------------------------------------


def test_the_docs_count_the_classes_supported_returns() -> None:
    from prenoise.integrations.diffusers import supported

    count = len(supported())
    readme = (REPO / "README.md").read_text()
    page = (REPO / "docs" / "diffusers.md").read_text()
    said = re.search(r"One call\. (\d+) pipeline classes", readme)
    assert said is not None and int(said.group(1)) == count
    said = re.search(r"\n(\d+) classes \(the (\d+) video and audio ones", page)
    assert said is not None and int(said.group(1)) == count
    rows = re.findall(r"^\| \S+ \| `(\w+)` \| planned \|", page, re.M)
    assert int(said.group(2)) == len(rows)
    in_table = set(rows)
    assert {name.rsplit(".", 1)[1] for name in supported()} - in_table == {"FluxPipeline"}
