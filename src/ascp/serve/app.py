"""The HTTP face of the service (FastAPI): routes, the API key, body limits and one-sentence errors.

Routes: POST /v1/attribute, /v1/cite, /v1/portfolio (computed on the worker), POST
/v1/render/attribution (a record drawn as the workbench and `ascp attribute --html` draw it),
GET /v1/health, /v1/estimators, /v1/browse, /v1/view, /v1/files (read-only, below --root), the
workbench at / and OpenAPI at /docs.

Every error is one JSON object `{"error": "<one sentence>"}` with its status: 400 a body that is not
JSON, 401 a missing or wrong key, 403 a path outside the root, 404 nothing there, 413 over a
limit, 422 a request the probe refuses, 503 a full queue (with Retry-After), a service shutting
down or an engine that does not answer; 500 only for a fault of ascp itself, logged with its
traceback on the server, never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ascp.errors import AscpError
from ascp.jsonio import json_safe
from ascp.serve.browse import NotFound, OutsideRoot, Root
from ascp.serve.jobs import Job, QueueFull, ServiceStopping
from ascp.serve.service import Service, TooLarge, parse_attribute, parse_portfolio

log = logging.getLogger("ascp.serve")
PUBLIC = frozenset({"/", "/docs", "/docs/oauth2-redirect", "/openapi.json"})  # static, no data
KEY_HEADER = b"x-api-key"


def error(status: int, sentence: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": sentence}, status_code=status, headers=headers)


def engine_down(exc: BaseException) -> bool:
    """An engine server that is unreachable, went away or answers 5xx: the service is fine, the engine is not."""
    from ascp.lm.engine import EngineError, EngineUnavailable

    return isinstance(exc, EngineUnavailable) or (isinstance(exc, EngineError) and exc.status >= 500)


def status_of(exc: BaseException) -> int:
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, OutsideRoot):
        return 403
    if isinstance(exc, NotFound):
        return 404
    if engine_down(exc):
        return 503
    return 422


_REQUEST_SCHEMA = {
    "type": "object", "required": ["id", "question", "passages"],
    "properties": {
        "id": {"type": "string"}, "question": {"type": "string"},
        "passages": {"type": "array", "items": {"type": "object", "required": ["id", "text"], "properties": {
            "id": {"type": "string"}, "title": {"type": "string"}, "text": {"type": "string"}}}},
        "response": {"type": ["string", "null"], "description": "null: the model generates one"},
        "estimator": {"type": "string", "description": "a name or spec, e.g. contextcite(num_ablations=64)"},
        "threshold": {"type": ["number", "null"], "description": "null: tau(k)"},
        "spans": {"type": ["string", "null"], "enum": ["sentences", None]},
        "seed": {"type": "integer", "minimum": 0},
    },
}


def _body_doc(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def create_app(service: Service, api_key: str | None = None, root: Path | None = None) -> FastAPI:
    """The service's app; the worker starts and stops with the app's lifespan."""

    served = Root(root) if root is not None else None
    limits = service.limits

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.worker.start()
        yield
        await asyncio.to_thread(service.worker.stop)  # the queue drains: no accepted request is dropped

    app = FastAPI(title="ascp", summary="Causal attribution of RAG responses: which passage, and which sentence, "
                  "a response used.", version=_version(), lifespan=lifespan)

    if api_key is not None:
        app.add_middleware(RequireKey, api_key=api_key)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error(404, f"no route {request.method} {request.url.path}; the routes are listed at /docs.")
        if exc.status_code == 405:
            return error(405, f"{request.url.path} does not take {request.method}; the routes are listed at /docs.")
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error(422, f"{where}: {first.get('msg', 'invalid')}.")

    @app.exception_handler(Exception)
    async def fault(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return error(500, f"ascp failed on {request.url.path} ({type(exc).__name__}); the service's log has the "
                          "traceback.")

    async def read_json(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise TooLarge(f"the body holds {declared} bytes, over this service's limit of {limits.max_body_bytes}; "
                           "send less or start it with a larger --max-body-bytes.")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise TooLarge(f"the body holds more than {limits.max_body_bytes} bytes, this service's limit; send "
                               "less or start it with a larger --max-body-bytes.")
            chunks.append(chunk)
        try:
            return json.loads(b"".join(chunks).decode("utf-8"))
        except UnicodeDecodeError:
            raise BadJson("the body is not UTF-8 text; send one JSON object in UTF-8.") from None
        except json.JSONDecodeError as exc:
            raise BadJson(f"the body is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); send "
                          "one JSON object.") from None

    async def compute(request: Request, make_job: Any) -> Response:
        """Check the body, queue its job, wait for it (or for the client to leave) and answer."""
        try:
            job: Job = make_job(await read_json(request))
        except BadJson as exc:
            return error(400, str(exc))
        except AscpError as exc:
            return error(status_of(exc), str(exc))
        try:
            future = service.worker.submit(job)
        except QueueFull:
            return error(503, f"the service's queue is full ({limits.max_queue} requests wait); retry after the "
                              "seconds Retry-After says.", {"Retry-After": str(retry_after())})
        except ServiceStopping:
            return error(503, "the service is shutting down; send the request to another instance or retry when it "
                              "is back.", {"Retry-After": "5"})
        waiter = asyncio.wrap_future(future)
        while not waiter.done():
            await asyncio.wait({waiter}, timeout=1.0)  # a disconnect is seen within a second
            if not waiter.done() and await request.is_disconnected():
                service.worker.cancel(job)  # a job not yet started frees its place in the queue
                return Response(status_code=499)
        if waiter.cancelled():
            return Response(status_code=499)
        failure = waiter.exception()
        if failure is None:
            return JSONResponse(json_safe(waiter.result()))  # NaN (PR@T without answers) is null
        if isinstance(failure, AscpError):
            return error(status_of(failure), str(failure), {"Retry-After": "5"} if engine_down(failure) else None)
        log.error("%s failed", request.url.path, exc_info=failure)
        return error(500, f"ascp failed on {request.url.path} ({type(failure).__name__}); the service's log has the "
                          "traceback.")

    def retry_after() -> int:
        worker = service.worker
        per_batch = worker.seconds / worker.batches if worker.batches else 1.0
        return max(1, math.ceil(per_batch * worker.waiting / limits.max_batch))

    d = service.defaults

    @app.post("/v1/attribute", openapi_extra=_body_doc(_REQUEST_SCHEMA),
              summary="Which passages a response used: the record `ascp attribute` writes for the request.")
    async def attribute(request: Request) -> Response:
        return await compute(request, lambda body: service.attribute_job(parse_attribute(body, d, limits)))

    @app.post("/v1/cite", openapi_extra=_body_doc(_REQUEST_SCHEMA),
              summary="The response with a causal citation after each sentence (the record `ascp cite` writes).")
    async def cite(request: Request) -> Response:
        return await compute(request, lambda body: service.attribute_job(
            parse_attribute(body, d, limits, markers="positions")))

    @app.post("/v1/portfolio", openapi_extra=_body_doc({"type": "object", "required": ["question", "pool"]}),
              summary="T rounds of a policy over one ranked pool (`ascp.run_portfolio`).")
    async def portfolio(request: Request) -> Response:
        return await compute(request, lambda body: service.portfolio_job(parse_portfolio(body, d, limits)))

    @app.post("/v1/render/attribution", summary="An attribution record drawn as HTML (the workbench's view).")
    async def render_attribution(request: Request) -> Response:
        from ascp.render.html import attribution_body
        from ascp.types import AttributionResult

        try:
            body = await read_json(request)
            record = body.get("record") if isinstance(body, dict) else None
            if not isinstance(record, dict):
                raise AscpError("the body must be {\"record\": <a record of /v1/attribute>}.")
            try:
                result = AttributionResult.from_json(record)
            except (KeyError, TypeError, ValueError) as exc:
                raise AscpError(f"the record is not one /v1/attribute wrote ({type(exc).__name__}: {exc}).") from None
        except BadJson as exc:
            return error(400, str(exc))
        except AscpError as exc:
            return error(status_of(exc), str(exc))
        return JSONResponse({"html": attribution_body(result)})

    @app.get("/v1/health", summary="Whether the service runs, its model and its queue.")
    async def health() -> dict[str, Any]:
        from dataclasses import asdict

        from ascp.lm.request_cache import CachedModel

        worker = service.worker
        cache = asdict(service.model.cache.stats) if isinstance(service.model, CachedModel) else None
        return {"status": "ok", "model": getattr(service.model, "name", "?"), "queue": worker.waiting,
                "max_queue": limits.max_queue, "in_flight": worker.in_flight, "finished": worker.finished,
                "failed": worker.failed, "batches": worker.batches, "request_cache": cache}

    @app.get("/v1/estimators", summary="The estimators a request may name, with their options and facts.")
    async def estimators() -> list[dict[str, Any]]:
        from dataclasses import asdict

        from ascp.attribution import estimator_facts, estimator_names, estimator_params
        from ascp.params import describe

        return [{**asdict(estimator_facts(name)), "options": [dict(zip(("name", "type", "default", "help"), row,
                                                                      strict=True))
                                                             for row in describe(estimator_params(name))]}
                for name in estimator_names()]

    def browsing(call: Any, path: str) -> Any:
        if served is None:
            raise NotFound("this service browses no folder; start it with --root FOLDER.")
        return call(path)

    @app.get("/v1/browse", summary="A folder below --root: its sub-folders (with the results each holds) and files.")
    async def browse(path: str = ".") -> Response:
        try:
            return JSONResponse(await asyncio.to_thread(browsing, lambda p: served.listing(p), path))  # type: ignore[union-attr]
        except AscpError as exc:
            return error(status_of(exc), str(exc))

    @app.get("/v1/view", summary="The `ascp view` page of a run folder or experiment store below --root.")
    async def view(path: str) -> Response:
        try:
            page, note = await asyncio.to_thread(browsing, lambda p: served.view(p), path)  # type: ignore[union-attr]
        except AscpError as exc:
            return error(status_of(exc), str(exc))
        return HTMLResponse(page, headers={"X-Ascp-Note": note} if note else None)

    @app.get("/v1/files", summary="A report table, figure or record below --root (read only).")
    async def files(path: str) -> Response:
        try:
            file, media = browsing(lambda p: served.file(p), path)  # type: ignore[union-attr]
        except AscpError as exc:
            return error(status_of(exc), str(exc))
        return FileResponse(file, media_type=media)

    @app.get("/", response_class=HTMLResponse, summary="The workbench.")
    async def workbench() -> HTMLResponse:
        from ascp.serve.workbench import workbench_page

        return HTMLResponse(workbench_page(needs_key=api_key is not None, browses=served is not None))

    return app


class RequireKey:
    """Every route but the static ones answers 401 without the key (a plain ASGI middleware: one on
    Starlette's `BaseHTTPMiddleware` would hide a client's disconnect from the routes)."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.key = api_key.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in PUBLIC:
            headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
            given = headers.get(KEY_HEADER) or _bearer(headers.get(b"authorization", ""))
            if not given or not hmac.compare_digest(given.encode("latin-1"), self.key):
                answer = error(401, "this service needs its API key: send it as the X-API-Key header (or "
                                    "Authorization: Bearer KEY).", {"WWW-Authenticate": "Bearer"})
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BadJson(AscpError):
    """A body that is not JSON (HTTP 400)."""


def _bearer(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ascp")
    except PackageNotFoundError:
        return "0"
