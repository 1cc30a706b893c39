"""Data assets: prompts, the teacher's trajectories and labels, and imported human preferences."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

from dagster import AssetExecutionContext, AssetsDefinition, DailyPartitionsDefinition, MaterializeResult, asset

from hominem_pipeline.core.pipeline import STAGES_BY_NAME
from hominem_pipeline.defs.resources import HominemResource
from hominem_pipeline.defs.stage_asset import materialize_stage


def data_assets(partitions: DailyPartitionsDefinition) -> list[AssetsDefinition]:
    @asset(partitions_def=partitions, group_name="data", kinds={"python"}, description=STAGES_BY_NAME["prompts"].description)
    def prompts(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "prompts")

    @asset(partitions_def=partitions, group_name="data", kinds={"pytorch"}, deps=[prompts], description=STAGES_BY_NAME["teacher_trajectories"].description)
    def teacher_trajectories(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "teacher_trajectories")

    @asset(partitions_def=partitions, group_name="data", kinds={"pytorch"}, deps=[teacher_trajectories], description=STAGES_BY_NAME["teacher_labels"].description)
    def teacher_labels(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "teacher_labels")

    @asset(partitions_def=partitions, group_name="data", kinds={"python"}, description=STAGES_BY_NAME["human_preferences"].description)
    def human_preferences(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "human_preferences")

    return [prompts, teacher_trajectories, teacher_labels, human_preferences]
