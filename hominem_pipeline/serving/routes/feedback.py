"""The project's own endpoints: /generate (replies with their turn ids and scores), /turns (a reply written
elsewhere), /reward, /feedback and what the page asks through it (/feedback/repeat, /feedback/next,
/feedback/consistency). A request is answered only after its events are on disk."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from hominem_pipeline.core.attune.personal import distinct_replies
from hominem_pipeline.core.lm.generation import as_shown
from hominem_pipeline.core.online.events import BASE, FEEDBACK, SERVED, Choice, new_turn
from hominem_pipeline.core.online.ledger import FeedbackError
from hominem_pipeline.core.online.log import utc_now
from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import (
    ApiError,
    Asked,
    Service,
    authenticate,
    field_name,
    finish,
    get_service,
    kept_text,
    sampling_plan,
    submit,
    write_turns,
)
from hominem_pipeline.serving.engine import Request as Job
from hominem_pipeline.serving.engine import wait
from hominem_pipeline.serving.protocol import (
    ConsistencyResponse,
    FeedbackRequest,
    FeedbackResponse,
    Forgot,
    GeneratedReply,
    GenerateRequest,
    GenerateResponse,
    MyData,
    MyTaste,
    QuestionResponse,
    RepeatResponse,
    RewardRequest,
    RewardResponse,
    TurnRequest,
    TurnResponse,
)

log = logging.getLogger(__name__)
router = APIRouter(tags=["hominem"])


async def _rewards(service: Service, prompt: str, jobs: list[Job]) -> list[dict[str, Any] | None]:
    """The reward model's scores of each non-empty reply (None for the others)."""
    rewards: list[dict[str, Any] | None] = [None] * len(jobs)
    scored = [i for i, j in enumerate(jobs) if j.sent.strip()]
    if scored:
        outputs = await wait(service.engine.score([prompt] * len(scored), [jobs[i].sent for i in scored]))
        for i, output in zip(scored, outputs):
            rewards[i] = output
    return rewards


def _pool(service: Service, rater: str, n: int, plan: Any) -> int:
    """Replies to write for a request of `n`: `serving.pair_pool` for a pair (n=2, sampled) asked by a person whose
    taste model has `online.taste.min_choices` choices to go on; else `n`."""
    cfg = service.config
    if n != 2 or service.tastes is None or cfg is None or not plan.temperature or service.settings.pair_pool <= n:
        return n
    least = cfg.online.taste.min_choices
    return service.settings.pair_pool if least and len(service.tastes.choices_of(rater)) >= least else n


async def _surest(service: Service, rater: str, message: str, jobs: list[Job]) -> list[Job]:
    """Of the replies (distinct, not empty), the two the person's taste model ranks highest and lowest, in the order
    written: the pair it is surest they would choose between, so one that can show their taste; the first two when
    fewer differ."""
    model = await service.tastes.model(rater)
    keep = distinct_replies([job.sent for job in jobs])
    if len(keep) < 2:
        return jobs[:2]
    _, features = await service.tastes.features([message] * len(keep), [jobs[i].sent for i in keep])
    a, b, _ = model.surest(features)
    return [jobs[keep[min(a, b)]], jobs[keep[max(a, b)]]]


