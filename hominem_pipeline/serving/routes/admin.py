"""The admin's endpoints (an admin token): every rater's consistency, the audit log, and the live adapter
(status, an online update now, promote, rollback, freeze, unfreeze); each change is audited."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request

from hominem_pipeline.serving.auth import Caller
from hominem_pipeline.serving.common import ApiError, Kit
from hominem_pipeline.serving.schemas import LiveRequest


def router(kit: Kit) -> APIRouter:
    service, access = kit.service, kit.service.access
    api = APIRouter(tags=["admin"])

    @api.get("/admin/raters")
    async def raters(request: Request, caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
        """Every rater's consistency (admin)."""
        access.audit("read_raters", rater=caller.rater)
        return {"raters": service.ledger.consistency()}

    @api.get("/admin/audit")
    async def audit(caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
        """The audit log (admin)."""
        access.audit("read_audit", rater=caller.rater)
        return {"entries": access.audit_entries()}

    def live_state():
        from hominem_pipeline.core.online.live import LiveState

        if service.config is None:
            raise ApiError(
                404,
                "this service was started without a project config; use `hominem live` on the project",
                None,
                "not_found",
            )
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

    @api.get("/admin/live")
    async def live_status(caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
        """The live adapter, what this service answers with, the refused candidates and the latest history (admin)."""
        from hominem_pipeline.core.online.promotion import describe

        state = live_state()
        return {
            "live": describe(state.current()),
            "serving": service.adapter_label,
            "candidates": state.candidates()[:20],
            "history": state.history()[-20:],
            "updates": None if service.updates is None else service.updates.status(),
        }

    @api.post("/admin/live/update", status_code=202)
    async def live_update(body: LiveRequest, caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
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
        access.audit("live_update", rater=caller.rater, reason=body.reason)
        if not service.updates.request(body.reason or "asked for through the service", f"admin:{caller.rater}"):
            raise ApiError(
                409, "an online update is already running or asked for; GET /admin/live shows it", None, "conflict"
            )
        return {"started": True, "updates": service.updates.status()}

    @api.post("/admin/live/promote")
    async def live_promote(body: LiveRequest, caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
        """Gate adapter `version` against the live one and make it live if it passes (admin); 409 with the
        reasons when it stays a candidate."""
        from hominem_pipeline.core.online.promotion import promote_version

        if not body.version:
            raise ApiError(
                422,
                "promote needs the adapter's version (`hominem live status` lists them)",
                "version",
                "invalid_value",
            )
        access.audit("live_promote", rater=caller.rater, version=body.version, reason=body.reason)
        offer = await live_change(
            caller,
            "promote",
            lambda: promote_version(
                service.config,
                body.version,
                by=f"admin:{caller.rater}",
                reason=body.reason or "promoted through the service",
            ),
        )
        if not offer.promoted:
            raise ApiError(
                409, f"{body.version} stays a candidate: " + "; ".join(offer.report.reasons), "version", "gate_failed"
            )
        return {"live": body.version, "serving": service.adapter_label, "gate": offer.report.as_dict()}

    @api.post("/admin/live/rollback")
    async def live_rollback(body: LiveRequest, caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
        """Make the adapter live before the current one (or `version`) live again (admin)."""
        access.audit("live_rollback", rater=caller.rater, version=body.version, reason=body.reason)
        from hominem_pipeline.core.online.promotion import rollback

        live_state()  # 404 without a project config
        live = await live_change(
            caller,
            "rollback",
            lambda: rollback(
                service.config,
                body.version,
                reason=body.reason or "rolled back through the service",
                by=f"admin:{caller.rater}",
            ),
        )
        return {"live": live.version or "base", "serving": service.adapter_label}

    @api.post("/admin/live/freeze")
    async def live_freeze(body: LiveRequest, caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
        """Stop online updates and promotions (admin)."""
        access.audit("live_freeze", rater=caller.rater, reason=body.reason)
        live = await live_change(
            caller,
            "freeze",
            lambda: live_state().freeze(
                reason=body.reason or "frozen through the service", by=f"admin:{caller.rater}"
            ),
        )
        return {"live": live.version or "base", "frozen": live.frozen}

    @api.post("/admin/live/unfreeze")
    async def live_unfreeze(body: LiveRequest, caller: Caller = Depends(kit.admin)) -> dict[str, Any]:
        """Resume online updates and promotions (admin)."""
        access.audit("live_unfreeze", rater=caller.rater, reason=body.reason)
        live = await live_change(
            caller, "unfreeze", lambda: live_state().unfreeze(reason=body.reason or "", by=f"admin:{caller.rater}")
        )
        return {"live": live.version or "base", "frozen": live.frozen}

    return api
