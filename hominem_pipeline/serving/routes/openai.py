"""The OpenAI-compatible API: /v1/models and /v1/chat/completions (streamed or not); every choice is a
turn in the interaction log, its id in the choice's `turn`."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from hominem_pipeline.core.online.events import BASE, SERVED
from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import ApiError, Kit, finish
from hominem_pipeline.serving.engine import wait
from hominem_pipeline.serving.schemas import ChatCompletionRequest


def router(kit: Kit) -> APIRouter:
    service = kit.service
    api = APIRouter(tags=["openai"])

    @api.get("/v1/models")
    async def models(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        created = int(service.started)
        return {
            "object": "list",
            "data": [
                {
                    "id": SERVED,
                    "object": "model",
                    "created": created,
                    "owned_by": "hominem",
                    "adapter": service.adapter_label,
                },
                {"id": BASE, "object": "model", "created": created, "owned_by": "hominem", "adapter": None},
            ],
        }

    @api.post("/v1/chat/completions")
    async def chat_completions(
        body: ChatCompletionRequest, request: Request, caller: Caller = Depends(kit.authenticate)
    ) -> Any:
        if body.model not in (SERVED, BASE):
            raise ApiError(
                404,
                f"model {body.model!r} is not served here; use {SERVED!r} (the served adapter) or "
                f"{BASE!r} (the adapter off)",
                "model",
                "model_not_found",
            )
        adapter = body.model == SERVED and service.adapter_label is not None
        messages = [m.plain() for m in body.messages]
        plan = kit.sampling(body.max_completion_tokens or body.max_tokens, body.temperature, body.top_p, body.seed)
        created, base_id = int(time.time()), uuid.uuid4().hex[:24]
        if not body.stream:
            jobs = kit.submit(messages, plan, adapter, body.n)
            await asyncio.gather(*(wait(j.future) for j in jobs))
            turns = await kit.record(caller, messages, jobs, body.model, adapter, plan, body.user)
            return {
                "id": f"chatcmpl-{base_id}",
                "object": "chat.completion",
                "created": created,
                "model": body.model,
                "choices": [
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": j.sent},
                        "finish_reason": finish(j),
                        "logprobs": None,
                        "turn": t.id,
                    }
                    for i, (j, t) in enumerate(zip(jobs, turns))
                ],
                "usage": kit.usage(jobs),
            }
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue = asyncio.Queue()
        jobs = kit.submit(
            messages, plan, adapter, body.n, lambda i, d: loop.call_soon_threadsafe(deltas.put_nowait, (i, d))
        )
        include_usage = bool((body.stream_options or {}).get("include_usage"))

        def chunk(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
            payload = {
                "id": f"chatcmpl-{base_id}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.model,
                "choices": choices,
                **(extra or {}),
            }
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        async def events() -> AsyncIterator[str]:
            logged = False
            try:
                yield chunk(
                    [
                        {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                        for i in range(body.n)
                    ]
                )
                done = asyncio.ensure_future(asyncio.gather(*(wait(j.future) for j in jobs)))
                while not (done.done() and deltas.empty()):
                    getter = asyncio.ensure_future(deltas.get())
                    finished, _ = await asyncio.wait({getter, done}, return_when=asyncio.FIRST_COMPLETED)
                    if getter in finished:
                        i, delta = getter.result()
                        yield chunk([{"index": i, "delta": {"content": delta}, "finish_reason": None}])
                    else:
                        getter.cancel()
                done.result()
                turns = await kit.record(caller, messages, jobs, body.model, adapter, plan, body.user)
                logged = True
                for i, (job, turn) in enumerate(zip(jobs, turns)):
                    yield chunk([{"index": i, "delta": {}, "finish_reason": finish(job), "turn": turn.id}])
                if include_usage:
                    yield chunk([], {"usage": kit.usage(jobs)})
                yield "data: [DONE]\n\n"
            finally:
                if not logged:  # the client went away: stop writing for it, and keep what it was shown
                    for job in jobs:
                        job.cancelled = True

                    async def keep() -> None:
                        await asyncio.gather(*(wait(j.future) for j in jobs), return_exceptions=True)
                        await kit.record(caller, messages, jobs, body.model, adapter, plan, body.user)

                    loop.create_task(keep())

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    return api
