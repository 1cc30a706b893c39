"""Training assets: the reward model, preference pairs and the LoRA adapter."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

from dagster import AssetDep, AssetExecutionContext, AssetsDefinition, DailyPartitionsDefinition, MaterializeResult, asset

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline import STAGES_BY_NAME
from hominem_pipeline.defs.partitions import trailing_days
from hominem_pipeline.defs.resources import HominemResource
from hominem_pipeline.defs.stage_asset import materialize_stage


def training_assets(partitions: DailyPartitionsDefinition, cfg: HominemConfig) -> list[AssetsDefinition]:
    @asset(
        partitions_def=partitions,
        group_name="training",
        kinds={"pytorch"},
        deps=[
            AssetDep("teacher_labels", partition_mapping=trailing_days(cfg.reward_model.window_days)),
            AssetDep("human_preferences", partition_mapping=trailing_days(cfg.reward_model.window_days)),  # imported pairs, when there are any
        ],
        description=STAGES_BY_NAME["reward_model"].description,
    )
    def reward_model(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "reward_model")

    @asset(
        partitions_def=partitions,
        group_name="training",
        kinds={"python"},
        deps=["teacher_labels", "teacher_trajectories", reward_model],  # trajectories: whether each reply ended or was cut
        description=STAGES_BY_NAME["preference_pairs"].description,
    )
    def preference_pairs(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "preference_pairs")

    @asset(
        partitions_def=partitions,
        group_name="training",
        kinds={"pytorch"},
        deps=[AssetDep(preference_pairs, partition_mapping=trailing_days(cfg.policy.window_days)), reward_model],
        description=STAGES_BY_NAME["lora_adapter"].description,
    )
    def lora_adapter(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "lora_adapter")

    return [reward_model, preference_pairs, lora_adapter]
