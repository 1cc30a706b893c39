"""The project's own endpoints: /generate (replies with their turn ids and scores), /turns (a reply written
elsewhere), /reward, /feedback and what the page asks through it (/feedback/repeat, /feedback/next,
/feedback/consistency). A request is answered only after its events are on disk."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from hominem_pipeline.core.lm.generation import end_at_sentence
from hominem_pipeline.core.online.events import BASE, FEEDBACK, SERVED, Turn, context_digest
from hominem_pipeline.core.online.ledger import FeedbackError
from hominem_pipeline.core.online.log import utc_now
from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import ApiError, Kit, field_name, finish
from hominem_pipeline.serving.engine import wait
from hominem_pipeline.serving.schemas import FeedbackRequest, GenerateRequest, RewardRequest, TurnRequest


def router(kit: Kit) -> APIRouter:
    service, engine, s = kit.service, kit.service.engine, kit.service.settings
    api = APIRouter(tags=["hominem"])

    @api.post("/generate")
    async def generate(body: GenerateRequest, caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Replies from the served adapter (or the base), each with its turn id and reward."""
        adapter = body.adapter and service.adapter_label is not None
        messages = [m.plain() for m in body.messages or []]
        plan = kit.sampling(body.max_tokens, body.temperature, body.top_p, body.seed)
        jobs = kit.submit(messages, plan, adapter, body.n)
        await asyncio.gather(*(wait(j.future) for j in jobs))
        # the page shows whole replies: one cut by the token limit ends at its last sentence (the log keeps what was
        # shown)
        for job in jobs:
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
        turns = await kit.record(
            caller, messages, jobs, SERVED if adapter else BASE, adapter, plan, body.session, rewards
        )
        return {
            "adapter": jobs[0].adapter_label if jobs else None,
            "reward_model": service.reward_label,
            "replies": [
                {
                    "turn": t.id,
                    "text": j.sent,
                    "finish_reason": finish(j),
                    "completion_tokens": len(j.ids),
                    "reward": r,
                }
                for j, t, r in zip(jobs, turns, rewards)
            ],
        }

    @api.post("/turns")
    async def turns(body: TurnRequest, caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Record a reply written elsewhere (another model, a person) as a turn, so that it can be rated
        and compared with /feedback like the service's own."""
        messages = [
            {"role": m["role"], "content": kit.text(m["content"])} for m in (x.plain() for x in body.messages or [])
        ]
        tokens = await wait(engine.run(lambda: engine.count_tokens(body.reply)))  # the tokenizer is the worker's alone
        turn = Turn(
            id=uuid.uuid4().hex,
            time=utc_now().isoformat(),
            rater=caller.rater,
            session=body.session,
            messages=messages,
            reply=kit.text(body.reply),
            model=body.author,
            adapter=None,
            sampling={},
            finish_reason="stop",
            completion_tokens=tokens,
            context=context_digest(messages),
        )  # type: ignore[arg-type]
        await service.journal.write(turn.model_dump(mode="json"))
        service.ledger.add(turn)
        return {"turn": turn.id}

    @api.post("/reward")
    async def reward(body: RewardRequest, caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """The reward model's scores (vector, scalar, reward_intensity, safety_score, uncertainty) per reply."""
        if engine.reward is None:
            raise ApiError(
                503,
                "no reward model is served (serving.reward_model is null, or none is built); start with "
                "--reward-model PATH",
                None,
                "no_reward_model",
            )
        pairs = body.pairs()
        for i, p in enumerate(pairs):
            if not p.response.strip():
                raise ApiError(
                    422,
                    f"item {i}: the response is blank; there is nothing to score",
                    f"items.{i}.response" if body.items else "response",
                )
        scores = await wait(engine.score([p.prompt for p in pairs], [p.response for p in pairs]))
        return {"reward_model": service.reward_label, "scores": scores}

    @api.post("/feedback")
    async def feedback(body: FeedbackRequest, caller: Caller = Depends(kit.authenticate)) -> JSONResponse:
        """Record feedback on turns: thumb, choice (A over B, strength, note), nudge, emotion labels."""
        raw = {k: v for k, v in body.model_dump().items() if v is not None}
        raw.setdefault("id", uuid.uuid4().hex)
        raw |= {"time": utc_now().isoformat(), "rater": caller.rater}
        if "note" in raw:
            raw["note"] = kit.text(raw["note"])
        try:
            event = FEEDBACK.validate_python(raw)
        except ValidationError as exc:
            problems = [
                (field_name(tuple(e["loc"][1:])) if len(e["loc"]) > 1 else field_name(tuple(e["loc"])), e["msg"])
                for e in exc.errors()
            ]
            problems = [
                (f, "does not apply to this kind of feedback" if m == "Extra inputs are not permitted" else m)
                for f, m in problems
            ]
            raise ApiError(
                422, f"{body.kind}: " + "; ".join(f"{f}: {m}" for f, m in problems), problems[0][0], "invalid_value"
            ) from exc
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

    @api.get("/feedback/repeat")
    async def repeat(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Now and then (serving.repeat_rate) one of your earlier choices to make again, A and B swapped."""
        return {"repeat": service.ledger.repeat_for(caller.rater, s.repeat_rate, service.rng)}

    @api.get("/feedback/next")
    async def next_question(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """The next pair to choose between, picked by what the reward model does not know (attunement.selection):
        its two replies are turns to answer with a `choice`; `reason` says why it was asked, `by` how (information,
        or random: the unbiased share). `question` is null once you have answered every pair of the pool."""
        if service.questions is None:
            raise ApiError(404, "this service has no question pool", None, "not_found")
        found = await asyncio.to_thread(service.questions.next, caller.rater)
        if found is None:
            return {
                "question": None,
                "reason": "you have answered every pair in the pool; import more with `hominem data import-questions`",
            }
        q = found["question"]
        messages = [{"role": r, "content": kit.text(c)} for r, c in q.messages]
        sampling = {
            "question": q.id,
            "source": q.source,
            "by": found["by"],
            "value": round(found["value"], 4),
            "reason": found["reason"],
        }
        sides = {}
        for side, turn_id, reply, reward in (
            ("a", q.turn_ids()[0], q.a, found["a_reward"]),
            ("b", q.turn_ids()[1], q.b, found["b_reward"]),
        ):
            if turn_id not in service.ledger.turns:  # asked before (of anyone): the same turns, nothing new written
                turn = Turn(
                    id=turn_id,
                    time=utc_now().isoformat(),
                    rater=caller.rater,
                    messages=messages,
                    reply=kit.text(reply),
                    model="question",
                    adapter=None,
                    reward_model=service.reward_label if reward else None,
                    reward=reward,
                    sampling=sampling,
                    finish_reason="stop",
                    completion_tokens=0,
                    context=context_digest(messages),
                )  # type: ignore[arg-type]
                await service.journal.write(turn.model_dump(mode="json"))
                service.ledger.add(turn)
            sides[side] = {"turn": turn_id, "text": service.ledger.turns[turn_id].reply, "reward": reward}
        return {
            "question": {"id": q.id, "messages": messages, "source": q.source, **sides},
            "by": found["by"],
            "reason": found["reason"],
            "value": found["value"],
            "parts": found["parts"],
            "p_a": found["p_a"],
            "pool": found["pool"],
            "answered": found["answered"],
        }

    @api.get("/feedback/consistency")
    async def consistency(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Your choices, how many were asked again, and the share you answered the same way."""
        mine = service.ledger.consistency(caller.rater).get(
            caller.rater, {"choices": 0, "repeats": 0, "consistent": 0, "consistency": None}
        )
        return {"rater": caller.rater, **mine}

    return api
