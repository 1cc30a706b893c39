"""Evaluation assets: base vs adapter, and the Reward Health Index that gates deployment."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

from dagster import AssetExecutionContext, AssetsDefinition, DailyPartitionsDefinition, MaterializeResult, asset

from hominem_pipeline.core.pipeline import STAGES_BY_NAME
from hominem_pipeline.defs.resources import HominemResource
from hominem_pipeline.defs.stage_asset import materialize_stage


def evaluation_assets(partitions: DailyPartitionsDefinition) -> list[AssetsDefinition]:
    @asset(
        partitions_def=partitions,
        group_name="evaluation",
        kinds={"pytorch"},
        deps=["lora_adapter", "reward_model", "prompts"],
        description=STAGES_BY_NAME["evaluation"].description,
    )
    def evaluation(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "evaluation")

    @asset(
        partitions_def=partitions,
        group_name="evaluation",
        kinds={"python"},
        deps=[evaluation, "lora_adapter", "reward_model"],
        description=STAGES_BY_NAME["reward_health_index"].description,
    )
    def reward_health_index(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "reward_health_index")

    return [evaluation, reward_health_index]
