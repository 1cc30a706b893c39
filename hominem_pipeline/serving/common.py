"""What every route of the service shares: the `Service` it answers for (on `app.state.service`, reached through
the `get_service` dependency), `ApiError` (OpenAI's error shape, naming the field at fault), the caller's token
(`authenticate`, `require_admin`), and the steps of answering: the sampling plan, submitting to the engine,
writing the replies to the log as turns."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from hominem_pipeline.core.config import ServingConfig
from hominem_pipeline.core.online.events import Turn, new_turn, redact
from hominem_pipeline.core.online.ledger import Ledger
from hominem_pipeline.serving.auth import Access, Caller
from hominem_pipeline.serving.engine import Engine, QueueFull, Sampling
from hominem_pipeline.serving.engine import Request as Job
from hominem_pipeline.serving.journal import Journal


@dataclass
class Service:
    settings: ServingConfig
    engine: Engine
    journal: Journal
    ledger: Ledger
    access: Access
    reward_label: str | None
    started: float = field(default_factory=time.time)
    rng: random.Random = field(default_factory=random.Random)
    live: Any = None  # the LiveWatcher when the service follows data/live/current.json
    updates: Any = None  # the UpdateScheduler of online updates, beside the LiveWatcher
    registry: Any = None  # the RegistryWatcher when the service follows a registry alias (models:/...@champion)
    config: Any = None  # the whole HominemConfig: what the admin's live endpoints gate and write with
    questions: Any = None  # the QuestionDesk behind GET /feedback/next
    dashboard: Any = None  # the DashboardData over the project's data folder (None without a project config)
    history: Any = None  # the HistoryIndex behind /history/* (opened at the first question)
    tastes: Any = None  # the ServedTastes: each person's taste model (GET /me/taste, the pairs a person is shown)

    @property
    def adapter_label(self) -> str | None:
        """The adapter new requests run on, as the log names it (None: the base alone); a hot-swap changes it."""
        return self.engine.adapter_label


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_response(
    status: int, message: str, param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status_code=status,
        headers=headers,
    )


def field_name(loc: tuple[Any, ...]) -> str:
    """A validation error's location as the client wrote it (`messages.0.content`; `body` for the whole)."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def json_problem(error: dict[str, Any], body: bytes) -> str:
    """A request body that is not JSON (a `json_invalid` validation error), in words: the decoder's reason and
    where it stopped, as a line and column of `body` with the text around it."""
    at = next((p for p in reversed(error.get("loc", ())) if isinstance(p, int)), None)
    reason = (error.get("ctx") or {}).get("error") or error.get("msg", "JSON decode error")
    if at is None:
        return f"the request body is not JSON ({reason}); send a JSON object with content-type application/json"
    text = body.decode("utf-8", "replace")
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    near = text[max(0, at - 20) : at + 20].replace("\n", " ")
    return (
        f"the request body is not JSON: {reason} at line {line}, column {column} (character {at}), near {near!r}; "
        "send a JSON object with content-type application/json"
    )


def finish(job: Job) -> str:
    return "length" if job.finish_reason == "length" else "stop"


def get_service(request: Request) -> Service:
    """The service this app answers for (a dependency)."""
    return request.app.state.service


# async: a plain `def` dependency would run in a thread pool, a thread hop on every request
async def authenticate(request: Request, service: Service = Depends(get_service)) -> Caller:
    """The caller of a valid token (a dependency); 401, audited, without one."""
    access = service.access
    caller = access.caller(request.headers.get("authorization"))
    if caller is None:
        access.audit(
            "unauthorized",
            path=request.url.path,
            method=request.method,
            client=request.client.host if request.client else None,
            header="absent" if not request.headers.get("authorization") else "unknown token",
        )
        raise ApiError(
            401,
            "a bearer token is needed: send `Authorization: Bearer TOKEN` with a token from "
            f"serving.tokens_file or ${service.settings.tokens_env}",
            "authorization",
            "invalid_api_key",
            {"WWW-Authenticate": "Bearer"},
        )
    return caller


