"""A store-based status protocol: ranks report `ok` or their error text per stage, and wait.

Every key lives under one request prefix. A rank reports a stage once (`post_ok` or
`post_error`). `wait` returns when every listed rank reported ok; it raises `RankFailedError` with
the failing rank's original error text as soon as another rank of the request reported an error
(in any stage), and `RankTimeoutError` naming the missing ranks when the deadline passes. A lost
store (the process hosting it died) raises `DistributedPreparationError`. Never a silent hang."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch.distributed as dist

__all__ = [
    "DistributedPreparationError",
    "RankFailedError",
    "RankTimeoutError",
    "StatusBoard",
    "describe_error",
]

T = TypeVar("T")


class DistributedPreparationError(RuntimeError):
    """A distributed request failed because of another rank (or the job's store)."""


class RankFailedError(DistributedPreparationError):
    """Another rank reported an error; the message carries its original text."""


class RankTimeoutError(DistributedPreparationError):
    """Some ranks did not report within the timeout (they died or hung)."""


def describe_error(error: BaseException) -> str:
    """`Type: message` of an exception, as posted to the other ranks."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


_POLL_FIRST_S = 0.001
_POLL_MAX_S = 0.02


class StatusBoard:
    """Status keys of one request under `prefix` in `store` (see the module docstring)."""

    def __init__(self, store: dist.Store, prefix: str, world_size: int, rank: int) -> None:
        self.store = store
        self.prefix = prefix.rstrip("/")
        self.world_size = world_size
        self.rank = rank
        self._reported: list[BaseException] = []

    def _key(self, *parts: object) -> str:
        return "/".join([self.prefix, *(str(p) for p in parts)])

    def _op(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except (RuntimeError, ConnectionError, TimeoutError) as exc:
            raise DistributedPreparationError(
                f"rank {self.rank}: lost the job's store while {what} ({exc}); "
                "the process hosting it has probably died"
            ) from exc

    def publish(self, name: str, value: str) -> None:
        """Publish `value` under `name` (data such as a segment path)."""
        self._op("publishing", self.store.set, self._key("data", name), value)

    def fetch(self, name: str, timeout_s: float) -> str:
        """Wait for `name` (see `publish`); fails like `wait` on another rank's error or timeout."""
        key = self._key("data", name)
        ready = lambda: self._op("waiting", self.store.check, [key])  # noqa: E731
        self.wait_until(ready, f"publish {name}", timeout_s)
        return self._op("reading", self.store.get, key).decode()

    def post_ok(self, stage: str) -> None:
        """Report that this rank finished `stage`."""
        self._op("reporting", self.store.set, self._key(stage, "ok", self.rank), "1")

    def post_error(self, stage: str, error: BaseException | str) -> None:
        """Report this rank's failure in `stage` with the original error text (never raises).

        A `RankFailedError` is not reported (it relays another rank's report), and an exception
        object already reported (e.g. re-raised from a draw thread) keeps its first stage.
        """
        if isinstance(error, RankFailedError) or any(error is e for e in self._reported):
            return
        if isinstance(error, BaseException):
            self._reported.append(error)
        text = error if isinstance(error, str) else describe_error(error)
        try:
            self.store.set(self._key("error", self.rank), f"{stage}: {text}")
            self.store.add(self._key("errors"), 1)
        except Exception:  # the store is gone: the others lose it too, or time out
            pass

    def first_error(self) -> str | None:
        """`rank R failed in STAGE: Type: text` of the lowest other failed rank, if any."""
        if self._op("polling", self.store.add, self._key("errors"), 0) == 0:
            return None
        for r in range(self.world_size):
            key = self._key("error", r)
            if r != self.rank and self._op("polling", self.store.check, [key]):
                return f"rank {r} failed in {self._op('reading', self.store.get, key).decode()}"
        return None

    def wait_until(
        self,
        ready: Callable[[], bool],
        stage: str,
        timeout_s: float,
        missing: Callable[[], list[int]] | None = None,
        who: str = "another rank",
    ) -> None:
        """Poll `ready` until true; raise on another rank's error or after `timeout_s`.

        The timeout error names `missing()` ranks when given, else `who`.
        """
        deadline = time.monotonic() + timeout_s
        pause = _POLL_FIRST_S
        while True:
            if ready():
                return
            error = self.first_error()
            if error is not None:
                raise RankFailedError(error)
            if time.monotonic() >= deadline:
                if missing is not None:
                    who = f"rank(s) {missing()}"
                raise RankTimeoutError(
                    f"rank {self.rank}: {who} did not finish {stage!r} within {timeout_s:g} s "
                    "(died or hung); failing the request"
                )
            time.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)

    def wait(self, stage: str, ranks: Sequence[int], timeout_s: float) -> None:
        """Wait until every rank in `ranks` posted `stage` ok (see the module docstring)."""
        keys = [self._key(stage, "ok", r) for r in ranks]

        def missing() -> list[int]:
            return [r for r, k in zip(ranks, keys, strict=True) if not self.store.check([k])]

        ready = lambda: self._op("polling", self.store.check, keys)  # noqa: E731
        self.wait_until(ready, stage, timeout_s, missing)
