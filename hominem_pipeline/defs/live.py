"""The `live_gate` asset check on `lora_adapter`: after the day's health index, the slow loop reads the
night's RHI (core/online/slow_loop.py), then the daily adapter is offered for promotion through the same
gate as `hominem live promote` (core/online/promotion.py)."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    DailyPartitionsDefinition,
    asset_check,
)

from hominem_pipeline.defs.resources import HominemResource

LIVE_GATE = "live_gate"


def live_gate_check(partitions: DailyPartitionsDefinition) -> AssetChecksDefinition:
    @asset_check(
        asset="lora_adapter",
        name=LIVE_GATE,
        additional_deps=["reward_health_index"],
        partitions_def=partitions,
        description="The adapter passed the live gate against the live adapter (RHI >= health.deploy_threshold or "
        "the health "
        "calibration's threshold, win rate over the live adapter not below 50% beyond its noise, no "
        "memory-probe fact lost, people's "
        "held-out pairs, the reward manifold, a sane smoke reply) and is live; a failing one stays a candidate "
        "with the reason in data/live/history.json.",
    )
    def _live_gate(context: AssetCheckExecutionContext, hominem: HominemResource) -> AssetCheckResult:
        from hominem_pipeline.core.online.promotion import gate_daily_adapter, nightly

        cfg = hominem.load()
        by = f"dagster:{context.run.run_id}"
        night = nightly(
            cfg, context.partition_key, by=by
        )  # the slow loop first: a dip after last night's promotion reverts it before the gate
        context.log.info(night.description)
        outcome = gate_daily_adapter(cfg, context.partition_key, by=by)
        context.log.info(outcome.description)
        metadata = {
            **outcome.metadata,
            "slow_loop": night.description,
            "lr_factor_next": night.adjustment.lr_factor,
            "rank_factor_next": night.adjustment.rank_factor,
        }
        return AssetCheckResult(
            passed=outcome.passed,
            description=f"{outcome.description}. {night.description}",
            metadata=metadata,
            severity=AssetCheckSeverity.WARN,
        )

    return _live_gate