@router.post("/generate", response_model=GenerateResponse)
async def generate(
    body: GenerateRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> GenerateResponse:
    """Replies from the served adapter (or the base), each with its turn id and reward."""
    adapter = body.adapter and service.adapter_label is not None
    plan = sampling_plan(service, body.max_tokens, body.temperature, body.top_p, body.seed)
    asked = Asked([m.plain() for m in body.messages or []], SERVED if adapter else BASE, adapter, plan, body.session)
    pool = _pool(service, caller.rater, body.n, plan)
    jobs = submit(service, asked.messages, plan, adapter, body.n)
    if pool > body.n:  # more replies, half of them warmer, for the two their taste model would order most surely
        warmer = replace(
            plan, temperature=min(2.0, 1.5 * plan.temperature), seed=None if plan.seed is None else plan.seed + body.n
        )
        jobs += submit(service, asked.messages, warmer, adapter, pool - body.n)
    await asyncio.gather(*(wait(j.future) for j in jobs))
    # the page shows whole replies (generation.as_shown: one cut by the token limit ends at its last sentence; the
    # log keeps what was shown, its finish reason stays "length"); a pair is picked by what the person will read
    for job in jobs:
        job.sent, _ = as_shown(job.sent, job.finish_reason != "length")
    if pool > body.n:
        jobs = await _surest(service, caller.rater, asked.messages[-1]["content"], jobs)
    rewards: list[dict[str, Any] | None] = [None] * len(jobs)
    if body.score and service.engine.reward is not None:
        rewards = await _rewards(service, asked.messages[-1]["content"], jobs)
    turns = await write_turns(service, caller, asked, jobs, rewards)
    replies = [
        GeneratedReply(turn=t.id, text=j.sent, finish_reason=finish(j), completion_tokens=len(j.ids), reward=r)
        for j, t, r in zip(jobs, turns, rewards)
    ]
    return GenerateResponse(
        adapter=jobs[0].adapter_label if jobs else None, reward_model=service.reward_label, replies=replies
    )


@router.post("/turns", response_model=TurnResponse)
async def turns(
    body: TurnRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> TurnResponse:
    """Record a reply written elsewhere (another model, a person) as a turn, so that it can be rated
    and compared with /feedback like the service's own."""
    engine = service.engine
    plain = (m.plain() for m in body.messages or [])
    messages = [{"role": m["role"], "content": kept_text(service, m["content"])} for m in plain]
    tokens = await wait(engine.run(lambda: engine.count_tokens(body.reply)))  # the tokenizer is the worker's alone
    turn = new_turn(
        caller.rater,
        messages,
        kept_text(service, body.reply),
        session=body.session,
        model=body.author,
        completion_tokens=tokens,
    )
    await service.journal.write(turn.model_dump(mode="json"))
    service.ledger.add(turn)
    return TurnResponse(turn=turn.id)


@router.post("/reward", response_model=RewardResponse)
async def reward(
    body: RewardRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> RewardResponse:
    """The reward model's scores (vector, scalar, reward_intensity, safety_score, uncertainty) per reply."""
    if service.engine.reward is None:
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
            where = f"items.{i}.response" if body.items else "response"
            raise ApiError(422, f"item {i}: the response is blank; there is nothing to score", where)
    scores = await wait(service.engine.score([p.prompt for p in pairs], [p.response for p in pairs]))
    return RewardResponse(reward_model=service.reward_label, scores=scores)


def _event(body: FeedbackRequest, caller: Caller, service: Service) -> Any:
    """The feedback as a log event (its id, the time, the rater; its note kept as the log keeps text); 422 naming
    each field that does not fit its kind."""
    raw = {k: v for k, v in body.model_dump().items() if v is not None}
    raw.setdefault("id", uuid.uuid4().hex)
    raw |= {"time": utc_now().isoformat(), "rater": caller.rater}
    if "note" in raw:
        raw["note"] = kept_text(service, raw["note"])
    try:
        return FEEDBACK.validate_python(raw)
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


def _own_turns(event: Any, caller: Caller, service: Service) -> None:
    """403 for a rater's feedback on another person's turn (their conversation is theirs alone; a pair the service
    asked is everyone's to answer). An admin may give feedback on any turn."""
    if caller.admin:
        return
    fields = ("chosen", "rejected") if isinstance(event, Choice) else ("turn",)
    for name in fields:
        turn = service.ledger.turns.get(getattr(event, name))
        if turn is not None and turn.rater != caller.rater and turn.model != "question":
            service.access.audit("forbidden", path="/feedback", rater=caller.rater, turn=turn.id)
            raise ApiError(
                403,
                f"turn {turn.id!r} is another person's; give feedback on your own turns or on the pairs "
                "GET /feedback/next asks",
                name,
                "forbidden",
            )


@router.post("/feedback", response_model=FeedbackResponse)
async def feedback(
    body: FeedbackRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> JSONResponse:
    """Record feedback on turns: thumb, choice (A over B, strength, note), nudge, emotion labels."""
    event = _event(body, caller, service)
    _own_turns(event, caller, service)
    if isinstance(event, Choice) and service.questions is not None:
        asked = service.questions.asked_of(caller.rater, event.chosen, event.rejected)
        if asked is not None:
            event = event.model_copy(update={"asked": asked})
    try:
        service.ledger.check(event)
    except FeedbackError as exc:
        raise ApiError(exc.status, str(exc), exc.field, "invalid_value") from exc
    written = await service.journal.write(event.model_dump(mode="json"))
    if written:
        service.ledger.add(event)
        if service.updates is not None:
            service.updates.note_feedback()
    # a FeedbackResponse, sent as it is: no serialization pass on the hot path under load
    return JSONResponse({"id": event.id, "written": written})


@router.get("/feedback/repeat", response_model=RepeatResponse)
async def repeat(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> RepeatResponse:
    """Now and then (serving.repeat_rate) one of your earlier choices to make again, A and B swapped."""
    return RepeatResponse(repeat=service.ledger.repeat_for(caller.rater, service.settings.repeat_rate, service.rng))


async def _asked_turn(
    service: Service, caller: Caller, turn_id: str, messages: list, reply: str, **fields: Any
) -> str:
    """The reply of an asked pair as a turn (written once: a pair asked before, of anyone, is the same turns)."""
    if turn_id not in service.ledger.turns:
        turn = new_turn(caller.rater, messages, kept_text(service, reply), id=turn_id, model="question", **fields)
        await service.journal.write(turn.model_dump(mode="json"))
        service.ledger.add(turn)
    return service.ledger.turns[turn_id].reply


@router.get("/feedback/next", response_model=QuestionResponse, response_model_exclude_unset=True)
async def next_question(
    caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> QuestionResponse:
    """The next pair to choose between, picked by what the reward model does not know (attunement.selection):
    its two replies are turns to answer with a `choice`; `reason` says why it was asked, `by` how (information,
    or random: the unbiased share). `question` is null once you have answered every pair of the pool."""
    if service.questions is None:
        raise ApiError(404, "this service has no question pool", None, "not_found")
    found = await asyncio.to_thread(service.questions.next, caller.rater)
    if found is None:
        why = "you have answered every pair in the pool; import more with `hominem data import-questions`"
        return QuestionResponse(question=None, reason=why)
    q = found["question"]
    messages = [{"role": r, "content": kept_text(service, c)} for r, c in q.messages]
    sampling = {"question": q.id, "source": q.source, "by": found["by"], "value": round(found["value"], 4)}
    sampling["reason"] = found["reason"]
    sides = {}
    for side, turn_id, reply, scores in (
        ("a", q.turn_ids()[0], q.a, found["a_reward"]),
        ("b", q.turn_ids()[1], q.b, found["b_reward"]),
    ):
        rm = service.reward_label if scores else None
        shown = await _asked_turn(
            service, caller, turn_id, messages, reply, reward_model=rm, reward=scores, sampling=sampling
        )
        sides[side] = {"turn": turn_id, "text": shown, "reward": scores}
    return QuestionResponse(
        question={"id": q.id, "messages": messages, "source": q.source, **sides},
        **{k: found[k] for k in ("by", "reason", "value", "parts", "p_a", "pool", "answered")},
    )


@router.get("/feedback/consistency", response_model=ConsistencyResponse)
async def consistency(
    caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> ConsistencyResponse:
    """Your choices, how many were asked again, and the share you answered the same way."""
    empty = {"choices": 0, "repeats": 0, "consistent": 0, "consistency": None}
    mine = service.ledger.consistency(caller.rater).get(caller.rater, empty)
    return ConsistencyResponse(rater=caller.rater, **mine)


@router.get("/me/data", response_model=MyData)
async def my_data(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """Everything you gave: your turns, your feedback, and the preference pairs they make, each pair in the
    project's pair format (`config/schemas/preference-pair.json`, what `hominem data import-preferences --format
    jsonl` reads). Only your own: another person's words are never in it."""
    from hominem_pipeline.core.online.export import log_events, rater_data

    folder = service.journal.log.folder
    data = await asyncio.to_thread(lambda: rater_data(log_events(folder), caller.rater))
    service.access.audit("export_own_data", rater=caller.rater, pairs=len(data["pairs"]), turns=len(data["turns"]))
    return data


@router.get("/me/taste", response_model=MyTaste)
async def my_taste(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """What the service has learned of your taste from your choices (`core/attune/personal.py`): the features that
    lead it in plain words, how sure it is of each, and from how many choices. It reads what the served reward model
    says of each reply, and its length, questions, lists, apologies and exclamations. `update`: what the gate said of
    the newest update trained on your taste: whether it learned it, whether it is live, and what a refused one would
    have cost the student (its facts, recall, instructions kept, sameness, its health)."""
    from hominem_pipeline.core.attune.personal import NO_CHOICES

    if service.tastes is None or not service.tastes.choices_of(caller.rater):
        return {"rater": caller.rater, "choices": 0, "said": NO_CHOICES, "leanings": [], "features": []}
    model = await service.tastes.model(caller.rater)
    leanings = [x.__dict__ | {"words": x.words} for x in model.leading(5)]
    example = update = None
    if service.config is not None:
        from hominem_pipeline.core.online.live import LiveError
        from hominem_pipeline.core.online.taste_pairs import before_and_after

        taught = {m for m, _, _ in service.tastes.choices_of(caller.rater)}
        engine = service.engine
        try:  # both read the live state; what the person's choices say reaches them even when it cannot be read
            example = await wait(engine.run(lambda: before_and_after(service.config, model, engine.reward, taught)))
            update = await asyncio.to_thread(_taste_update, service.config.data_dir, caller.rater)
        except LiveError as exc:
            log.warning("GET /me/taste: no example or update reported, the live state cannot be read: %s", exc)
    return {
        "rater": caller.rater,
        "choices": model.choices,
        "said": model.describe(),
        "leanings": leanings,
        "features": list(model.names),
        "example": example,
        "update": update,
    }


def _taste_update(data_dir: Any, rater: str) -> dict[str, Any] | None:
    from hominem_pipeline.core.online.gate_person import taste_verdict
    from hominem_pipeline.core.online.live import LiveState

    state = LiveState(data_dir)
    return taste_verdict(state.history(), rater, state.current().version)


@router.delete("/me/data", response_model=Forgot)
async def forget_me(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """Forget everything you gave: a tombstone in the log (from then on nothing reads your events), then your words
    out of every file of the data folder (the log, the history index, memory files, caches, and the built versions
    that hold them, which the next run builds again). `GET /me/data` first if you want a copy. What could not be
    removed is listed, for the operator."""
    from hominem_pipeline.core.online.forget import forget

    if service.config is None:
        raise ApiError(503, "this service runs without a project configuration: nothing to forget from")
    report = await asyncio.to_thread(forget, service.config, caller.rater, caller.rater, service.journal.log)
    service.ledger.forget(caller.rater)
    if service.questions is not None:
        service.questions.forget(caller.rater)
    if service.tastes is not None:
        service.tastes.forget(caller.rater)
    service.access.audit(
        "forget_own_data", rater=caller.rater, events=report.events, removed=len(report.removed), left=len(report.left)
    )
    return {
        "rater": caller.rater,
        "forgotten_at": report.time,
        "events": report.events,
        "removed": report.removed,
        "rebuild": report.rebuild,
        "left": report.left,
    }
