"""The progress lines of a `torchrun … -m prenoise COMMAND` job's stderr (pipes: not a terminal).

torchrun's workers inherit its stderr, so every rank's lines would land there: a stage printed by
both ranks of a 2-rank job shows up twice. torchrun's own warnings (`W1203 … run.py …`) are not
prenoise's and are skipped.
"""

from __future__ import annotations

import re

from prenoise.observe.progress import PLAIN_PREFIX


def torchrun_stages(stderr: str, command: str) -> list[str]:
    """The stage of every `[prenoise COMMAND 1.2s] stage` line, in order; any other line that
    starts with `[prenoise ` (another command's, a malformed one) fails the test."""
    pattern = re.compile(rf"^\[prenoise {command} \d+\.\ds\] (.+)$")
    stages = []
    for line in stderr.splitlines():
        if line.startswith(PLAIN_PREFIX):
            match = pattern.match(line)
            assert match, line
            stages.append(match.group(1))
    return stages
