"""The admin's endpoints (an admin token): every rater's consistency, the audit log, and the live adapter
(status, an online update now, promote, rollback, freeze, unfreeze); each change is audited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends

from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import ApiError, Service, get_service, require_admin
from hominem_pipeline.serving.protocol import (
    AuditResponse,
    LiveChange,
    LiveRequest,
    LiveStatus,
    RatersResponse,
    UpdateStarted,
)

router = APIRouter(tags=["admin"])


@router.get("/admin/raters", response_model=RatersResponse)
async def raters(caller: Caller = Depends(require_admin), service: Service = Depends(get_service)) -> RatersResponse:
    """Every rater's consistency (admin)."""
    service.access.audit("read_raters", rater=caller.rater)
    return RatersResponse(raters=service.ledger.consistency())


@router.get("/admin/audit", response_model=AuditResponse)
async def audit(caller: Caller = Depends(require_admin), service: Service = Depends(get_service)) -> AuditResponse:
    """The audit log (admin)."""
    service.access.audit("read_audit", rater=caller.rater)
    return AuditResponse(entries=service.access.audit_entries())


def _live_state(service: Service) -> Any:
    from hominem_pipeline.core.online.live import LiveState

    if service.config is None:
        raise ApiError(
            404,
            "this service was started without a project config; use `hominem live` on the project",
            None,
            "not_found",
        )
    return LiveState(service.config.data_dir)


async def _change(service: Service, caller: Caller, action: str, change: Callable[[], Any]) -> Any:
    """Apply a live-state change in a thread (a promotion runs the gate), audit a refusal, and swap at once if the
    service follows the pointer."""
    from hominem_pipeline.core.online.live import LiveError

    try:
        result = await asyncio.to_thread(change)
    except LiveError as exc:
        service.access.audit(f"live_{action}_refused", rater=caller.rater, reason=str(exc))
        raise ApiError(409, str(exc), None, "conflict") from None
    if service.live is not None:
        await asyncio.to_thread(service.live.follow)
    return result


@router.get("/admin/live", response_model=LiveStatus)
async def live_status(caller: Caller = Depends(require_admin), service: Service = Depends(get_service)) -> LiveStatus:
    """The live adapter, what this service answers with, the refused candidates and the latest history (admin)."""
    from hominem_pipeline.core.online.promotion import describe

    state = _live_state(service)
    return LiveStatus(
        live=describe(state.current()),
        serving=service.adapter_label,
        candidates=state.candidates()[:20],
        history=state.history()[-20:],
        updates=None if service.updates is None else service.updates.status(),
    )


@router.post("/admin/live/update", status_code=202, response_model=UpdateStarted)
async def live_update(
    body: LiveRequest, caller: Caller = Depends(require_admin), service: Service = Depends(get_service)
) -> UpdateStarted:
    """Start an online update of the live adapter now (admin): a short `dual` update on a replay batch,
    through the fast-loop gate; GET /admin/live shows it running and its outcome."""
    if service.updates is None:
        raise ApiError(
            409,
            "this service does not follow the live adapter (started with --adapter other than "
            "`live`), so it runs no online updates",
            None,
            "conflict",
        )
    service.access.audit("live_update", rater=caller.rater, reason=body.reason)
    if not service.updates.request(body.reason or "asked for through the service", f"admin:{caller.rater}"):
        raise ApiError(
            409, "an online update is already running or asked for; GET /admin/live shows it", None, "conflict"
        )
    return UpdateStarted(started=True, updates=service.updates.status())


@router.post("/admin/live/promote", response_model=LiveChange, response_model_exclude_unset=True)
async def live_promote(
    body: LiveRequest, caller: Caller = Depends(require_admin), service: Service = Depends(get_service)
) -> LiveChange:
    """Gate adapter `version` against the live one and make it live if it passes (admin); 409 with the
    reasons when it stays a candidate."""
    from hominem_pipeline.core.online.promotion import promote_version

    if not body.version:
        raise ApiError(
            422, "promote needs the adapter's version (`hominem live status` lists them)", "version", "invalid_value"
        )
    service.access.audit("live_promote", rater=caller.rater, version=body.version, reason=body.reason)
    by, reason = f"admin:{caller.rater}", body.reason or "promoted through the service"
    offer = await _change(
        service, caller, "promote", lambda: promote_version(service.config, body.version, by=by, reason=reason)
    )
    if not offer.promoted:
        raise ApiError(
            409, f"{body.version} stays a candidate: " + "; ".join(offer.report.reasons), "version", "gate_failed"
        )
    return LiveChange(live=body.version, serving=service.adapter_label, gate=offer.report.as_dict())


@router.post("/admin/live/rollback", response_model=LiveChange, response_model_exclude_unset=True)
async def live_rollback(
    body: LiveRequest, caller: Caller = Depends(require_admin), service: Service = Depends(get_service)
) -> LiveChange:
    """Make the adapter live before the current one (or `version`) live again (admin)."""
    from hominem_pipeline.core.online.promotion import rollback

    service.access.audit("live_rollback", rater=caller.rater, version=body.version, reason=body.reason)
    _live_state(service)  # 404 without a project config
    by, reason = f"admin:{caller.rater}", body.reason or "rolled back through the service"
    live = await _change(
        service, caller, "rollback", lambda: rollback(service.config, body.version, reason=reason, by=by)
    )
    return LiveChange(live=live.version or "base", serving=service.adapter_label)


@router.post("/admin/live/freeze", response_model=LiveChange, response_model_exclude_unset=True)
async def live_freeze(
    body: LiveRequest, caller: Caller = Depends(require_admin), service: Service = Depends(get_service)
) -> LiveChange:
    """Stop online updates and promotions (admin)."""
    service.access.audit("live_freeze", rater=caller.rater, reason=body.reason)
    by, reason = f"admin:{caller.rater}", body.reason or "frozen through the service"
    live = await _change(service, caller, "freeze", lambda: _live_state(service).freeze(reason=reason, by=by))
    return LiveChange(live=live.version or "base", frozen=live.frozen)


@router.post("/admin/live/unfreeze", response_model=LiveChange, response_model_exclude_unset=True)
async def live_unfreeze(
    body: LiveRequest, caller: Caller = Depends(require_admin), service: Service = Depends(get_service)
) -> LiveChange:
    """Resume online updates and promotions (admin)."""
    service.access.audit("live_unfreeze", rater=caller.rater, reason=body.reason)
    by, reason = f"admin:{caller.rater}", body.reason or ""
    live = await _change(service, caller, "unfreeze", lambda: _live_state(service).unfreeze(reason=reason, by=by))
    return LiveChange(live=live.version or "base", frozen=live.frozen)
