"""The HTTP service: OpenAI-compatible chat, /generate, /reward, /feedback, the feedback page.

Every reply the service writes is a turn in the interaction log and every piece of feedback an event
there; a request is answered only after its events are on disk. Errors use OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`) and name the field at fault.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from pydantic import ValidationError

from hominem_pipeline.core.config import ServingConfig
from hominem_pipeline.core.generation import end_at_sentence
from hominem_pipeline.core.online.events import FEEDBACK, Turn, context_digest, redact
from hominem_pipeline.core.online.ledger import FeedbackError, Ledger
from hominem_pipeline.core.online.log import utc_now
from hominem_pipeline.serving.auth import Access, Caller
from hominem_pipeline.serving.engine import Engine, QueueFull, Request as Job, Sampling, wait
from hominem_pipeline.serving.journal import Journal
from hominem_pipeline.serving.schemas import ChatCompletionRequest, FeedbackRequest, GenerateRequest, LiveRequest, RewardRequest, TurnRequest

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
SERVED, BASE = "hominem", "hominem-base"


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
    config: Any = None  # the whole HominemConfig: what the admin's live endpoints gate and write with
    questions: Any = None  # the QuestionDesk behind GET /feedback/next

    @property
    def adapter_label(self) -> str | None:
        """The adapter new requests run on, as the log names it (None: the base alone); a hot-swap changes it."""
        return self.engine.adapter_label


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def _error(status: int, message: str, param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status, headers=headers)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


class BodyLimit:
    """413 for a body over the limit, whether or not it declares its length (ASGI middleware)."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _error(413, f"the request body is {int(declared):,} bytes; the limit is {self.limit:,} (serving.max_body_bytes)", "body")(scope, receive, send)
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise ApiError(413, f"the request body is over the limit of {self.limit:,} bytes (serving.max_body_bytes)", "body")
            return message

        await self.app(scope, limited, send)


