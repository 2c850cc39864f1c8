"""`ascp serve`: the probe as an HTTP service with a workbench page (the `serve` extra)."""

from __future__ import annotations

import ipaddress
import signal
from pathlib import Path
from typing import Annotated

import typer

from ascp.cli.common import (
    AttributeSeedOpt,
    BackendOpt,
    DeviceOpt,
    EstimatorOpt,
    FreeTokensOpt,
    InstructionOpt,
    ModelOpt,
    RequestCacheOpt,
    SystemOpt,
    TemperatureOpt,
    TemplateOpt,
    ThresholdOpt,
    TopPOpt,
    app,
    err,
    read_template,
    user_errors,
)
from ascp.errors import AscpError

KEY_ENV = "ASCP_API_KEY"


def is_loopback(host: str) -> bool:
    """Whether `host` binds only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without an API key."""
    if not is_loopback(host) and not api_key:
        raise AscpError(f"--host {host} lets other machines reach the service, which then needs an API key: pass "
                        f"--api-key or set {KEY_ENV} (or keep the default --host 127.0.0.1).")


@app.command("serve")
def serve_command(
    model: ModelOpt = "default",
    host: Annotated[str, typer.Option("--host", help="Address to listen on; anything but loopback needs an API "
                                      "key.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=KEY_ENV, show_envvar=True,
                                                help="Every request under /v1 must send it (X-API-Key or "
                                                "Authorization: Bearer).")] = None,
    root: Annotated[Path | None, typer.Option("--root", help="The folder whose run folders, stores and reports the "
                                              "workbench may browse (read only); nothing outside it is read.")] = None,
    estimator: EstimatorOpt = None,
    threshold: ThresholdOpt = None,
    seed: AttributeSeedOpt = 0,
    max_new_tokens: FreeTokensOpt = 128,
    temperature: TemperatureOpt = 0.7,
    top_p: TopPOpt = 1.0,
    instruction: InstructionOpt = "commit",
    template: TemplateOpt = None,
    system: SystemOpt = "",
    device: DeviceOpt = "auto",
    backend: BackendOpt = "auto",
    request_cache: RequestCacheOpt = None,
    max_queue: Annotated[int, typer.Option("--max-queue", help="Requests that may wait; one more is answered 503 "
                                           "with Retry-After.")] = 64,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Waiting requests with the same settings run as one "
                                           "batch of the model.")] = 8,
    max_body_bytes: Annotated[int, typer.Option("--max-body-bytes", help="Largest request body (413 above).")]
    = 1_000_000,
    max_passages: Annotated[int, typer.Option("--max-passages", help="Most passages per request (413 above).")] = 100,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Most prompt + response tokens per request "
                                                   "(413 above; default: the model's window).")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's: critical, error, warning, info, "
                                           "debug.")] = "info",
) -> None:
    """Serve the probe over HTTP: /v1/attribute, /v1/cite, /v1/portfolio, a workbench at / and OpenAPI at /docs."""
    with user_errors():
        try:
            import uvicorn

            from ascp.serve.app import create_app
        except ImportError:
            raise AscpError("ascp serve needs the serve extra (FastAPI and uvicorn): pip install 'ascp[serve]'.") \
                from None
        from ascp.api import load_model
        from ascp.lm.sampling import SamplingConfig
        from ascp.serve.browse import Root
        from ascp.serve.service import ServeDefaults, ServeLimits, Service

        check_exposure(host, api_key)
        if not 1 <= port <= 65535:
            raise AscpError(f"--port must lie in 1..65535, got {port}.")
        if log_level not in ("critical", "error", "warning", "info", "debug"):
            raise AscpError(f"--log-level must be critical, error, warning, info or debug, got {log_level!r}.")
        limits = ServeLimits(max_body_bytes, max_passages, max_tokens, max_queue, max_batch)
        defaults = ServeDefaults(estimator, threshold, seed, instruction, read_template(template), system,
                                 SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens))
        if root is not None:
            Root(root)  # a missing folder fails before the model loads
        with err.status(f"loading model {model!r}"):
            lm = load_model(model, device=device, backend=backend, request_cache=request_cache)
        service = Service(lm, defaults, limits)
        application = create_app(service, api_key=api_key, root=root)
        shown = f"[{host}]" if ":" in host else host
        err.print(f"serving {getattr(lm, 'name', model)} at http://{shown}:{port} (workbench at /, OpenAPI at /docs"
                  f"{', key required' if api_key else ''}); Ctrl-C or SIGTERM finishes the requests in flight, "
                  "then stops", markup=False, highlight=False)
    # uvicorn finishes the requests in flight on SIGTERM/SIGINT, then re-raises the signal to the handler
    # it found: these record it, so that a stop asked for is a clean exit (0; 130 after Ctrl-C).
    stops: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stops.append(number))
    uvicorn.run(application, host=host, port=port, log_level=log_level, access_log=log_level == "debug",
                timeout_graceful_shutdown=None)
    worker = service.worker
    err.print(f"stopped after {worker.finished} requests answered and {worker.failed} refused", markup=False,
              highlight=False)
    raise typer.Exit(130 if signal.SIGINT in stops else 0)
