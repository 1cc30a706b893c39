"""The OpenAI-compatible API: /v1/models and /v1/chat/completions (streamed or not); every choice is a
turn in the interaction log, its id in the choice's `turn`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from hominem_pipeline.core.online.events import BASE, SERVED
from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import (
    ApiError,
    Asked,
    Service,
    authenticate,
    finish,
    get_service,
    sampling_plan,
    submit,
    usage,
    write_turns,
)
from hominem_pipeline.serving.engine import Request as Job
from hominem_pipeline.serving.engine import wait
from hominem_pipeline.serving.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChunkChoice,
    Delta,
    ModelCard,
    ModelList,
    Usage,
)

router = APIRouter(tags=["openai"])


@router.get("/v1/models", response_model=ModelList)
async def models(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> ModelList:
    created = int(service.started)
    return ModelList(
        data=[
            ModelCard(id=SERVED, created=created, owned_by="hominem", adapter=service.adapter_label),
            ModelCard(id=BASE, created=created, owned_by="hominem", adapter=None),
        ]
    )


def _asked(body: ChatCompletionRequest, service: Service) -> Asked:
    if body.model not in (SERVED, BASE):
        raise ApiError(
            404,
            f"model {body.model!r} is not served here; use {SERVED!r} (the served adapter) or "
            f"{BASE!r} (the adapter off)",
            "model",
            "model_not_found",
        )
    plan = sampling_plan(
        service, body.max_completion_tokens or body.max_tokens, body.temperature, body.top_p, body.seed
    )
    adapter = body.model == SERVED and service.adapter_label is not None
    return Asked([m.plain() for m in body.messages], body.model, adapter, plan, body.user)


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletionResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "with `stream`: ChatCompletionChunk events"}
    },
)
async def chat_completions(
    body: ChatCompletionRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> Any:
    asked = _asked(body, service)
    created, completion_id = int(time.time()), f"chatcmpl-{uuid.uuid4().hex[:24]}"
    if body.stream:
        return _stream(body, asked, caller, service, (completion_id, created))
    jobs = submit(service, asked.messages, asked.plan, asked.adapter, body.n)
    await asyncio.gather(*(wait(j.future) for j in jobs))
    turns = await write_turns(service, caller, asked, jobs)
    choices = [
        ChatChoice(index=i, message=AssistantMessage(content=j.sent), finish_reason=finish(j), turn=t.id)
        for i, (j, t) in enumerate(zip(jobs, turns))
    ]
    return ChatCompletionResponse(
        id=completion_id, created=created, model=body.model, choices=choices, usage=Usage(**usage(jobs))
    )


def _stream(
    body: ChatCompletionRequest, asked: Asked, caller: Caller, service: Service, made: tuple[str, int]
) -> StreamingResponse:
    """The completion as server-sent events: a role chunk, each delta as the engine writes it, each choice's last
    chunk with its turn id once every reply is in the log, the usage if asked, [DONE]. A client that goes away
    stops the writing; what it was shown is still logged."""
    loop = asyncio.get_running_loop()
    deltas: asyncio.Queue = asyncio.Queue()
    jobs = submit(
        service,
        asked.messages,
        asked.plan,
        asked.adapter,
        body.n,
        lambda i, d: loop.call_soon_threadsafe(deltas.put_nowait, (i, d)),
    )
    include_usage = bool((body.stream_options or {}).get("include_usage"))

    def chunk(choices: list[ChunkChoice], **extra: Any) -> str:
        chunk_of = ChatCompletionChunk(
            id=made[0], object="chat.completion.chunk", created=made[1], model=body.model, choices=choices, **extra
        )
        return chunk_of.event()

    async def events() -> AsyncIterator[str]:
        logged = False
        try:
            opening = Delta(role="assistant", content="")
            yield chunk([ChunkChoice(index=i, delta=opening, finish_reason=None) for i in range(body.n)])
            async for i, delta in _deltas(jobs, deltas):
                yield chunk([ChunkChoice(index=i, delta=Delta(content=delta), finish_reason=None)])
            turns = await write_turns(service, caller, asked, jobs)
            logged = True
            for i, (job, turn) in enumerate(zip(jobs, turns)):
                yield chunk([ChunkChoice(index=i, delta=Delta(), finish_reason=finish(job), turn=turn.id)])
            if include_usage:
                yield chunk([], usage=Usage(**usage(jobs)))
            yield "data: [DONE]\n\n"
        finally:
            if not logged:  # the client went away: stop writing for it, and keep what it was shown
                for job in jobs:
                    job.cancelled = True

                async def keep() -> None:
                    await asyncio.gather(*(wait(j.future) for j in jobs), return_exceptions=True)
                    await write_turns(service, caller, asked, jobs)

                loop.create_task(keep())

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _deltas(jobs: list[Job], deltas: asyncio.Queue) -> AsyncIterator[tuple[int, str]]:
    """(choice, text) as the engine writes them, until every job is done (a failed job's error is raised)."""
    done = asyncio.ensure_future(asyncio.gather(*(wait(j.future) for j in jobs)))
    while not (done.done() and deltas.empty()):
        getter = asyncio.ensure_future(deltas.get())
        finished, _ = await asyncio.wait({getter, done}, return_when=asyncio.FIRST_COMPLETED)
        if getter in finished:
            yield getter.result()
        else:
            getter.cancel()
    done.result()
