"""The `prenoise` command line: `main` (the console script, `prenoise.cli:main`), each command's
wiring (`commands`), the parser (`parser`), argument checks (`args`), `doctor` and `demo`.

Before anything imports torch, `omp_policy.apply()` sets `OMP_WAIT_POLICY=PASSIVE` for
prenoise's own process when the environment does not set it (see `omp_policy`).
"""

from prenoise.cli import omp_policy

omp_policy.apply()

from prenoise.cli.commands import main  # noqa: E402  (after the policy: it imports torch)

__all__ = ["main"]
