"""Running one pipeline stage for one partition: resolve inputs, reuse or build, publish, track.

A stage is described by a `StageSpec` (its name, the config sections it depends on, its upstream
assets and a `build` function). `run_stage` is what both the Dagster assets and tests call:

1. resolve the upstream artifacts (same partition, or a window of days for training stages);
2. derive the version id from the code version, the settings and the inputs' versions;
3. open the MLflow run for this materialization (resumed if the same Dagster run retries);
4. reuse the version if it is already on disk, else build it in a staging folder and publish it;
5. point the partition's `current.json` at it, and log params, inputs, metrics and artifacts.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.artifacts import ArtifactRef, ArtifactStore, fingerprint
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.tracking import TAG_CACHE_HIT, TAG_VERSION, StageRun, Tracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upstream:
    asset: str
    window_days: Callable[[HominemConfig], int] | None = None  # None: the same partition only
    optional: bool = False  # a window in which no day (not even the stage's own) need be materialized


@dataclass
class StageOutput:
    metrics: dict[str, float | None]
    metadata: dict[str, Any]
    table: str | None = None  # the file downstream stages log as their MLflow input dataset
    mlflow_artifacts: list[str] = field(default_factory=list)  # files (relative) copied to MLflow
    quarantine: pd.DataFrame | None = None  # rejected rows with a `reason` column (kept out of the table)
    # False when some of the work failed for good (API calls out of retries): see ArtifactStore.publish.
    complete: bool = True
    register_model: str | None = None  # MLflow registry name: the version is registered, alias `current`


@dataclass
class StageContext:
    cfg: HominemConfig
    partition: str
    inputs: dict[str, list[ArtifactRef]]
    out_dir: Path
    run: StageRun
    seed: int

    def one(self, asset: str) -> ArtifactRef:
        refs = self.inputs[asset]
        if len(refs) != 1:
            raise ValueError(f"expected one {asset} input for {self.partition}, got {len(refs)}")
        return refs[0]

    def tables(self, asset: str) -> pd.DataFrame:
        """The input tables of `asset` over its window, concatenated with a `partition` column."""
        frames = []
        for ref in self.inputs[asset]:
            table = ref.manifest.get("table")
            if not table:
                raise ValueError(f"{asset} has no table to read")
            frames.append(pd.read_parquet(ref.file(table)).assign(partition=ref.partition))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dataclass(frozen=True)
class StageSpec:
    name: str
    description: str
    code_version: str  # bump when the build logic changes what it writes
    config_sections: tuple[str, ...]
    upstream: tuple[Upstream, ...]
    build: Callable[[StageContext], StageOutput]
    # Anything else the output depends on that the config sections do not show (a file's content),
    # given the config and the partition.
    extra_fingerprint: Callable[[HominemConfig, str], Any] | None = None


@dataclass(frozen=True)
class StageResult:
    ref: ArtifactRef
    cache_hit: bool
    mlflow_run_id: str
    metrics: dict[str, Any]
    metadata: dict[str, Any]
    inputs: dict[str, list[ArtifactRef]]


def stage_seed(cfg: HominemConfig, stage: str, partition: str) -> int:
    return int(fingerprint([cfg.project.seed, stage, partition], 8), 16) % (2**31 - 1)


def resolve_inputs(spec: StageSpec, cfg: HominemConfig, store: ArtifactStore, partition: str) -> dict[str, list[ArtifactRef]]:
    return {
        up.asset: (
            store.window(up.asset, partition, up.window_days(cfg), require_end=not up.optional)
            if up.window_days
            else [store.require(up.asset, partition)]
        )
        for up in spec.upstream
    }


def stage_version(spec: StageSpec, cfg: HominemConfig, partition: str, inputs: dict[str, list[ArtifactRef]]) -> str:
    return fingerprint(
        {
            "stage": spec.name,
            "code_version": spec.code_version,
            "partition": partition,
            "config": cfg.section(*spec.config_sections),
            "inputs": {a: [r.key for r in refs] for a, refs in sorted(inputs.items())},
            "extra": spec.extra_fingerprint(cfg, partition) if spec.extra_fingerprint else None,
        }
    )


def run_stage(spec: StageSpec, cfg: HominemConfig, partition: str, *, dagster_run_id: str | None = None) -> StageResult:
    try:
        dt.date.fromisoformat(partition)
    except ValueError:
        raise ValueError(f"partition {partition!r} is not a date; partitions are days written YYYY-MM-DD") from None
    store = ArtifactStore(cfg.data_dir)
    tracker = Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root))
    inputs = resolve_inputs(spec, cfg, store, partition)
    version = stage_version(spec, cfg, partition, inputs)
    run_id = dagster_run_id or f"manual-{uuid.uuid4().hex[:12]}"

    with tracker.stage_run(asset=spec.name, partition=partition, dagster_run_id=run_id, tags={TAG_VERSION: version}) as run:
        run.log_params(cfg.section(*spec.config_sections))
        for up in spec.upstream:
            for ref in inputs[up.asset]:
                table = ref.manifest.get("table")
                if table:
                    run.log_input_table(
                        pd.read_parquet(ref.file(table)),
                        name=f"{up.asset}@{ref.partition}",
                        source=ref.file(table),
                        context="training" if up.window_days else "input",
                    )
                run.set_tags({f"input.{up.asset}.{ref.partition}": ref.version})

        ref = store.existing(spec.name, partition, version)
        cache_hit = ref is not None
        if cache_hit:
            log.info("%s/%s: version %s is already built from these inputs and settings; reusing it", spec.name, partition, version)
        else:
            with store.staging(spec.name, partition) as staged:
                ctx = StageContext(cfg=cfg, partition=partition, inputs=inputs, out_dir=staged, run=run, seed=stage_seed(cfg, spec.name, partition))
                output = spec.build(ctx)
                manifest = {
                    "stage": spec.name,
                    "code_version": spec.code_version,
                    "config": cfg.section(*spec.config_sections),
                    "inputs": {a: [r.key for r in refs] for a, refs in inputs.items()},
                    "metrics": output.metrics,
                    "metadata": output.metadata,
                    "table": output.table,
                    "mlflow_artifacts": output.mlflow_artifacts,
                    "mlflow_run_id": run.run_id,
                    "complete": output.complete,
                    "registered_model": output.register_model,
                }
                ref = store.publish(staged, spec.name, partition, version, manifest, complete=output.complete)
                if not output.complete:
                    log.warning("%s/%s is incomplete; published as %s, the next run builds it again", spec.name, partition, ref.version)
                if output.quarantine is not None:
                    store.write_quarantine(ref, output.quarantine)

        manifest = ref.manifest
        run.log_metrics({k: v for k, v in manifest["metrics"].items() if isinstance(v, (int, float))})
        run.set_tags({TAG_CACHE_HIT: cache_hit, "hominem.artifact_path": ref.path, "hominem.built_by_run": manifest["mlflow_run_id"]})
        if not cache_hit:
            run.log_artifact(ref.path / "manifest.json")
            for name in manifest.get("mlflow_artifacts", []):
                run.log_artifact(ref.path / name)
        extra = {}
        if manifest.get("registered_model"):
            extra["registry_version"] = run.register_model(manifest["registered_model"], ref.path, ref.version)
            run.set_tags({"hominem.registry_version": extra["registry_version"]})
        store.point_current(ref, mlflow_run_id=run.run_id, dagster_run_id=run_id, **extra)
        return StageResult(
            ref=ref,
            cache_hit=cache_hit,
            mlflow_run_id=run.run_id,
            metrics=manifest["metrics"],
            metadata=manifest["metadata"],
            inputs=inputs,
        )
