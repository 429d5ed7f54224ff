"""Whether a batch's noise can be trusted, from its noise records (`prenoise rollout-check`).

The records are the JSON lines `prenoise.observe.noise_record` writes (`noise-*.jsonl`, one
per process) when `PRENOISE_NOISE_RECORD` names a directory: per draw, where it was made
(`engine`, `site`), for which request and step, on which rank of which group, and the sha256 of
its bytes. Engine-neutral: nothing here knows an engine.

A draw is named by (engine, site, request, step, rank) and, where one process records that
name more than once, its occurrence (0, 1, ... in the order written). What is checked:

- **collision**: one digest drawn for two different requests (same or different seeds): two
  samples of a batch that should differ got the same noise (a seed reused or ignored);
- **rank disagreement**: the ranks of one group (the same `group`, or all records without one)
  drew different noise for the same request, site, step and occurrence;
- **repeated within a request**: one request drew the same noise at two different steps or
  sites (step-to-step noise must differ);
- with a second directory, **rerun**: every draw of the first run is in the second with the
  same digest, shape and dtype, and nothing more (missing and extra draws are named); draws
  are matched by request, or by seed where request ids change from run to run.

Input that cannot be trusted is refused with one line (:class:`RecordError`) before any
analysis: no record files, an unreadable or non-JSON line, a field missing or of the wrong
type, two directories that are one.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prenoise.guards.path_checks import file_kind

__all__ = [
    "FINDING_KINDS",
    "MATCHES",
    "RECORD_GLOB",
    "Finding",
    "NoiseRecord",
    "RecordError",
    "RolloutReport",
    "check_rollout",
    "load_records",
]

RECORD_GLOB = "noise-*.jsonl"
"""The files of a record directory (`prenoise.observe.noise_record` names them so)."""

MAX_LINE_BYTES = 1 << 16
"""A record line is ~300 bytes; a longer one is not a record."""

FINDING_KINDS = ("collision", "rank_disagreement", "repeated_within_request", "rerun")
"""Every kind of finding, in report order."""

MAX_EXAMPLES = 1000
"""Findings of one kind kept in full in the report (the count is always exact)."""

_DIGEST = re.compile(r"^[0-9a-f]{16,128}$")


class RecordError(ValueError):
    """Records that cannot be checked: one line naming the file (and line) and what is wrong."""


@dataclass(frozen=True)
class NoiseRecord:
    """One recorded draw (see `prenoise.observe.noise_record`)."""

    engine: str
    site: str
    request: str
    seed: int | None
    step: int | None
    rank: int
    world_size: int
    group: str | None
    shape: tuple[int, ...]
    dtype: str
    digest: str
    host: str
    pid: int
    time: float
    source: str  # file:line, for messages
    occurrence: int = 0

    @property
    def draw(self) -> tuple[str, str, str, int | None, int, int]:
        """(engine, site, request, step, rank, occurrence): what a rerun must reproduce."""
        return (self.engine, self.site, self.request, self.step, self.rank, self.occurrence)

    def where(self) -> str:
        """A short name of the draw for messages."""
        step = "" if self.step is None else f" step {self.step}"
        again = f" (occurrence {self.occurrence})" if self.occurrence else ""
        return f"{self.engine}/{self.site} request {self.request!r}{step} rank {self.rank}{again}"


_TYPES: dict[str, tuple[type, ...]] = {
    "engine": (str,),
    "site": (str,),
    "request": (str,),
    "seed": (int, type(None)),
    "step": (int, type(None)),
    "rank": (int,),
    "world_size": (int,),
    "group": (str, type(None)),
    "shape": (list,),
    "dtype": (str,),
    "digest": (str,),
    "host": (str,),
    "pid": (int,),
    "time": (float, int),
}


def _record(data: Any, source: str) -> NoiseRecord:
    if not isinstance(data, dict):
        raise RecordError(f"{source}: not a noise record (a JSON object expected)")
    for name, types in _TYPES.items():
        if name not in data:
            raise RecordError(f"{source}: not a noise record (no {name!r} field)")
        value = data[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise RecordError(f"{source}: field {name!r} is {value!r}, not a valid value")
    shape = data["shape"]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise RecordError(f"{source}: field 'shape' is {shape!r}, not a list of sizes")
    if not _DIGEST.match(data["digest"]):
        raise RecordError(f"{source}: field 'digest' is {data['digest']!r}, not a hex digest")
    if data["rank"] < 0 or data["world_size"] < 1:
        raise RecordError(f"{source}: rank {data['rank']} of world size {data['world_size']}")
    return NoiseRecord(
        **{name: data[name] for name in _TYPES if name != "shape"},
        shape=tuple(shape),
        source=source,
    )


def _record_files(directory: Path, what: str) -> list[Path]:
    try:
        if not directory.is_dir():
            kind = "no such directory" if not directory.exists() else "not a directory"
            raise RecordError(f"{what} {directory}: {kind}")
        files = sorted(directory.glob(RECORD_GLOB))
    except OSError as error:
        raise RecordError(f"{what} {directory}: cannot be read ({error.strerror})") from None
    if not files:
        raise RecordError(
            f"{what} {directory}: no noise records ({RECORD_GLOB}); record a run with "
            f"PRENOISE_NOISE_RECORD={directory}"
        )
    for path in files:
        try:
            mode = path.stat().st_mode
        except OSError as error:
            raise RecordError(f"{path}: cannot be read ({error.strerror})") from None
        special = file_kind(mode)
        if special is not None or path.is_dir():
            raise RecordError(f"{path}: {special or 'a directory'}, not a record file")
    return files


def _read_file(path: Path) -> list[NoiseRecord]:
    records: list[NoiseRecord] = []
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                source = f"{path}:{number}"
                if len(raw) > MAX_LINE_BYTES:
                    raise RecordError(f"{source}: a line of {len(raw):,} bytes, not a record")
                if not raw.endswith(b"\n"):
                    raise RecordError(f"{source}: the last line is cut short (no newline)")
                try:
                    data = json.loads(raw)
                except (ValueError, RecursionError):
                    raise RecordError(f"{source}: not a JSON line") from None
                records.append(_record(data, source))
    except OSError as error:
        raise RecordError(f"{path}: cannot be read ({error.strerror})") from None
    return records


def load_records(directory: str | os.PathLike[str], what: str = "DIR") -> list[NoiseRecord]:
    """Every record under `directory` (its `noise-*.jsonl` files), each draw's occurrences
    numbered in the order its process wrote them. :class:`RecordError` (one line) for anything
    that is not a record directory of valid records."""
    records: list[NoiseRecord] = []
    for path in _record_files(Path(directory), what):
        seen: dict[tuple[object, ...], int] = defaultdict(int)
        for record in _read_file(path):
            key = record.draw[:5]
            n = seen[key]
            seen[key] += 1
            records.append(record if n == 0 else _with_occurrence(record, n))
    return records


def _with_occurrence(record: NoiseRecord, n: int) -> NoiseRecord:
    values = {name: getattr(record, name) for name in record.__dataclass_fields__}
    values["occurrence"] = n
    return NoiseRecord(**values)


@dataclass(frozen=True)
class Finding:
    """One thing wrong with the noise: its kind (`FINDING_KINDS`), a sentence, the draws."""

    kind: str
    message: str
    draws: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """As a JSON object."""
        return {"kind": self.kind, "message": self.message, "draws": list(self.draws)}


@dataclass
class RolloutReport:
    """What `check_rollout` found: counts of what was checked, and every finding by kind."""

    records: int
    requests: int
    ranks: int
    groups: int
    rerun_records: int | None = None
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """No finding of any kind."""
        return not any(self.counts.values())

    def add(self, finding: Finding) -> None:
        """Count `finding`; keep it in full while its kind has fewer than `MAX_EXAMPLES`."""
        self.counts[finding.kind] = self.counts.get(finding.kind, 0) + 1
        kept = self.findings.setdefault(finding.kind, [])
        if len(kept) < MAX_EXAMPLES:
            kept.append(finding)

    def summary(self) -> str:
        """One line: clean, or how many findings of each kind."""
        what = (
            f"{_n(self.records, 'draw')} of {_n(self.requests, 'request')} on "
            f"{_n(self.ranks, 'rank')}"
        )
        if self.rerun_records is not None:
            what += f", against a rerun of {_n(self.rerun_records, 'draw')}"
        if self.clean:
            return f"noise trusted: {what}, no finding"
        found = ", ".join(f"{n} {kind}" for kind, n in self.counts.items() if n)
        return f"NOISE NOT TRUSTED: {what}: {found}"

    def to_json(self) -> dict[str, object]:
        """As a JSON object (every finding kind present, an empty list when clean)."""
        return {
            "clean": self.clean,
            "summary": self.summary(),
            "records": self.records,
            "requests": self.requests,
            "ranks": self.ranks,
            "groups": self.groups,
            "rerun_records": self.rerun_records,
            "counts": {kind: self.counts.get(kind, 0) for kind in FINDING_KINDS},
            "findings": {
                kind: [f.to_json() for f in self.findings.get(kind, [])] for kind in FINDING_KINDS
            },
            "examples_kept_per_kind": MAX_EXAMPLES,
        }


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _names(records: Iterable[NoiseRecord], limit: int = 8) -> tuple[str, ...]:
    names = sorted({r.where() for r in records})
    return tuple(names[:limit] + ([f"... {len(names) - limit} more"] if len(names) > limit else []))


def _collisions(records: list[NoiseRecord], report: RolloutReport) -> None:
    by_digest: dict[str, list[NoiseRecord]] = defaultdict(list)
    for r in records:
        by_digest[r.digest].append(r)
    for digest, same in by_digest.items():
        requests = sorted({(r.engine, r.request) for r in same})
        if len(requests) > 1:
            seeds = sorted({str(r.seed) for r in same})
            why = "the same seed" if len(seeds) == 1 and seeds != ["None"] else "seeds"
            report.add(
                Finding(
                    "collision",
                    f"{len(requests)} requests drew identical noise {digest[:16]} "
                    f"({', '.join(repr(q) for _, q in requests[:6])}"
                    f"{', ...' if len(requests) > 6 else ''}; {why} {', '.join(seeds[:6])})",
                    _names(same),
                )
            )
        by_request: dict[tuple[str, str], set[tuple[str, int | None, int]]] = defaultdict(set)
        for r in same:
            by_request[(r.engine, r.request)].add((r.site, r.step, r.occurrence))
        for (_, request), places in sorted(by_request.items()):
            if len(places) > 1:
                where = ", ".join(
                    f"{site} step {step}" for site, step, _ in sorted(places, key=str)[:6]
                )
                report.add(
                    Finding(
                        "repeated_within_request",
                        f"request {request!r} drew identical noise {digest[:16]} at "
                        f"{len(places)} places ({where}); step-to-step noise must differ",
                        _names(r for r in same if r.request == request),
                    )
                )


def _disagreements(records: list[NoiseRecord], report: RolloutReport) -> None:
    groups: dict[tuple[object, ...], list[NoiseRecord]] = defaultdict(list)
    for r in records:
        groups[(r.group, r.engine, r.site, r.request, r.step, r.occurrence)].append(r)
    for (group, _, site, request, step, _), same in groups.items():
        ranks = {r.rank for r in same}
        digests = {r.digest for r in same}
        if len(ranks) > 1 and len(digests) > 1:
            by_digest: dict[str, list[int]] = defaultdict(list)
            for r in same:
                by_digest[r.digest].append(r.rank)
            split = "; ".join(
                f"ranks {sorted(set(ranks_))} drew {digest[:16]}"
                for digest, ranks_ in sorted(by_digest.items(), key=lambda kv: min(kv[1]))
            )
            label = "no group" if group is None else f"group {group!r}"
            report.add(
                Finding(
                    "rank_disagreement",
                    f"request {request!r} {site} step {step} ({label}): {split}",
                    _names(same),
                )
            )


def _match_key(r: NoiseRecord, match: str) -> tuple[object, ...]:
    if match == "seed":
        return (r.engine, r.site, r.seed, r.step, r.rank)
    return r.draw


def _match_name(r: NoiseRecord, match: str) -> str:
    if match == "seed":
        step = "" if r.step is None else f" step {r.step}"
        return f"{r.engine}/{r.site} seed {r.seed}{step} rank {r.rank}"
    return r.where()


def _rerun(
    first: list[NoiseRecord], second: list[NoiseRecord], report: RolloutReport, match: str
) -> None:
    def index(records: list[NoiseRecord], what: str) -> dict[tuple[object, ...], NoiseRecord]:
        by_draw: dict[tuple[object, ...], NoiseRecord] = {}
        for r in records:
            if match == "seed" and r.seed is None:
                raise RecordError(
                    f"{what}: {r.where()} has no seed ({r.source}); match a rerun by request"
                )
            key = _match_key(r, match)
            if key in by_draw:  # two processes (or, by seed, two requests) recorded it
                raise RecordError(
                    f"{what}: {_match_name(r, match)} is recorded twice "
                    f"({by_draw[key].source} and {r.source}); a rerun can only be matched "
                    "draw by draw"
                    + ("; two requests with one seed: match by request" * (match == "seed"))
                )
            by_draw[key] = r
        return by_draw

    a, b = index(first, "DIR"), index(second, "DIR2")
    for key, r in sorted(a.items(), key=lambda kv: str(kv[0])):
        other = b.get(key)
        name = _match_name(r, match)
        if other is None:
            report.add(Finding("rerun", f"{name}: missing in the rerun", (r.source,)))
        elif (other.digest, other.shape, other.dtype) != (r.digest, r.shape, r.dtype):
            report.add(
                Finding(
                    "rerun",
                    f"{name}: not reproduced ({list(r.shape)} {r.dtype} {r.digest[:16]} "
                    f"vs {list(other.shape)} {other.dtype} {other.digest[:16]})",
                    (r.source, other.source),
                )
            )
    for key, other in sorted(b.items(), key=lambda kv: str(kv[0])):
        if key not in a:
            name = _match_name(other, match)
            report.add(Finding("rerun", f"{name}: extra in the rerun", (other.source,)))


MATCHES = ("request", "seed")
"""How a rerun's draws are matched: by (request, site, step, rank), or, where request ids are
not stable across runs (random ids), by (seed, site, step, rank)."""


def check_rollout(
    records: list[NoiseRecord], rerun: list[NoiseRecord] | None = None, match: str = "request"
) -> RolloutReport:
    """Check a batch's records (and, given `rerun`, that the rerun reproduced them, its draws
    matched by `match`: `MATCHES`); see the module docstring for what each finding means."""
    if match not in MATCHES:
        raise ValueError(f"match={match!r}: expected one of {', '.join(MATCHES)}")
    report = RolloutReport(
        records=len(records),
        requests=len({(r.engine, r.request) for r in records}),
        ranks=len({(r.host, r.rank) for r in records}),
        groups=len({r.group for r in records}),
        rerun_records=None if rerun is None else len(rerun),
    )
    if rerun is not None:
        _rerun(
            records, rerun, report, match
        )  # first: a draw recorded twice is refused, not counted
    _collisions(records, report)
    _disagreements(records, report)
    return report
