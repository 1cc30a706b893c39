"""An update judged: its partial Reward Health Index (the fast loop's), the live gate's offer, and what the
fast loop does when the index is low (roll the live online update back, freeze online updates)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.online.gate import GateHealth
from hominem_pipeline.core.online.live import HEALTH, ONLINE_ADAPTERS, LiveState
from hominem_pipeline.core.online.updates.batch import UpdateBatch
from hominem_pipeline.core.online.updates.result import UpdateResult
from hominem_pipeline.core.online.updates.sources import held_out_prompts

if TYPE_CHECKING:
    from hominem_pipeline.core.policy.lora import AdapterTraining
    from hominem_pipeline.core.reward.model import RewardModel


def partial_health(
    cfg: HominemConfig,
    reward_model: RewardModel,
    prompts: list[str],
    replies: list[str],
    grad_norms: list[float],
    adapter: Path | None = None,
    policy: tuple[Any, Any] | None = None,
) -> Any:
    """The fast loop's Reward Health Index: DCS on the adapter's replies (on the update's LoRA at `adapter`
    with `health.dcs_on: policy`, or on `policy`: that LoRA already loaded and active, and its tokenizer) and
    GVS on its gradient norms (normalised by the calibration's constant for the dual mode, which online updates
    train in), weighted as in the health index and renormalised (`health.aggregate` over the two)."""
    from hominem_pipeline.core.evaluation.calibration import resolve
    from hominem_pipeline.core.evaluation.health import (
        aggregate,
        coherence,
        gradient_variance_stability,
    )

    answered = [i for i, r in enumerate(replies) if r.strip()]
    asked, said = [prompts[i] for i in answered], [replies[i] for i in answered]
    components = {
        "dcs": coherence(cfg, reward_model, asked, said, adapter, policy=policy),
        "gvs": gradient_variance_stability(grad_norms, resolve(cfg).reference("gvi_max", "dual")),
    }
    return aggregate(components, cfg)


def _fast_loop(
    cfg: HominemConfig, state: LiveState, plan: UpdateBatch, rhi: float, limits: dict[str, Any], by: str
) -> list[str]:
    """Below `online.rollback_below` the online update live now is rolled back; below `online.freeze_below`
    online updates are frozen. Returns what was done."""
    from hominem_pipeline.core.online.promotion import rollback

    actions: list[str] = []
    back, freeze = limits["rollback_below"], limits["freeze_below"]
    if rhi < back.value and plan.live is not None and plan.live_adapter.parent.name == ONLINE_ADAPTERS:
        why = f"fast loop: update {plan.version} has partial RHI {rhi:.3f} < {back.text}"
        rollback(cfg, None, reason=why, by=by)
        actions.append(f"rolled back {plan.live}")
    if rhi < freeze.value:
        state.freeze(reason=f"fast loop: update {plan.version} has partial RHI {rhi:.3f} < {freeze.text}", by=by)
        actions.append("froze online updates")
    return actions


def judge(
    cfg: HominemConfig,
    plan: UpdateBatch,
    result: AdapterTraining,
    out: Path,
    limits: dict[str, Any],
    *,
    by: str,
    reason: str,
) -> UpdateResult:
    """Offer the trained update at `out` to the live gate, its partial RHI (written to health.json beside it)
    against `online.skip_below`; then the fast loop (`limits`: `calibration.fast_loop`'s thresholds).
    Returns the outcome (its `seconds` left to the caller)."""
    from hominem_pipeline.core.online.promotion import GateSubset, offer

    skip = limits["skip_below"]
    state = LiveState(cfg.data_dir)
    health: dict[str, Any] = {}

    def measure(prompts: list[str], replies: list[str], policy: tuple[Any, Any]) -> float | None:
        report = partial_health(cfg, plan.reward_model, prompts, replies, result.grad_norms, out, policy)
        health.update(
            report.as_dict(), threshold=skip.value, threshold_setting=skip.name, threshold_source=skip.source
        )
        (out / HEALTH).write_text(json.dumps(health, indent=1, default=str) + "\n")
        return report.rhi

    done = offer(
        cfg,
        out,
        by=by,
        reason=reason,
        health=GateHealth(measure, skip.value, skip.name),
        version=plan.version,
        prompts=held_out_prompts(cfg, plan.pair_sources),
        reward_model=plan.reward_model,  # the one its METADATA names, loaded once
        subset=GateSubset.online(cfg, plan.tastes, plan.choices),
    )
    rhi = health.get("rhi")
    actions = _fast_loop(cfg, state, plan, rhi, limits, by) if not done.promoted and rhi is not None else []
    why = done.report.summary() + (f"; {'; '.join(actions)}" if actions else "")
    return UpdateResult(
        "promoted" if done.promoted else "refused",
        why,
        plan.version,
        state.current().version,
        rhi,
        plan.items,
        actions,
        done.report.as_dict(),
        {f"gate_{k}": v for k, v in done.seconds.items()},
    )
