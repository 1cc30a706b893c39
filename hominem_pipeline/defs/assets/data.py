"""Data assets: prompts, the teacher's trajectories and labels, and imported human preferences."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    DailyPartitionsDefinition,
    MaterializeResult,
    asset,
)

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.labeling import verifier_verdict
from hominem_pipeline.core.pipeline import STAGES_BY_NAME
from hominem_pipeline.core.stages import StageResult
from hominem_pipeline.defs.resources import HominemResource
from hominem_pipeline.defs.stage_asset import materialize_stage

LABELS_CHECK = "labels_pass_verifier"


def labels_check(result: StageResult, cfg: HominemConfig) -> list[AssetCheckResult]:
    """Blocking: too many quarantined labels stop the run before anything trains on the partition."""
    kept, quarantined = int(result.metrics["labels"]), int(result.metrics.get("quarantined") or 0)
    passed, description = verifier_verdict(kept, quarantined, cfg.verifier.max_failure_rate)
    return [
        AssetCheckResult(
            check_name=LABELS_CHECK,
            passed=passed,
            severity=AssetCheckSeverity.ERROR,
            description=description,
            metadata={"kept": kept, "quarantined": quarantined, "max_failure_rate": cfg.verifier.max_failure_rate},
        )
    ]


def data_assets(partitions: DailyPartitionsDefinition) -> list[AssetsDefinition]:
    @asset(partitions_def=partitions, group_name="data", kinds={"python"}, description=STAGES_BY_NAME["prompts"].description)
    def prompts(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "prompts")

    @asset(partitions_def=partitions, group_name="data", kinds={"pytorch"}, deps=[prompts], description=STAGES_BY_NAME["teacher_trajectories"].description)
    def teacher_trajectories(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "teacher_trajectories")

    @asset(
        partitions_def=partitions,
        group_name="data",
        kinds={"pytorch"},
        deps=[teacher_trajectories],
        description=STAGES_BY_NAME["teacher_labels"].description,
        check_specs=[
            AssetCheckSpec(
                LABELS_CHECK,
                asset="teacher_labels",
                blocking=True,
                description="The share of quarantined labels is within verifier.max_failure_rate.",
            )
        ],
    )
    def teacher_labels(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "teacher_labels", checks=labels_check)

    @asset(partitions_def=partitions, group_name="data", kinds={"python"}, description=STAGES_BY_NAME["human_preferences"].description)
    def human_preferences(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        return materialize_stage(context, hominem, "human_preferences")

    return [prompts, teacher_trajectories, teacher_labels, human_preferences]
