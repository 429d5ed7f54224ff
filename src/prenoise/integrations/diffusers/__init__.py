"""Overlapped, bit-identical noise for diffusers pipelines (`pip install prenoise[diffusers]`).

- `overlapped_call(pipe, **kwargs)` returns exactly what `pipe(**kwargs)` returns (bitwise) and
  leaves the caller's generator(s) exactly where the plain call leaves them, while the noise is
  drawn on a worker thread during prompt (and image) encoding.
- `enable(pipe)` / `disable(pipe)` route plain `pipe(...)` calls of one instance through it.
- `overlapped_call_with_report` also returns a `CallReport` (fell through? draws served? wait,
  prenoise's own set-up and teardown time).

A diffusers `ModularPipeline` (e.g. MiniMax-H3's `MiniMaxH3Blocks().init_pipeline(...)`) takes
the same `enable` / `overlapped_call`, with the same contract (`modular/`); `supported_modular()`
lists the modular classes with a plan.

Unpredictable calls run the plain call; the reason is a warning (once per pipeline class and
reason) on the logger "prenoise.integrations.diffusers", and active overlap is said once per class
at INFO. Supported: any diffusers whose code each plan relies on is the reviewed code, by source
digest (`digests.py`; reviewed on 0.40.0, 0.41.0, 0.42.0 and 0.42.1, `TESTED_DIFFUSERS_VERSIONS`),
whatever its version string says (diffusers' main branch included); a class with a changed
function runs plain, and the warning names the function.
"""

from prenoise.integrations.diffusers.call import (
    CallReport,
    overlapped_call,
    overlapped_call_with_report,
    plan_call,
)
from prenoise.integrations.diffusers.enabling import disable, enable, is_enabled, original_class
from prenoise.integrations.diffusers.modular.registry import supported as supported_modular
from prenoise.integrations.diffusers.plan import PlannedDraw, Unpredictable
from prenoise.integrations.diffusers.registry import (
    TESTED_DIFFUSERS_VERSIONS,
    register_plan,
    supported,
)

__all__ = [
    "TESTED_DIFFUSERS_VERSIONS",
    "CallReport",
    "PlannedDraw",
    "Unpredictable",
    "disable",
    "enable",
    "is_enabled",
    "original_class",
    "overlapped_call",
    "overlapped_call_with_report",
    "plan_call",
    "register_plan",
    "supported",
    "supported_modular",
]
