"""The HTTP API (FastAPI). Routes only translate HTTP to `Service` calls and back.

- `POST /v1/videos`: JSON body (`schema.VideoRequest`) or multipart (`request`: the same JSON as
  a text field; `reference`: uploaded files, repeatable) → 202 `{"id", "state", "status_url"}`;
  invalid input (non-finite numbers, JSON nested too deeply, sizes above the limits or the
  memory budget, references above the media caps) → 422 `{"error", "field"}` with `field`
  naming the offending field; oversized body → 413; malformed multipart → 400; unsupported
  content type → 415; uploads the service's disk refuses → 507 (full) or 503 (read-only, I/O
  error) naming the problem, with `Retry-After`; a body that stalls for `body_idle_timeout_s`
  or is not complete within `body_timeout_s` → 408; the queue (counted once a body is
  complete) or the upload space full (`admission`) → 429 with `Retry-After` and `limit`,
  `retry_after_s` in the body. Content types match case-insensitively. Request headers not
  complete within `headers_timeout_s`: 408 and the connection closed
  (`connections.http_protocol`, uvicorn's protocol).
- `GET /v1/videos/{id}`: `Job.view()` (state, progress: `i/N` steps while denoising, else the
  stage, timings, error).
- `GET /v1/videos/{id}/content?output=k`: the finished MP4 (409 while not done, 410 when the
  job was deleted or the file is no longer on disk; see `content` for racing a DELETE).
- `DELETE /v1/videos/{id}`: queued → cancelled at once (200); running → stops at its next step
  boundary (202); finished → record and files removed (200, state `deleted`).
- `GET /health`, `GET /metrics` (Prometheus text format).

Every error response, whatever its status (400, 404, 408, 409, 410, 413, 415, 422, 429, 500,
503, 507), has
the body
`{"error": message, "field": name or null}`; refused requests count as `rejected` and internal
errors as `error` in `prenoise_requests_total`.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from prenoise.guards.documents import DocumentError, load_json
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.serve import content
from prenoise.serve.admission import Refused
from prenoise.serve.jobs import TERMINAL, JobState
from prenoise.serve.openapi import CREATE_VIDEO_OPENAPI, components
from prenoise.serve.schema import RequestRejected, build_plan, parse_request
from prenoise.serve.service import ServeSettings, Service
from prenoise.serve.uploads import (
    BodyIdle,
    BodyIdleTimeout,
    BodySizeLimit,
    BodyTooLarge,
    UploadStorageError,
    read_form,
    save_uploads,
)

__all__ = ["InternalErrors", "create_app"]

logger = logging.getLogger("prenoise.serve")


def _error(
    status: int,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    return JSONResponse(
        {"error": message, "field": field, **extra}, status_code=status, headers=headers
    )


class InternalErrors:
    """ASGI middleware: an unhandled exception is logged, counted (`on_error`) and answered with
    the documented 500 body; the connection stays usable (Starlette's default drops it). A
    client that closed its connection while its body was read (`ClientDisconnect`) is logged at
    INFO, neither counted as an error nor answered (issue 42: it was an "internal error" with a
    traceback); whatever it had sent is released as for any refused request."""

    def __init__(self, app: ASGIApp, on_error: Callable[[], None]) -> None:
        self.app = app
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except ClientDisconnect:  # the client's doing, and no one is left to answer
            logger.info(
                "client closed the connection during %s %s; nothing answered",
                scope["method"],
                scope["path"],
            )
        except Exception:
            logger.exception("internal error answering %s %s", scope["method"], scope["path"])
            self.on_error()
            if started:  # too late for a body of our own
                raise
            await _error(500, "internal error (see the service log)")(scope, receive, send)


def create_app(settings: ServeSettings, pipeline: Ref2VAPipeline | None = None) -> FastAPI:
    """A FastAPI app serving `settings`; the executor starts and stops with the app lifespan."""
    service = Service(settings, pipeline)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Bound the HTTP layer's worker threads (AnyIO's default is 40, grown on demand).
        to_thread.current_default_thread_limiter().total_tokens = settings.io_threads
        service.start()
        try:
            yield
        finally:
            await run_in_threadpool(service.stop)

    app = FastAPI(title="prenoise serve", lifespan=lifespan)
    app.state.service = service
    app.add_middleware(
        BodySizeLimit, max_bytes=settings.limits.max_upload_bytes, on_reject=service.reject
    )
    app.add_middleware(
        BodyIdleTimeout, timeout_s=settings.body_idle_timeout_s, total_s=settings.body_timeout_s
    )
    app.add_middleware(InternalErrors, on_error=service.internal_error)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Starlette's own refusals (e.g. a malformed multipart body is 400): documented body.
        if request.method == "POST" and 400 <= exc.status_code < 500:
            service.reject()
        return _error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid_parameter(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        field = str(err["loc"][-1]) if err.get("loc") else None
        if request.method == "POST":
            service.reject()
        return _error(422, f"{field}: {err['msg']}" if field else str(err["msg"]), field)

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_request: Request, exc: BodyTooLarge) -> JSONResponse:
        service.reject()
        return _error(413, f"body: {exc}", "body")

    @app.exception_handler(BodyIdle)
    async def _idle(_request: Request, exc: BodyIdle) -> JSONResponse:
        service.reject()
        # The rest of the body may never come: close the connection rather than wait for it.
        return _error(408, f"body: {exc}", "body", headers={"Connection": "close"})

    @app.exception_handler(Refused)
    async def _full(_request: Request, exc: Refused) -> JSONResponse:
        service.reject()
        retry = exc.retry_after_s
        return _error(
            429,
            str(exc),
            headers={"Retry-After": str(retry)},
            limit=exc.limit,
            retry_after_s=retry,
        )

    @app.exception_handler(UploadStorageError)
    async def _no_storage(_request: Request, exc: UploadStorageError) -> JSONResponse:
        service.reject()  # the disk's state, not a bug: named, and counted as a refusal
        retry = {"Retry-After": str(settings.retry_after_s)}
        return _error(exc.status, str(exc), "reference", headers=retry)

    @app.exception_handler(RequestRejected)
    async def _rejected(_request: Request, exc: RequestRejected) -> JSONResponse:
        service.reject()
        return _error(exc.status, str(exc), exc.field)

    @app.post("/v1/videos", status_code=202, openapi_extra=CREATE_VIDEO_OPENAPI)
    async def create_video(request: Request) -> JSONResponse:
        job_id = service.new_job_id()
        folder = service.upload_dir(job_id)
        with service.admission.admit(_declared_length(request)) as ticket:
            # The body is read through the ticket: its bytes are charged as they arrive.
            request = Request(request.scope, ticket.counting(request.receive))
            try:
                data, uploads = await _read_body(request, service, folder)
                req = parse_request(data)
                plan = await run_in_threadpool(
                    build_plan,
                    settings.recipe,
                    req,
                    media_root=settings.media_root,
                    uploads=uploads,
                    limits=settings.limits,
                )
                held = ticket.charged if uploads else 0
                service.admission.take_slot()  # only now: a slow body never holds a slot
                job = service.submit(job_id, plan, folder if uploads else None, held)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
        url = f"/v1/videos/{job.id}"
        return JSONResponse(
            {"id": job.id, "state": job.state.value, "status_url": url},
            status_code=202,
            headers={"Location": url},
        )

    @app.get("/v1/videos/{job_id}")
    async def get_video(job_id: str) -> JSONResponse:
        job = service.store.get(job_id)
        if job is None:
            return _error(404, f"no job {job_id!r}")
        with service.store.lock:
            return JSONResponse(job.view())

    @app.get("/v1/videos/{job_id}/content", response_model=None)
    async def get_content(job_id: str, output: int = 0) -> Response:
        job = service.store.get(job_id)
        if job is None:
            return _error(404, f"no job {job_id!r}")
        with service.store.lock:  # `deleted` is set under this lock before any file goes
            state, paths, deleted = job.state, list(job.paths), job.deleted
        if deleted:
            return _error(410, f"job {job_id} was deleted")
        if state is not JobState.DONE:
            return _error(409, f"job {job_id} is {state.value}, not done", state=state.value)
        if not 0 <= output < len(paths):
            return _error(404, f"output: job {job_id} has outputs 0..{len(paths) - 1}", "output")
        try:
            file = await run_in_threadpool(content.open_output, paths[output])
        except FileNotFoundError:  # deleted since the snapshot, or removed from disk
            return _error(
                410, f"output: output {output} of job {job_id} is gone from disk", "output"
            )
        size = os.fstat(file.fileno()).st_size
        return content.OpenFileResponse(
            file, size=size, filename=paths[output].name, media_type="video/mp4"
        )

    @app.delete("/v1/videos/{job_id}")
    async def delete_video(job_id: str) -> JSONResponse:
        job = service.store.get(job_id)
        if job is None:
            return _error(404, f"no job {job_id!r}")
        if job.state in TERMINAL:
            service.store.remove(job_id)
            return JSONResponse({"id": job_id, "state": "deleted"})
        service.scheduler.cancel(job)
        with service.store.lock:
            state = job.state
        status = 200 if state in TERMINAL else 202
        return JSONResponse({"id": job_id, "state": state.value}, status_code=status)

    @app.get("/health")
    async def health() -> JSONResponse:
        alive = service.scheduler.alive
        current = service.scheduler.current
        body = {
            "status": "ok" if alive else "executor stopped",
            "queue_depth": service.scheduler.queue_depth,
            "running": current.id if current is not None else None,
            "prepare_ahead": settings.prepare_ahead,
            "noise_backend": {
                "name": service.backend.name,
                "active": service.backend.active,
                "reason": service.backend.reason,
            },
        }
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def openapi() -> dict[str, Any]:
        """FastAPI's schema plus the request-body models it cannot see (`serve.openapi`)."""
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(components())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _read_body(request: Request, service: Service, folder: Path) -> tuple[Any, list[Path]]:
    """The JSON request data and the saved uploads (multipart) of a POST."""
    content_type = request.headers.get("content-type", "").strip().lower()
    if content_type.startswith("multipart/form-data"):
        limits = service.settings.limits
        async with read_form(
            request, max_files=limits.max_references, max_fields=8, max_part_size=1 << 20
        ) as form:  # a disk refusing the parser's spool files (TMPDIR) is 507 / 503
            unknown = [key for key in form if key not in ("request", "reference")]
            if unknown:
                raise RequestRejected(unknown[0], "unknown form field")
            raw = form.get("request")
            if isinstance(raw, UploadFile):
                raw = (await raw.read()).decode("utf-8", "replace")
            data = _decode_json(raw or "{}", "request")
            files = [f for f in form.getlist("reference") if isinstance(f, UploadFile)]
            if len(files) != len(form.getlist("reference")):
                raise RequestRejected("reference", "must be a file upload")
            pairs = [(f.filename, f.file) for f in files]
            uploads = await run_in_threadpool(save_uploads, folder, pairs) if pairs else []
        return data, uploads
    if content_type and not content_type.startswith("application/json"):
        raise RequestRejected("body", f"unsupported content type {content_type!r}", status=415)
    body = await request.body()
    return _decode_json(body or b"{}", "body"), []


def _declared_length(request: Request) -> int | None:
    """The body's `Content-Length`, when it gives one (charged before any byte is read)."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


def _decode_json(raw: str | bytes, field: str) -> Any:
    """Decoded JSON. Non-finite numbers (`Infinity`, `1e400`) decode and are then refused by
    the schema, naming their field; nesting deeper than Python's recursion limit and integers
    over Python's int-string limit are refused."""
    try:
        return load_json(raw, max_depth=None)  # the schema bounds what it accepts
    except DocumentError as exc:  # bad syntax, deep nesting, an integer of 5,000 digits
        raise RequestRejected(field, str(exc)) from None
