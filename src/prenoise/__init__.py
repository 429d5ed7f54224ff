"""prenoise: prepare diffusion noise off the critical path without changing one bit.

The core, in layers (each imports only the ones below it; none imports the CLI, the Ref2VA
reference pipeline, the service or the integrations — `docs/architecture.md`):

- `prenoise.preparation`: what a request draws (`Draw`, `Stream`, `NoisePlan`, `run_*`), the
  request-owned `PreparationExecutor`, predicted-key checks and exact condition mixing;
- `prenoise.verify`: `compare` — field-by-field bitwise comparison — and `global_rng_guard`;
- `prenoise.noise`: how values are made — `randn`/`fill_normal_` bit-identical to torch, a
  compiled kernel self-checked per process (`PRENOISE_NOISE_BACKEND=torch` forces torch), named
  streams ("native", "x86", "libm": one seed, the same noise on x86 and ARM hosts), layouts;
- `prenoise.observe`: spans, metrics and timelines;
- `prenoise.guards`: memory budgets, cancel points, seeds, sizes, environment variables, extras.

Every public name below is importable from `prenoise` itself.
"""

# Names are imported on first use (PEP 562): importing `prenoise` (or any of its modules, the
# CLI included) does not import torch by itself, so `prenoise.cli` can choose how torch's
# OpenMP threads wait before torch is loaded (see prenoise/cli/__init__.py).
import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BudgetExceededError": "prenoise.guards.budget",
    "Cancelled": "prenoise.guards.cancel",
    "ComparisonReport": "prenoise.verify",
    "Draw": "prenoise.preparation.draws",
    "GlobalRNGChangedError": "prenoise.verify.rng_guard",
    "HalfDrawRule": "prenoise.preparation.draws",
    "MismatchPolicy": "prenoise.preparation.prediction",
    "NoisePlan": "prenoise.preparation.draws",
    "NoiseStreamError": "prenoise.noise.streams",
    "Patchify": "prenoise.noise.layouts",
    "PredictionEvent": "prenoise.preparation.prediction",
    "PredictionMismatchError": "prenoise.preparation.prediction",
    "PreparationExecutor": "prenoise.preparation.executor",
    "PreparationStateError": "prenoise.preparation.executor",
    "Prepared": "prenoise.preparation.executor",
    "ScalarPathError": "prenoise.preparation.draws",
    "Stream": "prenoise.preparation.draws",
    "Tracer": "prenoise.observe.tracing",
    "available_memory_bytes": "prenoise.guards.budget",
    "backend_status": "prenoise.noise.kernel",
    "compare": "prenoise.verify",
    "fill_normal_": "prenoise.preparation.draws",
    "global_rng_guard": "prenoise.verify.rng_guard",
    "mix_condition": "prenoise.preparation.mixing",
    "mix_conditions": "prenoise.preparation.mixing",
    "randn": "prenoise.noise.normal",
    "run_draw": "prenoise.preparation.draws",
    "run_plan": "prenoise.preparation.draws",
    "run_stream": "prenoise.preparation.draws",
}

if TYPE_CHECKING:
    from prenoise.guards.budget import BudgetExceededError, available_memory_bytes
    from prenoise.guards.cancel import Cancelled
    from prenoise.noise.kernel import backend_status
    from prenoise.noise.layouts import Patchify
    from prenoise.noise.normal import randn
    from prenoise.noise.streams import NoiseStreamError
    from prenoise.observe.tracing import Tracer
    from prenoise.preparation.draws import (
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
    from prenoise.preparation.executor import PreparationExecutor, PreparationStateError, Prepared
    from prenoise.preparation.mixing import mix_condition, mix_conditions
    from prenoise.preparation.prediction import (
        MismatchPolicy,
        PredictionEvent,
        PredictionMismatchError,
    )
    from prenoise.verify import ComparisonReport, compare
    from prenoise.verify.rng_guard import GlobalRNGChangedError, global_rng_guard


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'prenoise' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
