"""`prenoise rollout-check DIR [DIR2]`: rollout noise you can trust, from noise records.

The analysis is `prenoise.verify.rollout_noise` (engine-neutral); this is its wiring: the
options, the checks before any record is read, the table and the `--json` report.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from prenoise.guards.atomic import write_atomic
from prenoise.guards.usage import (
    UsageError,
    check_output_file,
    check_outputs_are_not_inputs,
    missing_directory,
)
from prenoise.observe.console_text import cell, line, title

__all__ = ["EXIT_STATUS_HELP", "add_arguments", "run"]

EXIT_STATUS_HELP = """\
what is checked (each record: one draw, with the sha256 of its bytes):
  collision                 two different requests drew identical noise (a seed reused or
                            ignored: every sample of a group must get its own noise)
  rank_disagreement         the ranks of one group drew different noise for the same request
                            and step (they must agree)
  repeated_within_request   one request drew identical noise at two steps or sites
  rerun                     with DIR2: a draw missing, extra, or not bit-for-bit reproduced
                            (matched by request, or with --match seed by seed)

record a run with PRENOISE_NOISE_RECORD=DIR (an existing directory; each process writes
DIR/noise-HOST-PID.jsonl). Records come from the diffusers integration (enable(pipe)) and the
SGLang plugin.

exit status:
  0   no finding
  1   findings (each named, with the draws; --json has them all, up to 1000 per kind)
  2   bad input, refused before any check: no record files, a line that is not a record, DIR2
      the same directory as DIR, a draw recorded twice (a rerun cannot be matched; by seed:
      two requests with one seed, or a draw without a seed), --match without DIR2, an
      unwritable --json
  70  internal error (please report it)"""

_SHOWN = 5
"""Findings of each kind printed; the JSON has the rest."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments."""
    parser.epilog = EXIT_STATUS_HELP
    parser.add_argument("dir", metavar="DIR", help="a directory of noise records (a batch)")
    parser.add_argument(
        "dir2",
        metavar="DIR2",
        nargs="?",
        help="the records of a rerun of the same batch: every draw must be reproduced bit for "
        "bit (default: no rerun compared)",
    )
    parser.add_argument(
        "--match",
        choices=("request", "seed"),
        help="with DIR2: match the rerun's draws by (request, site, step, rank), or by (seed, "
        "site, step, rank) where the engine's request ids change from run to run (random ids); "
        "default: request",
    )
    parser.add_argument("--json", help="write the report here (default: none written)")


def run(args: argparse.Namespace, console: Console) -> int:
    """Check the records; exit status as in `EXIT_STATUS_HELP` (bad input: `UsageError`)."""
    from prenoise.verify.rollout_noise import (
        RECORD_GLOB,
        RecordError,
        check_rollout,
        load_records,
    )

    first = Path(args.dir)
    second = Path(args.dir2) if args.dir2 is not None else None
    if second is not None and _same_directory(first, second):
        raise UsageError(
            f"DIR2 {second}: the same directory as DIR {first}; a batch compared with itself "
            "proves nothing about a rerun"
        )
    if args.match is not None and second is None:
        raise UsageError("--match: matches a rerun's draws; give the rerun's records as DIR2")
    missing = None
    if args.json:
        report_path = check_output_file(args.json, "--json")
        inputs = [
            (label, path)
            for label, directory in (("DIR", first), ("DIR2", second))
            if directory is not None and directory.is_dir()
            for path in directory.glob(RECORD_GLOB)
        ]
        check_outputs_are_not_inputs([("--json", report_path)], inputs)
        missing = missing_directory(report_path, "--json")
    try:
        records = load_records(first, "DIR")
        rerun = load_records(second, "DIR2") if second is not None else None
        report = check_rollout(records, rerun, args.match or "request")
    except RecordError as error:
        raise UsageError(str(error)) from None
    _print(console, report)
    if args.json:
        write_atomic(args.json, json.dumps(report.to_json(), indent=2), what="--json")
        if missing is not None and missing[1].is_dir():
            console.print(line(f"created the directory {missing[1]} (--json)"), soft_wrap=True)
        console.print(line("wrote the report to ", (str(args.json), "bold")), soft_wrap=True)
    style = "green" if report.clean else "red"
    console.print(line((report.summary(), style)), soft_wrap=True)
    return 0 if report.clean else 1


def _same_directory(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


def _print(console: Console, report: object) -> None:
    from prenoise.verify.rollout_noise import FINDING_KINDS, RolloutReport

    assert isinstance(report, RolloutReport)
    table = Table(title=title("rollout noise"))
    for column in ("check", "findings"):
        table.add_column(column)
    kinds = FINDING_KINDS if report.rerun_records is not None else FINDING_KINDS[:-1]
    for kind in kinds:
        n = report.counts.get(kind, 0)
        table.add_row(cell(kind), cell(("none", "green")) if n == 0 else cell((str(n), "red")))
    console.print(table)
    for kind in kinds:
        found = report.findings.get(kind, [])
        for finding in found[:_SHOWN]:
            console.print(line((f"{kind}:", "red"), f" {finding.message}"), soft_wrap=True)
        more = report.counts.get(kind, 0) - min(len(found), _SHOWN)
        if more > 0:
            console.print(line(f"{kind}: ... {more} more (--json has them)"), soft_wrap=True)
