"""`hominem history` through the service: the preference history index's three questions, each answered only with the
caller's own rows (an admin's token: anyone's). `hominem history ... --server URL` asks here."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import ApiError, Service, authenticate, get_service
from hominem_pipeline.serving.protocol import HistoryPage

router = APIRouter(tags=["history"])


def _index(service: Service) -> Any:
    """The project's index, brought up to date with the log (opened at the first question)."""
    if service.config is None:
        raise ApiError(503, "this service runs without a project configuration: it has no history index")
    if service.history is None:
        from hominem_pipeline.core.online.history import HistoryIndex, index_url

        service.history = HistoryIndex(index_url(service.config.history.url, service.config.data_dir))
    service.history.update(service.journal.log.folder)
    return service.history


async def _page(service: Service, ask: Any) -> dict[str, Any]:
    page = await asyncio.to_thread(lambda: ask(_index(service)))
    return {"total": page.total, "rows": page.rows, "seconds": page.seconds}


@router.get("/history/choices", response_model=HistoryPage)
async def choices(
    request: Request,
    rater: str | None = Query(default=None, description="Whose choices (an admin's token only); default: yours."),
    limit: int = Query(default=20, ge=1, le=1000),
    caller: Caller = Depends(authenticate),
    service: Service = Depends(get_service),
) -> Any:
    """Your choices between two replies, newest first, with the message and both replies."""
    whose = rater or caller.rater
    if whose != caller.rater and not caller.admin:
        service.access.audit("forbidden", path=request.url.path, rater=caller.rater, asked_for=whose)
        raise ApiError(403, "another person's choices need an admin token; leave out `rater` for yours", "rater")
    return await _page(service, lambda index: index.choices_of_rater(whose, limit))


@router.get("/history/turns", response_model=HistoryPage)
async def turns(
    version: str = Query(description="The adapter version that wrote them (`base`: the student alone)."),
    limit: int = Query(default=20, ge=1, le=1000),
    caller: Caller = Depends(authenticate),
    service: Service = Depends(get_service),
) -> Any:
    """The turns an adapter version served you (an admin: everyone), newest first."""
    only = None if caller.admin else caller.rater
    return await _page(service, lambda index: index.turns_of_version(version, limit, only))


@router.get("/history/pairs", response_model=HistoryPage)
async def pairs(
    domain: str = Query(description="A seed category, e.g. emotional_support."),
    limit: int = Query(default=20, ge=1, le=1000),
    caller: Caller = Depends(authenticate),
    service: Service = Depends(get_service),
) -> Any:
    """Your choices on conversations of a domain (an admin: everyone's), newest first."""
    only = None if caller.admin else caller.rater
    return await _page(service, lambda index: index.pairs_of_domain(domain, limit, only))
