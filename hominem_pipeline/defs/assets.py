"""The Dagster assets, generated from the stage table (`core/pipeline/stages.py`): one asset per stage, with its
deps and partition mappings from the stage's inputs, its group, kinds and description, its
`code_version` derived from its settings and source, and each materialization's `DataVersion` the
digest of what it wrote. Every asset body is the same thin shell: run the core stage, report."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

import base64
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetMaterialization,
    AssetsDefinition,
    DailyPartitionsDefinition,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.lineage import definition_version
from hominem_pipeline.core.pipeline.runner import StageResult, run_stage
from hominem_pipeline.core.pipeline.stage import Stage
from hominem_pipeline.core.pipeline.stages import STAGES
from hominem_pipeline.core.pipeline.tracking import mlflow_run_url
from hominem_pipeline.defs.partitions import trailing_days
from hominem_pipeline.defs.resources import HominemResource

PLOT_BYTES = 600_000  # larger plots are linked by path only: the event log keeps every materialization's metadata


# the step priority (Dagster's `dagster/priority` op tag: a ready step with a higher one runs first) of a stage the
# day's gate does not read: after every other ready step, the live gate's among them
PRIORITY, AFTER_GATE = "dagster/priority", "-1"


def dagster_metadata(result: StageResult, cfg: HominemConfig | None = None) -> dict[str, Any]:
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
    if cfg is not None:
        meta["mlflow_run"] = MetadataValue.url(mlflow_run_url(cfg.tracking.ui_url, result.mlflow_run_id))
    for name in result.ref.manifest.get("mlflow_artifacts", []):
        plot = result.ref.path / name
        if (
            name.endswith(".png") and plot.is_file() and plot.stat().st_size <= PLOT_BYTES
        ):  # the stage's plots, on its asset page
            meta[f"plot: {Path(name).stem}"] = MetadataValue.md(
                f"![{Path(name).stem}](data:image/png;base64,{base64.b64encode(plot.read_bytes()).decode()})"
            )
    return meta


def _deps(stage: Stage, cfg: HominemConfig) -> list[AssetDep]:
    return [
        AssetDep(i.asset, partition_mapping=trailing_days(i.window(cfg)) if i.window else None) for i in stage.inputs
    ]


def stage_asset(stage: Stage, cfg: HominemConfig, partitions: DailyPartitionsDefinition) -> AssetsDefinition:
    @asset(
        name=stage.name,
        partitions_def=partitions,
        group_name=stage.group,
        kinds=set(stage.kinds),
        description=stage.description,
        code_version=definition_version(stage, cfg),
        op_tags={PRIORITY: AFTER_GATE} if stage.after_gate else None,
        deps=_deps(stage, cfg),
        check_specs=[
            AssetCheckSpec(c.name, asset=stage.name, blocking=c.blocking, description=c.description)
            for c in stage.checks
        ],
    )
    def _materialize(context: AssetExecutionContext, hominem: HominemResource) -> MaterializeResult:
        cfg = hominem.load()
        result = run_stage(stage, cfg, context.partition_key, dagster_run_id=context.run.run_id)
        for fresh in (
            result.refreshed
        ):  # stale days of its windows rebuilt first (the service's log grew): materializations of their own
            context.log_event(
                AssetMaterialization(
                    asset_key=fresh.ref.asset,
                    partition=fresh.ref.partition,
                    metadata=dagster_metadata(fresh, cfg),
                    description=f"built again by {stage.name}/{context.partition_key}, which reads it: it changed "
                    "since it was built",
                )
            )
        context.log.info(
            f"{stage.name}/{context.partition_key}: version {result.ref.version}"
            f" ({'reused' if result.cache_hit else 'built'}), MLflow run {result.mlflow_run_id}"
        )
        checks = []
        for check in stage.checks:
            outcome = check.evaluate(result.metrics, cfg, result.ref.path)
            checks.append(
                AssetCheckResult(
                    check_name=check.name,
                    passed=outcome.passed,
                    description=outcome.description,
                    metadata=outcome.metadata,
                    severity=AssetCheckSeverity.ERROR if check.severity == "error" else AssetCheckSeverity.WARN,
                )
            )
        return MaterializeResult(
            metadata=dagster_metadata(result, cfg),
            check_results=checks or None,
            data_version=DataVersion(result.ref.content),
        )

    return _materialize


def stage_assets(cfg: HominemConfig, partitions: DailyPartitionsDefinition) -> list[AssetsDefinition]:
    return [stage_asset(s, cfg, partitions) for s in STAGES]
