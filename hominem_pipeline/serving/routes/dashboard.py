"""The dashboard (`/dashboard`, linked from the feedback page): timeline, calibration, drift and error
clusters, compare, probe and the RHI's meaning, over the project's files (`core.dashboard`). Read-only;
its data needs the same tokens as the rest of the service."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import ApiError, Kit

STATIC = Path(__file__).resolve().parents[1] / "static"


class ProbeRequest(BaseModel):
    prompt: str = Field(min_length=1, max_length=8000, description="The person's message.")
    replies: list[str] = Field(min_length=1, max_length=4, description="One to four replies to score.")


class ReplyRequest(BaseModel):
    prompt: str = Field(min_length=1, max_length=8000, description="The person's message.")
    reply: str = Field(min_length=1, max_length=8000, description="The reply to explain or rewrite.")
    words: int = Field(
        default=2,
        ge=1,
        le=20,
        description="Words left out together per occluded span (more for a long reply: at most five spans).",
    )
    changes: list[str] | None = Field(
        default=None,
        description="The rewrites to make (typos, paraphrase, insertion, reorder, polite_frame, rude_frame); "
        "default: all.",
    )


def router(kit: Kit) -> APIRouter:
    from hominem_pipeline.core.dashboard.views import DashboardData

    service = kit.service
    api = APIRouter(tags=["dashboard"])
    data = DashboardData(service.config.data_dir) if service.config is not None else None

    def project() -> DashboardData:
        if data is None:
            raise ApiError(
                404,
                "this service was started without a project config; the dashboard reads a project's data folder",
                None,
                "not_found",
            )
        return data

    async def view(fn, *args) -> dict[str, Any]:
        return await asyncio.to_thread(fn, *args)  # file reads off the event loop

    @api.get("/dashboard", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "dashboard.html")

    @api.get("/dashboard/api/timeline")
    async def timeline(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Per day: agreement with people, ECE, RHI and its components, win rate, facts kept; live promotions and
        rollbacks."""
        return await view(project().timeline)

    @api.get("/dashboard/api/calibration")
    async def calibration(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Reliability curves per reward-model version, people's choices and the judge's pairs apart."""
        return await view(project().calibration)

    @api.get("/dashboard/api/drift")
    async def drift(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """The newest drift report and error clusters."""
        return await view(project().drift)

    @api.get("/dashboard/api/health")
    async def health(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """The RHI, its components and what they mean, and what the fast loop did."""
        return await view(project().health)

    @api.get("/dashboard/api/options")
    async def options(caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """The reward models and adapters a comparison can pick."""
        return await view(project().options)

    @api.get("/dashboard/api/compare")
    async def compare(kind: str, a: str, b: str, caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Two reward models (their probing suites) or two adapters (their evaluations) side by side."""
        try:
            return await view(project().compare, kind, a, b)
        except ValueError as exc:
            raise ApiError(422, str(exc), "kind", "invalid_value") from None

    def scorer():
        if service.engine.reward is None:
            raise ApiError(
                409,
                "no reward model is served; start `hominem serve --reward-model latest` to probe",
                None,
                "no_reward_model",
            )
        return service.engine.reward

    async def on_engine(fn, *args) -> dict[str, Any]:
        """`fn(reward_model, *args)` on the engine's worker (between generation batches); bad text is a 422."""
        reward = scorer()
        try:
            return await asyncio.wrap_future(service.engine.run(lambda: fn(reward, *args)))
        except ValueError as exc:
            raise ApiError(422, str(exc), "replies", "invalid_value") from None

    @api.get("/dashboard/api/compare/score")
    async def compare_score(
        a: str,
        b: str,
        start: int = Query(0, ge=0),
        count: int = Query(2, ge=1, le=50),
        caller: Caller = Depends(kit.authenticate),
    ) -> dict[str, Any]:
        """Two adapters' replies to the prompts both evaluations share, `count` prompts from `start` (a reply the
        served reward model has not read costs it about 0.3 s: the page asks in parts), scored by the served reward
        model (one scale for both): per prompt both scalars, P(b preferred) and each dimension's change b - a."""
        from hominem_pipeline.core.dashboard.probe import score_side_by_side

        scorer()
        replies = await view(project().adapter_replies, a, b)
        if replies is None or replies.empty:
            raise ApiError(
                404,
                f"no evaluation replies shared by {a!r} and {b!r}; pick two adapters from /dashboard/api/options",
                "a",
                "not_found",
            )
        if start >= len(replies):
            raise ApiError(
                422,
                f"start is {start}, but the two adapters share {len(replies)} prompts; start below that",
                "start",
                "invalid_value",
            )
        part = replies.iloc[start : start + count]
        out = await on_engine(
            score_side_by_side,
            list(part["prompt"]),
            list(part["adapter_response_a"]),
            list(part["adapter_response_b"]),
        )
        return {**out, "a": a, "b": b, "start": start, "total": len(replies), "reward_model": service.reward_label}

    @api.post("/dashboard/api/probe")
    async def probe(body: ProbeRequest, caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """Each reply's vector, people's score and scalar by the served reward model, and P(the first preferred)."""
        from hominem_pipeline.core.dashboard.probe import probe_scores

        return await on_engine(probe_scores, body.prompt, body.replies)

    @api.post("/dashboard/api/probe/attribution")
    async def attribution(body: ReplyRequest, caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """One reply's attribution by occlusion (at most five spans)."""
        from hominem_pipeline.core.dashboard.probe import probe_attribution

        return await on_engine(probe_attribution, body.prompt, body.reply, body.words)

    @api.post("/dashboard/api/probe/rewrites")
    async def rewrites(body: ReplyRequest, caller: Caller = Depends(kit.authenticate)) -> dict[str, Any]:
        """How meaning-preserving rewrites of one reply (and frames around the message) move its scores."""
        from hominem_pipeline.core.dashboard.probe import probe_rewrites

        return await on_engine(probe_rewrites, body.prompt, body.reply, body.changes)

    return api
