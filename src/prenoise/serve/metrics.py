"""Prometheus metrics of one service instance, on its own `CollectorRegistry`.

Names (all prefixed `prenoise_`):
- `requests_total{outcome}`: finished or refused requests; outcome is done, failed, cancelled,
  rejected (invalid input, refused path, oversized upload, malformed body, over a limit or the
  memory budget) or error (the service failed answering: HTTP 500);
- `queue_depth`: jobs waiting for the executor (excluding the running one);
- `preparation_window_seconds`: `derive_metrics(...).prep_window_s` of each prepared request;
- `noise_critical_seconds`: `derive_metrics(...).noise_critical_s` on the preparing thread;
- `prepare_wait_seconds`: time the executor thread waited for a request's preparation (the whole
  preparation without prepare-ahead, only its unfinished rest with it);
- `end_to_end_seconds`: submission → terminal state, for done requests;
- `time_to_first_step_seconds`: submission → first denoising step done;
- `prediction_fallbacks_total`: prepared noise discarded because a shape prediction missed;
- `noise_kernel_backend{backend,active}`: 1 for the noise kernel backend in use.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["KernelBackend", "ServeMetrics", "kernel_backend"]

_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
OUTCOMES = ("done", "failed", "cancelled", "rejected", "error")


@dataclass(frozen=True)
class KernelBackend:
    """The noise kernel backend as reported by `prenoise.noise.kernel.backend_status` (or torch)."""

    name: str
    active: bool
    reason: str


def kernel_backend() -> KernelBackend:
    """`prenoise.noise.kernel.backend_status()` when that module exists, else torch (inactive)."""
    try:
        from prenoise.noise.kernel import backend_status
    except ImportError as exc:
        return KernelBackend("torch", False, f"prenoise.noise.kernel unavailable: {exc}")
    try:
        status = backend_status()
    except Exception as exc:  # a broken kernel must not stop the service
        return KernelBackend("torch", False, f"backend_status failed: {exc}")
    return KernelBackend(
        str(getattr(status, "name", "torch")),
        bool(getattr(status, "active", False)),
        str(getattr(status, "reason", "")),
    )


class ServeMetrics:
    """Every metric of one app instance; `render()` gives the Prometheus text format."""

    def __init__(self, backend: KernelBackend) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("prenoise_requests", "Requests by outcome", ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.requests.labels(outcome=outcome)
        self.queue_depth = Gauge(
            "prenoise_queue_depth", "Jobs waiting for the executor", registry=r
        )
        self.prep_window = Histogram(
            "prenoise_preparation_window_seconds",
            "Preparation window (request start to denoise-ready inputs)",
            buckets=_SECONDS,
            registry=r,
        )
        self.noise_critical = Histogram(
            "prenoise_noise_critical_seconds",
            "Noise time on the preparing thread's critical path",
            buckets=_SECONDS,
            registry=r,
        )
        self.prepare_wait = Histogram(
            "prenoise_prepare_wait_seconds",
            "Executor time spent waiting for a request's preparation",
            buckets=_SECONDS,
            registry=r,
        )
        self.end_to_end = Histogram(
            "prenoise_end_to_end_seconds",
            "Submission to done",
            buckets=_SECONDS,
            registry=r,
        )
        self.first_step = Histogram(
            "prenoise_time_to_first_step_seconds",
            "Submission to the first denoising step",
            buckets=_SECONDS,
            registry=r,
        )
        self.fallbacks = Counter(
            "prenoise_prediction_fallbacks",
            "Prediction fallbacks (prepared noise discarded)",
            registry=r,
        )
        self.backend = Gauge(
            "prenoise_noise_kernel_backend",
            "Noise kernel backend in use (value 1)",
            ["backend", "active"],
            registry=r,
        )
        self.backend.labels(backend=backend.name, active=str(backend.active).lower()).set(1)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)