async def require_admin(
    request: Request, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> Caller:
    """The caller, whose token is an admin's (a dependency); 403, audited, otherwise."""
    if not caller.admin:
        service.access.audit("forbidden", path=request.url.path, rater=caller.rater)
        raise ApiError(
            403,
            "this needs an admin token (`admin TOKEN` in serving.tokens_file)",
            "authorization",
            "forbidden",
        )
    return caller


def kept_text(service: Service, value: str) -> str:
    """What the log keeps of a text: redacted when serving.redact is on."""
    return redact(value) if service.settings.redact else value


def sampling_plan(
    service: Service, max_tokens: int | None, temperature: float | None, top_p: float | None, seed: int | None
) -> Sampling:
    """The request's sampling, the service's settings where it sets none; 422 for more tokens than it writes."""
    s = service.settings
    if max_tokens is not None and max_tokens > s.max_new_tokens:
        raise ApiError(
            422,
            f"max_tokens {max_tokens} is more than this service writes per reply "
            f"({s.max_new_tokens}, serving.max_new_tokens)",
            "max_tokens",
        )
    return Sampling(
        s.temperature if temperature is None else temperature,
        s.top_p if top_p is None else top_p,
        max_tokens or s.max_new_tokens,
        seed,
    )


def submit(
    service: Service, messages: list[dict[str, str]], plan: Sampling, adapter: bool, n: int, on_text: Any = None
) -> list[Job]:
    """`n` replies to `messages` queued on the engine (seeds plan.seed + i); 503 with Retry-After when it is full."""
    engine = service.engine
    chat = engine.chat_text(messages)
    jobs = [
        Job(
            chat,
            plan if plan.seed is None else Sampling(plan.temperature, plan.top_p, plan.max_tokens, plan.seed + i),
            adapter,
            None if on_text is None else (lambda d, i=i: on_text(i, d)),
        )
        for i in range(n)
    ]
    try:
        for job in jobs:
            engine.submit(job)
    except QueueFull as exc:
        for job in jobs:
            job.cancelled = True
        raise ApiError(503, str(exc), None, "overloaded", {"Retry-After": str(int(exc.retry_after + 0.999))}) from exc
    return jobs


@dataclass(frozen=True)
class Asked:
    """What a request asked the engine for: the conversation, the model name, adapter or base, the sampling and
    the client's session."""

    messages: list[dict[str, str]]
    model: str
    adapter: bool
    plan: Sampling
    session: str | None


async def write_turns(
    service: Service, caller: Caller, asked: Asked, jobs: list[Job], rewards: list[Any] | None = None
) -> list[Turn]:
    """Each finished job as a turn, on disk before this returns, then in the ledger."""
    logged = [{"role": m["role"], "content": kept_text(service, m["content"])} for m in asked.messages]
    turns = []
    for i, job in enumerate(jobs):
        reward = rewards[i] if rewards else None
        turns.append(
            new_turn(
                caller.rater,
                logged,
                kept_text(service, job.sent),
                session=asked.session,
                model=asked.model,
                adapter=job.adapter_label,
                reward_model=service.reward_label if reward is not None else None,
                reward=reward,
                sampling={
                    "temperature": job.sampling.temperature,
                    "top_p": job.sampling.top_p,
                    "max_tokens": job.sampling.max_tokens,
                    "seed": job.sampling.seed,
                },
                finish_reason=job.finish_reason,
                completion_tokens=len(job.ids),
            )
        )
    await asyncio.gather(*(service.journal.write(t.model_dump(mode="json")) for t in turns))
    for turn in turns:
        service.ledger.add(turn)
    return turns


def usage(jobs: list[Job]) -> dict[str, int]:
    prompt = jobs[0].prompt_tokens if jobs else 0
    completion = sum(len(j.ids) for j in jobs)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
