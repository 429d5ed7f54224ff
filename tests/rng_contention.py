"""The request thread drawing the global RNG while a worker draws noise, in a forced order.

`Handshake` makes the interleaving certain instead of likely. A wrapped draw function, on a
worker thread whose name starts with `worker_prefix`, announces its first draw and waits; the
request thread (`request_side`) waits for that, draws the global RNG while the worker is parked
inside its draw, lets the worker's draw run and waits for it to finish, then runs its own work
(e.g. dropout) and draws the global RNG again while the worker makes its remaining draws.

So in every run a worker's draw comes between two request-thread uses of the global RNG, which
in the serial arm come before any noise: a worker that drew from the global RNG (or from any
generator the request thread draws) would change what the request thread's work sees, and the
outputs would differ. Until `arm()` is called both sides pass straight through (the serial arm),
making the same global draws.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")

TIMEOUT_S = 30.0
GLOBAL_DRAWS = 6
GLOBAL_DRAW_NUMEL = 1 << 15


def draw_global_rng() -> None:
    """Discarded draws from the global CPU RNG, as `torch.randn` without a generator makes."""
    for _ in range(GLOBAL_DRAWS):
        torch.randn(GLOBAL_DRAW_NUMEL)


def dropout_on_global_rng(x: torch.Tensor) -> torch.Tensor:
    """Dropout in train mode: the result depends on the global RNG (as an encoder's would)."""
    return torch.nn.functional.dropout(x, p=0.25, training=True)


def _wait(event: threading.Event, what: str) -> None:
    if not event.wait(TIMEOUT_S):
        raise TimeoutError(what)


class Handshake:
    """Forces a worker's first draw between the request thread's global-RNG draws."""

    def __init__(self, worker_prefix: str) -> None:
        self.worker_prefix = worker_prefix
        self.worker_drawing = threading.Event()
        self.request_drew = threading.Event()
        self.worker_drew = threading.Event()
        self._armed = False

    def arm(self) -> None:
        """From now on, the next matching worker draw and the next `request_side` meet."""
        for event in (self.worker_drawing, self.request_drew, self.worker_drew):
            event.clear()
        self._armed = True

    @property
    def met(self) -> bool:
        """Both sides went through the meeting since `arm()`."""
        return self.worker_drawing.is_set() and self.worker_drew.is_set()

    def wrap(
        self, draw: Callable[..., T], matches: Callable[..., bool] | None = None
    ) -> Callable[..., T]:
        """`draw`, whose first call on a matching worker takes part in the meeting
        (`matches(*args, **kwargs)`, when given, must also hold for the call)."""

        def wrapped(*args: Any, **kwargs: Any) -> T:
            on_worker = threading.current_thread().name.startswith(self.worker_prefix)
            chosen = matches is None or matches(*args, **kwargs)
            if not (self._armed and on_worker and chosen and not self.worker_drawing.is_set()):
                return draw(*args, **kwargs)
            self.worker_drawing.set()
            _wait(self.request_drew, "the request thread never drew from the global RNG")
            try:
                return draw(*args, **kwargs)
            finally:
                self.worker_drew.set()

        return wrapped

    def request_side(self, work: Callable[[], T]) -> T:
        """Draw the global RNG, run `work`, draw it again: the same draws armed or not. Armed,
        the first draws run while the worker is parked inside its draw, `work` after that draw,
        and the last draws while the worker draws on."""
        meet = self._armed and not self.request_drew.is_set()
        if meet:
            _wait(self.worker_drawing, "no worker draw started while the request thread ran")
        draw_global_rng()
        if meet:
            self.request_drew.set()
            _wait(self.worker_drew, "the worker's draw did not finish")
        result = work()
        draw_global_rng()
        return result


def encoder_on_global_rng(monkeypatch: Any, models: Any, handshake: Handshake) -> None:
    """Make a Ref2VA text encoder draw the global RNG (dropout on its embeddings, met with the
    worker through `handshake.request_side`); `monkeypatch` undoes it."""
    encoder = models.text_encoder
    real = encoder.encode_with_mask

    def encode_with_mask(prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        text, mask = real(prompts)
        with torch.inference_mode():
            return handshake.request_side(lambda: dropout_on_global_rng(text)), mask

    monkeypatch.setattr(encoder, "encode_with_mask", encode_with_mask)
