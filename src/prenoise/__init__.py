"""prenoise: prepare diffusion noise off the critical path without changing one bit.

Core (no pipeline, CLI or integration imports here):
- `prenoise.draws`: `Draw`, `Stream`, `NoisePlan`, `run_draw`/`run_stream`/`run_plan`,
  `fill_normal_` — exact, declarative CPU normal draws.
- `prenoise.executor`: `PreparationExecutor` — request-owned preparation workers.
- `prenoise.prediction`: predicted-key checks and mismatch policies.
- `prenoise.mixing`: `mix_condition`/`mix_conditions` — exact `tau·clean + (1 − tau)·noise`.
- `prenoise.verify`: `compare` — field-by-field bitwise comparison.
- `prenoise.rng_guard`: `global_rng_guard` — proof that the global RNG was not touched.
- `prenoise.budget`: `BudgetExceededError`, `available_memory_bytes` — memory budgets.
- `prenoise.cancel`: `Cancelled` — cancel points in draws and preparation.
- `prenoise.kernel`: `randn`, `fill_normal_`, `randn_keep_prefix` — a compiled CPU normal kernel
  bit-identical to torch (self-checked per process; `PRENOISE_NOISE_BACKEND=torch` forces torch).
- `prenoise.noise_streams`: named noise streams ("native", "x86", "libm"): one seed, the same
  noise on x86 and ARM hosts (`randn(..., stream=)`), self-checked against golden digests.
"""

from prenoise.budget import BudgetExceededError, available_memory_bytes
from prenoise.cancel import Cancelled
from prenoise.draws import (
    Draw,
    HalfDrawRule,
    NoisePlan,
    ScalarPathError,
    Stream,
    fill_normal_,
    run_draw,
    run_plan,
    run_stream,
)
from prenoise.executor import PreparationExecutor, PreparationStateError, Prepared
from prenoise.kernel import backend_status, randn
from prenoise.layouts import Patchify
from prenoise.mixing import mix_condition, mix_conditions
from prenoise.noise_streams import NoiseStreamError
from prenoise.prediction import MismatchPolicy, PredictionEvent, PredictionMismatchError
from prenoise.rng_guard import GlobalRNGChangedError, global_rng_guard
from prenoise.tracing import Tracer
from prenoise.verify import ComparisonReport, compare

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "Cancelled",
    "ComparisonReport",
    "Draw",
    "GlobalRNGChangedError",
    "HalfDrawRule",
    "MismatchPolicy",
    "NoisePlan",
    "NoiseStreamError",
    "Patchify",
    "PredictionEvent",
    "PredictionMismatchError",
    "PreparationExecutor",
    "PreparationStateError",
    "Prepared",
    "ScalarPathError",
    "Stream",
    "Tracer",
    "available_memory_bytes",
    "backend_status",
    "compare",
    "fill_normal_",
    "global_rng_guard",
    "mix_condition",
    "mix_conditions",
    "randn",
    "run_draw",
    "run_plan",
    "run_stream",
]
