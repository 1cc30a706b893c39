"""What every asset body does: run its core stage for the context's partition, report metadata."""

from __future__ import annotations

from typing import Any

from collections.abc import Callable

from dagster import AssetCheckResult, AssetExecutionContext, MaterializeResult, MetadataValue

from hominem_pipeline.core.config import HominemConfig

from hominem_pipeline.core.pipeline import STAGES_BY_NAME
from hominem_pipeline.core.stages import StageResult, run_stage
from hominem_pipeline.defs.resources import HominemResource


def dagster_metadata(result: StageResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "version": result.ref.version,
        "path": MetadataValue.path(str(result.ref.path)),
        "mlflow_run_id": result.mlflow_run_id,
        "reused_existing_version": result.cache_hit,
        "inputs": MetadataValue.json({a: [r.key for r in refs] for a, refs in result.inputs.items()}),
    }
    if "rows" in result.metadata:
        meta["dagster/row_count"] = int(result.metadata["rows"])
    for key, value in result.metrics.items():
        if isinstance(value, bool):
            meta[key] = value
        elif isinstance(value, (int, float)):
            meta[key] = MetadataValue.float(float(value)) if isinstance(value, float) else MetadataValue.int(value)
    extra = {k: v for k, v in result.metadata.items() if k != "rows"}
    if extra:
        meta["details"] = MetadataValue.json(extra)
    return meta


def materialize_stage(
    context: AssetExecutionContext,
    hominem: HominemResource,
    stage: str,
    checks: Callable[[StageResult, HominemConfig], list[AssetCheckResult]] | None = None,
) -> MaterializeResult:
    cfg = hominem.load()
    result = run_stage(STAGES_BY_NAME[stage], cfg, context.partition_key, dagster_run_id=context.run.run_id)
    context.log.info(
        f"{stage}/{context.partition_key}: version {result.ref.version}"
        f" ({'reused' if result.cache_hit else 'built'}), MLflow run {result.mlflow_run_id}"
    )
    return MaterializeResult(metadata=dagster_metadata(result), check_results=checks(result, cfg) if checks else None)
