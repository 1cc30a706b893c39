"""The HTTP service: OpenAI-compatible chat, /generate, /reward, /feedback, the feedback page.

Every reply the service writes is a turn in the interaction log and every piece of feedback an event
there; a request is answered only after its events are on disk. Errors use OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`) and name the field at fault. The routes live in
`serving/routes/` (one module-level router per audience), which reach the `Service` through `app.state`;
what they share is in `serving/common`, every request and response model in `serving/protocol`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from hominem_pipeline.serving.common import ApiError, Service, error_response, field_name, json_problem
from hominem_pipeline.serving.protocol import Health, PageConfig
from hominem_pipeline.serving.routes import admin, dashboard, feedback, history, openai

STATIC = Path(__file__).parent / "static"
__all__ = ["STATIC", "BodyLimit", "Service", "create_app"]


class BodyLimit:
    """413 for a body over the limit, whether or not it declares its length (ASGI middleware)."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await error_response(
                413,
                f"the request body is {int(declared):,} bytes; the limit is {self.limit:,} (serving.max_body_bytes)",
                "body",
            )(scope, receive, send)
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise ApiError(
                    413, f"the request body is over the limit of {self.limit:,} bytes (serving.max_body_bytes)", "body"
                )
            return message

        await self.app(scope, limited, send)


def create_app(service: Service) -> FastAPI:
    s, engine, access = service.settings, service.engine, service.access
    # FastAPIOffline: /docs and /redoc from the files the fastapi-offline package installs, not a CDN (they work
    # offline)
    app = FastAPIOffline(
        title="hominem",
        version="1",
        description="Chat with the student, score replies with the reward model, and teach both with your feedback. "
        "OpenAI-compatible under /v1; every turn and piece of feedback is kept in the interaction log.",
    )
    app.add_middleware(BodyLimit, limit=s.max_body_bytes)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        broken = next((e for e in exc.errors() if e["type"] == "json_invalid"), None)
        if broken is not None:  # its loc is ("body", the character where decoding stopped), not a field
            return error_response(400, json_problem(broken, await request.body()), "body", "invalid_json")
        problems = [
            f"{field_name(tuple(e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
            + (
                f" (got {json.dumps(e['input'])[:80]})"
                if e.get("type") not in ("missing", "model_type") and "input" in e
                else ""
            )
            for e in exc.errors()
        ]
        first = exc.errors()[0] if exc.errors() else {"loc": ()}
        return error_response(422, "; ".join(problems), field_name(tuple(first["loc"])), "invalid_value")

    app.state.service = service
    if service.config is not None and service.dashboard is None:
        from hominem_pipeline.core.dashboard.views import DashboardData

        service.dashboard = DashboardData(service.config.data_dir)
    for routes in (openai, feedback, admin, dashboard, history):
        app.include_router(routes.router)

    @app.get("/healthz", tags=["hominem"], response_model=Health)
    async def healthz() -> Health:
        return Health(
            status="ok",
            adapter=service.adapter_label,
            reward_model=service.reward_label,
            waiting=engine.waiting,
            running=engine.running,
            batches=engine.batches,
            largest_batch=engine.largest_batch,
            uptime_seconds=round(time.time() - service.started, 1),
            auth="open (loopback)" if access.open else "bearer tokens",
        )

    @app.get("/config", tags=["hominem"], response_model=PageConfig)
    async def page_config() -> PageConfig:
        """What the page needs: the dimensions, the emotion tags, whether a token is needed."""
        from hominem_pipeline.core.online.events import EMOTION_TAGS, STRENGTHS

        return PageConfig(
            dimensions=service.ledger.dimensions,
            emotion_tags=list(EMOTION_TAGS),
            strengths=list(STRENGTHS),
            token_required=not access.open,
            adapter=service.adapter_label,
            reward_model=service.reward_label,
        )

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
