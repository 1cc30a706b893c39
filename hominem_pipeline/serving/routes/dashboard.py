"""The dashboard (`/dashboard`, linked from the feedback page): timeline, calibration, drift and error
clusters, compare, probe and the RHI's meaning, over the project's files (`core.dashboard`). Read-only;
its data needs the same tokens as the rest of the service."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import FileResponse

from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import ApiError, Service, authenticate, get_service
from hominem_pipeline.serving.protocol import (
    Attribution,
    CalibrationView,
    Comparison,
    DriftView,
    HealthView,
    Options,
    ProbeRequest,
    ProbeScores,
    ReplyRequest,
    Rewrites,
    SideBySide,
    Timeline,
)

STATIC = Path(__file__).resolve().parents[1] / "static"

router = APIRouter(tags=["dashboard"])


def _project(service: Service) -> Any:
    """The project's DashboardData; 404 for a service started without a project config."""
    if service.dashboard is None:
        raise ApiError(
            404,
            "this service was started without a project config; the dashboard reads a project's data folder",
            None,
            "not_found",
        )
    return service.dashboard


async def _view(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)  # file reads off the event loop


@router.get("/dashboard", include_in_schema=False)
def page() -> FileResponse:
    return FileResponse(STATIC / "dashboard.html")


@router.get("/dashboard/api/timeline", response_model=Timeline)
async def timeline(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """Per day: agreement with people, ECE, RHI and its components, win rate, facts kept; live promotions and
    rollbacks."""
    return await _view(_project(service).timeline)


@router.get("/dashboard/api/calibration", response_model=CalibrationView)
async def calibration(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """Reliability curves per reward-model version, people's choices and the judge's pairs apart."""
    return await _view(_project(service).calibration)


@router.get("/dashboard/api/drift", response_model=DriftView)
async def drift(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """The newest drift report and error clusters; a rater sees the examples of their own pairs alone, an admin
    everyone's."""
    return await _view(_project(service).drift, None if caller.admin else caller.rater)


@router.get("/dashboard/api/health", response_model=HealthView)
async def health(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """The RHI, its components and what they mean, and what the fast loop did."""
    return await _view(_project(service).health)


@router.get("/dashboard/api/options", response_model=Options)
async def options(caller: Caller = Depends(authenticate), service: Service = Depends(get_service)) -> Any:
    """The reward models and adapters a comparison can pick."""
    return await _view(_project(service).options)


@router.get("/dashboard/api/compare", response_model=Comparison)
async def compare(
    kind: str, a: str, b: str, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> Any:
    """Two reward models (their probing suites) or two adapters (their evaluations) side by side."""
    try:
        return await _view(_project(service).compare, kind, a, b)
    except ValueError as exc:
        raise ApiError(422, str(exc), "kind", "invalid_value") from None


def _scorer(service: Service) -> Any:
    if service.engine.reward is None:
        raise ApiError(
            409,
            "no reward model is served; start `hominem serve --reward-model latest` to probe",
            None,
            "no_reward_model",
        )
    return service.engine.reward


async def _on_engine(service: Service, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(reward_model, *args)` on the engine's worker (between generation batches); bad text is a 422."""
    reward = _scorer(service)
    try:
        return await asyncio.wrap_future(service.engine.run(lambda: fn(reward, *args)))
    except ValueError as exc:
        raise ApiError(422, str(exc), "replies", "invalid_value") from None


@router.get("/dashboard/api/compare/score", response_model=SideBySide)
async def compare_score(
    a: str,
    b: str,
    start: int = Query(0, ge=0),
    count: int = Query(2, ge=1, le=50),
    caller: Caller = Depends(authenticate),
    service: Service = Depends(get_service),
) -> Any:
    """Two adapters' replies to the prompts both evaluations share, `count` prompts from `start` (a reply the
    served reward model has not read costs it about 0.3 s: the page asks in parts), scored by the served reward
    model (one scale for both): per prompt both scalars, P(b preferred) and each dimension's change b - a."""
    from hominem_pipeline.core.dashboard.probe import score_side_by_side

    _scorer(service)
    replies = await _view(_project(service).adapter_replies, a, b)
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
    out = await _on_engine(
        service,
        score_side_by_side,
        list(part["prompt"]),
        list(part["adapter_response_a"]),
        list(part["adapter_response_b"]),
    )
    return {**out, "a": a, "b": b, "start": start, "total": len(replies), "reward_model": service.reward_label}


@router.post("/dashboard/api/probe", response_model=ProbeScores)
async def probe(
    body: ProbeRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> Any:
    """Each reply's vector, people's score and scalar by the served reward model, and P(the first preferred)."""
    from hominem_pipeline.core.dashboard.probe import probe_scores

    return await _on_engine(service, probe_scores, body.prompt, body.replies)


@router.post("/dashboard/api/probe/attribution", response_model=Attribution)
async def attribution(
    body: ReplyRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> Any:
    """One reply's attribution by occlusion (at most five spans)."""
    from hominem_pipeline.core.dashboard.probe import probe_attribution

    return await _on_engine(service, probe_attribution, body.prompt, body.reply, body.words)


@router.post("/dashboard/api/probe/rewrites", response_model=Rewrites)
async def rewrites(
    body: ReplyRequest, caller: Caller = Depends(authenticate), service: Service = Depends(get_service)
) -> Any:
    """How meaning-preserving rewrites of one reply (and frames around the message) move its scores."""
    from hominem_pipeline.core.dashboard.probe import probe_rewrites

    return await _on_engine(service, probe_rewrites, body.prompt, body.reply, body.changes)
