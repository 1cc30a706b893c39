"""Running one stage for one day: plan, reuse or build, publish, track.

`run_stage` is what the Dagster assets and the tests call:

1. plan: the input versions this config implies and the version they make (`core/pipeline/lineage.py`);
2. open the MLflow run of this materialization (resumed if the same Dagster run retries);
3. reuse the version if it is already built, else build it in a staging folder and publish it;
4. log params, inputs, metrics and artifacts; register a model where the stage makes one.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.lm.device import describe_device, resolve_device
from hominem_pipeline.core.pipeline.artifacts import ArtifactRef, ArtifactStore
from hominem_pipeline.core.pipeline.lineage import (
    Lineage,
    build_command,
    definition_version,
    settings_values,
    stage_seed,
)
from hominem_pipeline.core.pipeline.stage import Stage, StageContext, window_days
from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME
from hominem_pipeline.core.pipeline.tracking import TAG_CACHE_HIT, TAG_VERSION, Tracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageResult:
    ref: ArtifactRef
    cache_hit: bool
    mlflow_run_id: str
    metrics: dict[str, Any]
    metadata: dict[str, Any]
    inputs: dict[str, list[ArtifactRef]]
    refreshed: tuple[
        StageResult, ...
    ] = ()  # stale days of its windows' inputs this run rebuilt first (`Stage.refresh`)


class WindowInputStale(RuntimeError):
    """A stale day of a window input could not be rebuilt: the run stops rather than leave it out."""


def refresh_window(
    stage: Stage, cfg: HominemConfig, partition: str, dagster_run_id: str | None = None
) -> list[StageResult]:
    """Rebuild each day a window of `stage` reads of a `refresh` stage (the service's feedback) whose files
    changed since it was built (feedback given after that day's run) or that was never built though its
    files are there, so that nothing people gave is left out of what `stage` trains on. A day whose rebuild
    fails stops the run, naming the day and the command."""
    from hominem_pipeline.core.online.retention import expire

    if (gone := expire(cfg)).days:  # older than privacy.retention_days: no build reads them
        from hominem_pipeline.core.online.audit import AuditLog, audit_path

        who = f"dagster:{dagster_run_id}" if dagster_run_id else "manual"
        AuditLog(audit_path(cfg)).append("expire", who, days=gone.days, events=gone.events, versions=gone.versions)
    data = Lineage(cfg, STAGES_BY_NAME, ArtifactStore(cfg.data_dir))
    done = []
    for inp in stage.inputs:
        up = STAGES_BY_NAME[inp.asset]
        if not up.refresh or up.inputs:
            continue
        for day in window_days(partition, inp.window(cfg) if inp.window else 1):
            if cfg.project.before_start(day):
                continue
            try:
                if data.expected(up.name, day) is not None or (up.files is not None and up.files(cfg, day) is None):
                    continue  # current, or nothing to read that day (no log)
                log.info(
                    "%s/%s reads %s for %s, which changed since it was built: building it again first",
                    stage.name,
                    partition,
                    up.name,
                    day,
                )
                done.append(run_stage(up, cfg, day, dagster_run_id=dagster_run_id))
            except Exception as exc:
                raise WindowInputStale(
                    f"{stage.name} for {partition} reads {up.name} for {day}, which changed since it was "
                    "built, and building it again failed "
                    f"({exc.__class__.__name__}: {exc}); build it: {build_command(up.name, day, cfg)}"
                ) from exc
    return done


def check_partition(partition: str) -> None:
    try:
        dt.date.fromisoformat(partition)
    except ValueError:
        raise ValueError(f"partition {partition!r} is not a date; partitions are days written YYYY-MM-DD") from None


def _left_out(stage: Stage, cfg: HominemConfig, partition: str, plan: Any) -> list[dict[str, Any]]:
    """The window's days built only under other code, settings or inputs: not read, each with its build command."""
    left_out = [{"asset": a, "day": d, "expected": v, "build": build_command(a, d, cfg)} for a, d, v in plan.left_out]
    for gap in left_out:
        log.warning(
            "%s/%s: %s for %s is built only under other code, settings or inputs (version %s is "
            "expected), so it is not read; build it: %s",
            stage.name,
            partition,
            gap["asset"],
            gap["day"],
            gap["expected"],
            gap["build"],
        )
    return left_out


def _log_inputs(run: Any, stage: Stage, inputs: dict[str, list[ArtifactRef]]) -> None:
    """Each input version as an MLflow dataset (its table) and a tag."""
    for inp in stage.inputs:
        for ref in inputs[inp.asset]:
            table = ref.manifest.get("table")
            if table:
                run.log_input_table(
                    pd.read_parquet(ref.file(table)),
                    name=f"{inp.asset}@{ref.partition}",
                    source=ref.file(table),
                    context="training" if inp.window else "input",
                )
            run.set_tags({f"input.{inp.asset}.{ref.partition}": ref.version})


@dataclass(frozen=True)
class _Build:
    """One stage's build of one day: what it reads and the version it makes."""

    stage: Stage
    cfg: HominemConfig
    partition: str
    version: str
    inputs: dict[str, list[ArtifactRef]]
    left_out: list[dict[str, Any]]
    settings: dict[str, Any]
    device: str


def _build(b: _Build, store: ArtifactStore, run: Any) -> ArtifactRef:
    """Build the version in a staging folder and publish it with its manifest (and its quarantined rows)."""
    stage, cfg, partition = b.stage, b.cfg, b.partition
    with store.staging(stage.name, partition) as staged:
        seed = stage_seed(cfg, stage.name, partition)
        ctx = StageContext(
            cfg=stage.slice(cfg), partition=partition, inputs=b.inputs, out_dir=staged, run=run, seed=seed
        )
        output = stage.build(ctx)
        manifest = {
            "stage": stage.name,
            "config": b.settings,
            # code and settings: how Lineage.newest knows a version built from earlier inputs
            "definition": definition_version(stage, cfg),
            "device": b.device,
            "inputs": {a: [r.key | {"content": r.content} for r in refs] for a, refs in b.inputs.items()},
            "metrics": output.metrics,
            "metadata": output.metadata | ({"window_left_out": b.left_out} if b.left_out else {}),
            "table": output.table,
            "mlflow_artifacts": output.mlflow_artifacts,
            "mlflow_run_id": run.run_id,
            "complete": output.complete,
        }
        ref = store.publish(staged, stage.name, partition, b.version, manifest, complete=output.complete)
        if not output.complete:
            log.warning(
                "%s/%s is incomplete; published as %s, the next run builds it again",
                stage.name,
                partition,
                ref.version,
            )
        if output.quarantine is not None:
            store.write_quarantine(ref, output.quarantine)
    return ref


def _track(run: Any, stage: Stage, ref: ArtifactRef, cache_hit: bool) -> None:
    """The version's metrics, tags and artifacts in the MLflow run; its model registered where the stage makes one."""
    manifest = ref.manifest
    run.log_metrics({k: v for k, v in manifest["metrics"].items() if isinstance(v, (int, float))})
    run.set_tags(
        {
            TAG_CACHE_HIT: cache_hit,
            "hominem.artifact_path": ref.path,
            "hominem.built_by_run": manifest["mlflow_run_id"],
            "hominem.content": ref.content,
        }
    )
    if not cache_hit:
        run.log_artifact(ref.path / "manifest.json")
        for name in manifest.get("mlflow_artifacts", []):
            run.log_artifact(ref.path / name)
    if stage.registered:
        registry_version = run.register_model(
            stage.registered.name, ref.version, lambda: stage.registered.log(ref.path)
        )
        run.set_tags({"hominem.registry_version": registry_version})


def run_stage(
    stage: Stage | str, cfg: HominemConfig, partition: str, *, dagster_run_id: str | None = None
) -> StageResult:
    """Plan, reuse or build, publish and track one stage for one day (see the module's docstring). One line goes to
    the audit log (`core/online/audit.py`): who (`dagster:<run>`, or `manual` outside Dagster), the stage, the day,
    the version, and the outcome (built, reused, or failed and why)."""
    from hominem_pipeline.core.online.audit import AuditLog, audit_path

    stage = STAGES_BY_NAME[stage] if isinstance(stage, str) else stage
    who = f"dagster:{dagster_run_id}" if dagster_run_id else "manual"
    try:
        result = _run_stage(stage, cfg, partition, dagster_run_id)
    except BaseException as exc:
        why = f"failed: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        AuditLog(audit_path(cfg)).append(f"build {stage.name}", who, day=partition, outcome=why)
        raise
    outcome = "reused" if result.cache_hit else "built"
    AuditLog(audit_path(cfg)).append(
        f"build {stage.name}", who, day=partition, version=result.ref.version, outcome=outcome
    )
    return result


def _run_stage(stage: Stage, cfg: HominemConfig, partition: str, dagster_run_id: str | None) -> StageResult:
    check_partition(partition)
    refreshed = tuple(refresh_window(stage, cfg, partition, dagster_run_id))
    store = ArtifactStore(cfg.data_dir)
    plan = Lineage(cfg, STAGES_BY_NAME, store).plan(stage.name, partition)
    left_out = _left_out(stage, cfg, partition, plan)
    tracker = Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root))
    run_id = dagster_run_id or f"manual-{uuid.uuid4().hex[:12]}"
    settings = settings_values(stage, cfg)
    device = describe_device(resolve_device(cfg.runtime.device))  # where its networks run (runtime: not versioned)
    tags = {TAG_VERSION: plan.version}
    with tracker.stage_run(asset=stage.name, partition=partition, dagster_run_id=run_id, tags=tags) as run:
        run.log_params({**settings, "runtime.device": device})
        _log_inputs(run, stage, plan.inputs)
        ref = store.existing(stage.name, partition, plan.version)
        cache_hit = ref is not None
        if cache_hit:
            log.info(
                "%s/%s: version %s is already built from these inputs and settings; reusing it",
                stage.name,
                partition,
                plan.version,
            )
        else:
            build = _Build(stage, cfg, partition, plan.version, plan.inputs, left_out, settings, device)
            ref = _build(build, store, run)
        _track(run, stage, ref, cache_hit)
        return StageResult(
            ref=ref,
            cache_hit=cache_hit,
            mlflow_run_id=run.run_id,
            metrics=ref.manifest["metrics"],
            metadata=ref.manifest["metadata"],
            inputs=plan.inputs,
            refreshed=refreshed,
        )