def create_app(service: Service) -> FastAPI:
    s, engine, access = service.settings, service.engine, service.access
    # FastAPIOffline: /docs and /redoc from the files the fastapi-offline package installs, not a CDN (they work offline)
    app = FastAPIOffline(title="hominem", version="1", description="Chat with the student, score replies with the reward model, and teach both with your feedback. "
                  "OpenAI-compatible under /v1; every turn and piece of feedback is kept in the interaction log.")
    app.add_middleware(BodyLimit, limit=s.max_body_bytes)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{_field(tuple(e['loc']))}: {e['msg'].removeprefix('Value error, ')}" + (f" (got {json.dumps(e['input'])[:80]})" if e.get("type") not in ("missing", "model_type") and "input" in e else "")
                    for e in exc.errors()]
        first = exc.errors()[0] if exc.errors() else {"loc": ()}
        return _error(422 if "json_invalid" not in {e["type"] for e in exc.errors()} else 400, "; ".join(problems), _field(tuple(first["loc"])), "invalid_value")

    # async: a plain `def` dependency would run in a thread pool, a thread hop on every request
    async def authenticate(request: Request) -> Caller:
        caller = access.caller(request.headers.get("authorization"))
        if caller is None:
            access.audit("unauthorized", path=request.url.path, method=request.method, client=request.client.host if request.client else None,
                         header="absent" if not request.headers.get("authorization") else "unknown token")
            raise ApiError(401, "a bearer token is needed: send `Authorization: Bearer TOKEN` with a token from serving.tokens_file or "
                                f"${s.tokens_env}", "authorization", "invalid_api_key", {"WWW-Authenticate": "Bearer"})
        return caller

    async def admin(request: Request, caller: Caller = Depends(authenticate)) -> Caller:
        if not caller.admin:
            access.audit("forbidden", path=request.url.path, rater=caller.rater)
            raise ApiError(403, "this needs an admin token (`admin TOKEN` in serving.tokens_file)", "authorization", "forbidden")
        return caller

    def text(value: str) -> str:
        return redact(value) if s.redact else value

    def sampling(max_tokens: int | None, temperature: float | None, top_p: float | None, seed: int | None) -> Sampling:
        if max_tokens is not None and max_tokens > s.max_new_tokens:
            raise ApiError(422, f"max_tokens {max_tokens} is more than this service writes per reply ({s.max_new_tokens}, serving.max_new_tokens)", "max_tokens")
        return Sampling(s.temperature if temperature is None else temperature, s.top_p if top_p is None else top_p, max_tokens or s.max_new_tokens, seed)

    def submit(messages: list[dict[str, str]], plan: Sampling, adapter: bool, n: int, on_text: Any = None) -> list[Job]:
        chat = engine.chat_text(messages)
        jobs = [Job(chat, plan if plan.seed is None else Sampling(plan.temperature, plan.top_p, plan.max_tokens, plan.seed + i), adapter,
                    None if on_text is None else (lambda d, i=i: on_text(i, d))) for i in range(n)]
        try:
            for job in jobs:
                engine.submit(job)
        except QueueFull as exc:
            for job in jobs:
                job.cancelled = True
            raise ApiError(503, str(exc), None, "overloaded", {"Retry-After": str(int(exc.retry_after + 0.999))}) from exc
        return jobs

    async def record(caller: Caller, messages: list[dict[str, str]], jobs: list[Job], model: str, adapter: bool, plan: Sampling,
                     session: str | None, rewards: list[dict[str, Any] | None] | None = None) -> list[Turn]:
        logged = [{"role": m["role"], "content": text(m["content"])} for m in messages]
        turns = []
        for i, job in enumerate(jobs):
            turn = Turn(id=uuid.uuid4().hex, time=utc_now().isoformat(), rater=caller.rater, session=session, messages=logged, reply=text(job.sent),
                        model=model, adapter=job.adapter_label,
                        reward_model=service.reward_label if rewards and rewards[i] is not None else None, reward=rewards[i] if rewards else None,
                        sampling={"temperature": job.sampling.temperature, "top_p": job.sampling.top_p, "max_tokens": job.sampling.max_tokens, "seed": job.sampling.seed},
                        finish_reason=job.finish_reason, completion_tokens=len(job.ids), context=context_digest(logged))  # type: ignore[arg-type]
            turns.append(turn)
        await asyncio.gather(*(service.journal.write(t.model_dump(mode="json")) for t in turns))
        for turn in turns:
            service.ledger.add(turn)
        return turns

    def usage(jobs: list[Job]) -> dict[str, int]:
        prompt = jobs[0].prompt_tokens if jobs else 0
        completion = sum(len(j.ids) for j in jobs)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    # -- OpenAI-compatible -------------------------------------------------------------------------

    @app.get("/v1/models", tags=["openai"])
    async def models(caller: Caller = Depends(authenticate)) -> dict[str, Any]:
        created = int(service.started)
        return {"object": "list", "data": [
            {"id": SERVED, "object": "model", "created": created, "owned_by": "hominem", "adapter": service.adapter_label},
            {"id": BASE, "object": "model", "created": created, "owned_by": "hominem", "adapter": None},
        ]}

    @app.post("/v1/chat/completions", tags=["openai"])
    async def chat_completions(body: ChatCompletionRequest, request: Request, caller: Caller = Depends(authenticate)) -> Any:
        if body.model not in (SERVED, BASE):
            raise ApiError(404, f"model {body.model!r} is not served here; use {SERVED!r} (the served adapter) or {BASE!r} (the adapter off)", "model", "model_not_found")
        adapter = body.model == SERVED and service.adapter_label is not None
        messages = [m.plain() for m in body.messages]
        plan = sampling(body.max_completion_tokens or body.max_tokens, body.temperature, body.top_p, body.seed)
        created, base_id = int(time.time()), uuid.uuid4().hex[:24]
        if not body.stream:
            jobs = submit(messages, plan, adapter, body.n)
            await asyncio.gather(*(wait(j.future) for j in jobs))
            turns = await record(caller, messages, jobs, body.model, adapter, plan, body.user)
            return {"id": f"chatcmpl-{base_id}", "object": "chat.completion", "created": created, "model": body.model,
                    "choices": [{"index": i, "message": {"role": "assistant", "content": j.sent}, "finish_reason": _finish(j), "logprobs": None, "turn": t.id}
                                for i, (j, t) in enumerate(zip(jobs, turns))],
                    "usage": usage(jobs)}
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue = asyncio.Queue()
        jobs = submit(messages, plan, adapter, body.n, lambda i, d: loop.call_soon_threadsafe(deltas.put_nowait, (i, d)))
        include_usage = bool((body.stream_options or {}).get("include_usage"))

        def chunk(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
            payload = {"id": f"chatcmpl-{base_id}", "object": "chat.completion.chunk", "created": created, "model": body.model, "choices": choices, **(extra or {})}
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        async def events() -> AsyncIterator[str]:
            logged = False
            try:
                yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None} for i in range(body.n)])
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
                turns = await record(caller, messages, jobs, body.model, adapter, plan, body.user)
                logged = True
                for i, (job, turn) in enumerate(zip(jobs, turns)):
                    yield chunk([{"index": i, "delta": {}, "finish_reason": _finish(job), "turn": turn.id}])
                if include_usage:
                    yield chunk([], {"usage": usage(jobs)})
                yield "data: [DONE]\n\n"
            finally:
                if not logged:  # the client went away: stop writing for it, and keep what it was shown
                    for job in jobs:
                        job.cancelled = True

                    async def keep() -> None:
                        await asyncio.gather(*(wait(j.future) for j in jobs), return_exceptions=True)
                        await record(caller, messages, jobs, body.model, adapter, plan, body.user)

                    loop.create_task(keep())

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    # -- the project's own endpoints ---------------------------------------------------------------

    @app.post("/generate", tags=["hominem"])
    async def generate(body: GenerateRequest, caller: Caller = Depends(authenticate)) -> dict[str, Any]:
        """Replies from the served adapter (or the base), each with its turn id and reward."""
        adapter = body.adapter and service.adapter_label is not None
        messages = [m.plain() for m in body.messages or []]
        plan = sampling(body.max_tokens, body.temperature, body.top_p, body.seed)
        jobs = submit(messages, plan, adapter, body.n)
        await asyncio.gather(*(wait(j.future) for j in jobs))
        for job in jobs:  # the page shows whole replies: one cut by the token limit ends at its last sentence (the log keeps what was shown)
            if job.finish_reason == "length":
                job.sent = end_at_sentence(job.sent)
        rewards: list[dict[str, Any] | None] = [None] * len(jobs)
        if body.score and engine.reward is not None:
            scored = [i for i, j in enumerate(jobs) if j.sent.strip()]
            if scored:
                prompt = messages[-1]["content"]
                outputs = await wait(engine.score([prompt] * len(scored), [jobs[i].sent for i in scored]))
                for i, output in zip(scored, outputs):
                    rewards[i] = output
        turns = await record(caller, messages, jobs, SERVED if adapter else BASE, adapter, plan, body.session, rewards)
        return {"adapter": jobs[0].adapter_label if jobs else None, "reward_model": service.reward_label,
                "replies": [{"turn": t.id, "text": j.sent, "finish_reason": _finish(j), "completion_tokens": len(j.ids), "reward": r}
                            for j, t, r in zip(jobs, turns, rewards)]}

    @app.post("/turns", tags=["hominem"])
    async def turns(body: TurnRequest, caller: Caller = Depends(authenticate)) -> dict[str, Any]:
        """Record a reply written elsewhere (another model, a person) as a turn, so that it can be rated
        and compared with /feedback like the service's own."""
        messages = [{"role": m["role"], "content": text(m["content"])} for m in (x.plain() for x in body.messages or [])]
        tokens = await wait(engine.run(lambda: engine.count_tokens(body.reply)))  # the tokenizer is the worker's alone
        turn = Turn(id=uuid.uuid4().hex, time=utc_now().isoformat(), rater=caller.rater, session=body.session, messages=messages, reply=text(body.reply),
                    model=body.author, adapter=None, sampling={}, finish_reason="stop", completion_tokens=tokens,
                    context=context_digest(messages))  # type: ignore[arg-type]
        await service.journal.write(turn.model_dump(mode="json"))
        service.ledger.add(turn)
        return {"turn": turn.id}

    @app.post("/reward", tags=["hominem"])
    async def reward(body: RewardRequest, caller: Caller = Depends(authenticate)) -> dict[str, Any]:
        """The reward model's scores (vector, scalar, reward_intensity, safety_score, uncertainty) per reply."""
        if engine.reward is None:
            raise ApiError(503, "no reward model is served (serving.reward_model is null, or none is built); start with --reward-model PATH", None, "no_reward_model")
        pairs = body.pairs()
        for i, p in enumerate(pairs):
            if not p.response.strip():
                raise ApiError(422, f"item {i}: the response is blank; there is nothing to score", f"items.{i}.response" if body.items else "response")
        scores = await wait(engine.score([p.prompt for p in pairs], [p.response for p in pairs]))
        return {"reward_model": service.reward_label, "scores": scores}

    @app.post("/feedback", tags=["hominem"])
    async def feedback(body: FeedbackRequest, caller: Caller = Depends(authenticate)) -> JSONResponse:
        """Record feedback on turns: thumb, choice (A over B, strength, note), nudge, emotion labels."""
        raw = {k: v for k, v in body.model_dump().items() if v is not None}
        raw.setdefault("id", uuid.uuid4().hex)
        raw |= {"time": utc_now().isoformat(), "rater": caller.rater}
        if "note" in raw:
            raw["note"] = text(raw["note"])
        try:
            event = FEEDBACK.validate_python(raw)
        except ValidationError as exc:
            problems = [(_field(tuple(e["loc"][1:])) if len(e["loc"]) > 1 else _field(tuple(e["loc"])), e["msg"]) for e in exc.errors()]
            problems = [(f, "does not apply to this kind of feedback" if m == "Extra inputs are not permitted" else m) for f, m in problems]
            raise ApiError(422, f"{body.kind}: " + "; ".join(f"{f}: {m}" for f, m in problems), problems[0][0], "invalid_value") from exc
        try:
            service.ledger.check(event)
        except FeedbackError as exc:
            raise ApiError(exc.status, str(exc), exc.field, "invalid_value") from exc
        written = await service.journal.write(event.model_dump(mode="json"))
        if written:
            service.ledger.add(event)
            if service.updates is not None:
                service.updates.note_feedback()
        return JSONResponse({"id": event.id, "written": written})  # no jsonable_encoder pass: the hot path under load

    @app.get("/feedback/repeat", tags=["hominem"])
    async def repeat(caller: Caller = Depends(authenticate)) -> dict[str, Any]:
        """Now and then (serving.repeat_rate) one of your earlier choices to make again, A and B swapped."""
        return {"repeat": service.ledger.repeat_for(caller.rater, s.repeat_rate, service.rng)}

    @app.get("/feedback/next", tags=["hominem"])
    async def next_question(caller: Caller = Depends(authenticate)) -> dict[str, Any]:
        """The next pair to choose between, picked by what the reward model does not know (attunement.selection): its two
        replies are turns to answer with a `choice`; `reason` says why it was asked, `by` how (information, or random: the
        unbiased share). `question` is null once you have answered every pair of the pool."""
        if service.questions is None:
            raise ApiError(404, "this service has no question pool", None, "not_found")
        found = await asyncio.to_thread(service.questions.next, caller.rater)
        if found is None:
            return {"question": None, "reason": "you have answered every pair in the pool; import more with `hominem data import-questions`"}
        q = found["question"]
        messages = [{"role": r, "content": text(c)} for r, c in q.messages]
        sampling = {"question": q.id, "source": q.source, "by": found["by"], "value": round(found["value"], 4), "reason": found["reason"]}
        sides = {}
        for side, turn_id, reply, reward in (("a", q.turn_ids()[0], q.a, found["a_reward"]), ("b", q.turn_ids()[1], q.b, found["b_reward"])):
            if turn_id not in service.ledger.turns:  # asked before (of anyone): the same turns, nothing new written
                turn = Turn(id=turn_id, time=utc_now().isoformat(), rater=caller.rater, messages=messages, reply=text(reply), model="question",
                            adapter=None, reward_model=service.reward_label if reward else None, reward=reward, sampling=sampling, finish_reason="stop",
                            completion_tokens=0, context=context_digest(messages))  # type: ignore[arg-type]
                await service.journal.write(turn.model_dump(mode="json"))
                service.ledger.add(turn)
            sides[side] = {"turn": turn_id, "text": service.ledger.turns[turn_id].reply, "reward": reward}
        return {"question": {"id": q.id, "messages": messages, "source": q.source, **sides}, "by": found["by"], "reason": found["reason"],
                "value": found["value"], "parts": found["parts"], "p_a": found["p_a"], "pool": found["pool"], "answered": found["answered"]}

    @app.get("/feedback/consistency", tags=["hominem"])
    async def consistency(caller: Caller = Depends(authenticate)) -> dict[str, Any]:
        """Your choices, how many were asked again, and the share you answered the same way."""
        mine = service.ledger.consistency(caller.rater).get(caller.rater, {"choices": 0, "repeats": 0, "consistent": 0, "consistency": None})
        return {"rater": caller.rater, **mine}

    @app.get("/admin/raters", tags=["admin"])
    async def raters(request: Request, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """Every rater's consistency (admin)."""
        access.audit("read_raters", rater=caller.rater)
        return {"raters": service.ledger.consistency()}

    @app.get("/admin/audit", tags=["admin"])
    async def audit(caller: Caller = Depends(admin)) -> dict[str, Any]:
        """The audit log (admin)."""
        access.audit("read_audit", rater=caller.rater)
        return {"entries": access.audit_entries()}

    # -- the live adapter (admin) ------------------------------------------------------------------

    def live_state():
        from hominem_pipeline.core.online.live import LiveState

        if service.config is None:
            raise ApiError(404, "this service was started without a project config; use `hominem live` on the project", None, "not_found")
        return LiveState(service.config.data_dir)

    async def live_change(caller: Caller, action: str, change) -> dict[str, Any]:
        """Apply a live-state change in a thread (a promotion runs the gate), audit it, and swap at once
        if the service follows the pointer."""
        from hominem_pipeline.core.online.live import LiveError

        try:
            result = await asyncio.to_thread(change)
        except LiveError as exc:
            access.audit(f"live_{action}_refused", rater=caller.rater, reason=str(exc))
            raise ApiError(409, str(exc), None, "conflict") from None
        if service.live is not None:
            await asyncio.to_thread(service.live.follow)
        return result

    @app.get("/admin/live", tags=["admin"])
    async def live_status(caller: Caller = Depends(admin)) -> dict[str, Any]:
        """The live adapter, what this service answers with, the refused candidates and the latest history (admin)."""
        from hominem_pipeline.core.online.promotion import describe

        state = live_state()
        return {"live": describe(state.current()), "serving": service.adapter_label, "candidates": state.candidates()[:20], "history": state.history()[-20:],
                "updates": None if service.updates is None else service.updates.status()}

    @app.post("/admin/live/update", tags=["admin"], status_code=202)
    async def live_update(body: LiveRequest, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """Start an online update of the live adapter now (admin): a short `dual` update on a replay batch,
        through the fast-loop gate; GET /admin/live shows it running and its outcome."""
        if service.updates is None:
            raise ApiError(409, "this service does not follow the live adapter (started with --adapter other than `live`), so it runs no online updates",
                           None, "conflict")
        access.audit("live_update", rater=caller.rater, reason=body.reason)
        if not service.updates.request(body.reason or "asked for through the service", f"admin:{caller.rater}"):
            raise ApiError(409, "an online update is already running or asked for; GET /admin/live shows it", None, "conflict")
        return {"started": True, "updates": service.updates.status()}

    @app.post("/admin/live/promote", tags=["admin"])
    async def live_promote(body: LiveRequest, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """Gate adapter `version` against the live one and make it live if it passes (admin); 409 with the
        reasons when it stays a candidate."""
        from hominem_pipeline.core.online.promotion import promote_version

        if not body.version:
            raise ApiError(422, "promote needs the adapter's version (`hominem live status` lists them)", "version", "invalid_value")
        access.audit("live_promote", rater=caller.rater, version=body.version, reason=body.reason)
        offer = await live_change(caller, "promote", lambda: promote_version(service.config, body.version, by=f"admin:{caller.rater}",
                                                                             reason=body.reason or "promoted through the service"))
        if not offer.promoted:
            raise ApiError(409, f"{body.version} stays a candidate: " + "; ".join(offer.report.reasons), "version", "gate_failed")
        return {"live": body.version, "serving": service.adapter_label, "gate": offer.report.as_dict()}

    @app.post("/admin/live/rollback", tags=["admin"])
    async def live_rollback(body: LiveRequest, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """Make the adapter live before the current one (or `version`) live again (admin)."""
        access.audit("live_rollback", rater=caller.rater, version=body.version, reason=body.reason)
        from hominem_pipeline.core.online.promotion import rollback

        live_state()  # 404 without a project config
        live = await live_change(caller, "rollback", lambda: rollback(service.config, body.version, reason=body.reason or "rolled back through the service",
                                                                      by=f"admin:{caller.rater}"))
        return {"live": live.version or "base", "serving": service.adapter_label}

    @app.post("/admin/live/freeze", tags=["admin"])
    async def live_freeze(body: LiveRequest, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """Stop online updates and promotions (admin)."""
        access.audit("live_freeze", rater=caller.rater, reason=body.reason)
        live = await live_change(caller, "freeze", lambda: live_state().freeze(reason=body.reason or "frozen through the service", by=f"admin:{caller.rater}"))
        return {"live": live.version or "base", "frozen": live.frozen}

    @app.post("/admin/live/unfreeze", tags=["admin"])
    async def live_unfreeze(body: LiveRequest, caller: Caller = Depends(admin)) -> dict[str, Any]:
        """Resume online updates and promotions (admin)."""
        access.audit("live_unfreeze", rater=caller.rater, reason=body.reason)
        live = await live_change(caller, "unfreeze", lambda: live_state().unfreeze(reason=body.reason or "", by=f"admin:{caller.rater}"))
        return {"live": live.version or "base", "frozen": live.frozen}

    @app.get("/healthz", tags=["hominem"])
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "adapter": service.adapter_label, "reward_model": service.reward_label, "waiting": engine.waiting, "running": engine.running,
                "batches": engine.batches, "largest_batch": engine.largest_batch, "uptime_seconds": round(time.time() - service.started, 1), "auth": "open (loopback)" if access.open else "bearer tokens"}

    @app.get("/config", tags=["hominem"])
    async def page_config() -> dict[str, Any]:
        """What the page needs: the dimensions, the emotion tags, whether a token is needed."""
        from hominem_pipeline.core.online.events import EMOTION_TAGS, STRENGTHS

        return {"dimensions": service.ledger.dimensions, "emotion_tags": list(EMOTION_TAGS), "strengths": list(STRENGTHS),
                "token_required": not access.open, "adapter": service.adapter_label, "reward_model": service.reward_label}

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _finish(job: Job) -> str:
    return "length" if job.finish_reason == "length" else "stop"
