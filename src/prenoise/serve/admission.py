"""Admission of `POST /v1/videos`: a bound on queued requests and on the upload bytes held.

A request takes a queue slot only once its body is complete and valid (`take_slot`, called right
before the job is queued, with no await between the two, so concurrent requests cannot all pass
one check): a client that sends its body slowly holds a connection, never a slot, so slow
clients cannot keep real ones out of the queue (`uploads.BodyIdleTimeout` bounds how long a body
may take). A request that arrives while the queue is already full is refused before its body is
read. Requests still being received are counted on their own (`in_flight`), and their body
bytes are charged as they arrive, against every byte held for uploads: those received so far
plus those saved for jobs not yet finished (`JobStore.upload_bytes_held`). Over either bound
the request is refused with `Refused` (HTTP 429 + `Retry-After`) at once, so a refused upload
stops being read and nothing of it reaches `.uploads`.

A declared `Content-Length` holds nothing (issue 42, HIGH 3): it is checked against the space
free when the request starts (a body that cannot fit is refused before a byte is read) but never
reserved, so connections that declare the largest body and then trickle a byte now and then hold
only the bytes they sent; every other request, JSON or upload, is admitted meanwhile. The price
is that uploads admitted together may exceed the space between them as their bytes arrive:
whichever crosses the bound first is refused then, mid-body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from starlette.types import Message, Receive

__all__ = ["Admission", "Refused", "Ticket"]


class Refused(Exception):
    """The service is full; `limit` names the bound (`max_queued`, `max_queued_upload_bytes`)."""

    def __init__(self, limit: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s


class Ticket:
    """One admitted request: its slot and the body bytes charged to it so far."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self.charged = 0

    def charge_to(self, total: int) -> None:
        """Charge the request `total` body bytes (never less than already charged)."""
        if total > self.charged:
            self._admission._charge(self, total)

    def counting(self, receive: Receive) -> Receive:
        """`receive`, charging each body chunk before the app sees it."""
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                self.charge_to(received)
            return message

        return counted


class Admission:
    """The two bounds, shared by every request of one service (thread-safe).

    `queued()` gives the jobs waiting in the queue and `held()` the upload bytes kept for jobs
    that have not finished; both are read under this object's lock, which is taken first.
    """

    def __init__(
        self,
        *,
        max_queued: int,
        max_held_bytes: int,
        queued: Callable[[], int],
        held: Callable[[], int],
        retry_after_s: int,
    ) -> None:
        self.max_queued = max_queued
        self.max_held_bytes = max_held_bytes
        self.retry_after_s = retry_after_s
        self._queued = queued
        self._held = held
        self._lock = threading.Lock()
        self._in_flight = 0
        self._in_flight_bytes = 0

    @property
    def in_flight(self) -> tuple[int, int]:
        """Requests being received or validated, and the body bytes charged to them."""
        with self._lock:
            return self._in_flight, self._in_flight_bytes

    @contextmanager
    def admit(self, declared_bytes: int | None = None) -> Iterator[Ticket]:
        """Start receiving a request (or raise `Refused` when the queue is full already, or when
        `declared_bytes` exceed the upload space free now); the bytes charged to it as they
        arrive (`Ticket.counting`) are given back at exit. The declaration is not charged: a
        client that declares a large body and sends it slowly holds only what it sent. The
        queue slot is taken later, by `take_slot`.

        A request that became a job hands its upload bytes over to the job before exiting
        (`Job.upload_bytes`), so they stay counted until its uploads are removed.
        """
        ticket = Ticket(self)
        with self._lock:
            self._refuse_if_full()
            if declared_bytes:  # checked, never reserved: only what arrives is charged
                self._refuse_if_no_room(ticket, declared_bytes)
            self._in_flight += 1
        try:
            yield ticket
        finally:
            with self._lock:
                self._in_flight -= 1
                self._in_flight_bytes -= ticket.charged

    def take_slot(self) -> None:
        """Refuse (`Refused`) a complete, valid request when the queue is full; call it right
        before queueing the job, with no await between the two."""
        with self._lock:
            self._refuse_if_full()

    def _refuse_if_full(self) -> None:
        waiting = self._queued()
        if waiting >= self.max_queued:
            raise Refused(
                "max_queued",
                f"queue full: {waiting} requests queued (--max-queued {self.max_queued}); "
                "retry later",
                self.retry_after_s,
            )

    def _refuse_if_no_room(self, ticket: Ticket, total: int) -> None:
        """Raise `Refused` unless `ticket` can hold `total` bytes in all (call under the lock).

        Counted: the bytes that arrived for requests being received and the uploads of jobs
        not finished; never a declaration."""
        held = self._held() + self._in_flight_bytes
        if held - ticket.charged + total > self.max_held_bytes:
            raise Refused(
                "max_queued_upload_bytes",
                f"upload space full: {held} bytes held for queued uploads, this request "
                f"needs {total} (--max-queued-upload-mb "
                f"{self.max_held_bytes / 2**20:g}); retry later",
                self.retry_after_s,
            )

    def _charge(self, ticket: Ticket, total: int) -> None:
        with self._lock:
            self._refuse_if_no_room(ticket, total)
            self._in_flight_bytes += total - ticket.charged
            ticket.charged = total
