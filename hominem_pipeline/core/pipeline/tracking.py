"""MLflow tracking: one run per asset materialization, found again by its tags.

A run is tagged with the Dagster run id, the asset key and the partition, so a retried Dagster step
resumes the same MLflow run instead of starting a second one; its inputs are logged with
`mlflow.log_input` (name + digest), which is how MLflow shows the lineage between stages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

# The MLflow UI opens an experiment so tagged on its runs table (model training), with Models in the
# sidebar, not on MLflow 3's GenAI overview.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
# The UI's own mode (GenAI or model training) is a per-browser setting that starts at GenAI: "Models"
# and "Runs" are missing from its sidebar there. Links carrying this query open the model-training view.
UI_VIEW = "workflowType=machine_learning"

log = logging.getLogger(__name__)

TAG_DAGSTER_RUN = "hominem.dagster_run_id"
TAG_ASSET = "hominem.asset"
TAG_PARTITION = "hominem.partition"
TAG_VERSION = "hominem.artifact_version"
TAG_CACHE_HIT = "hominem.cache_hit"

_MAX_PARAM_LEN = 500


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested settings as MLflow params: `a.b.c -> value`, values cut to MLflow's length limit."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            text = str(value)
            out[name] = text if len(text) <= _MAX_PARAM_LEN else text[: _MAX_PARAM_LEN - 3] + "..."
    return out


def _quiet_mlflow() -> None:
    # MLflow's alembic migrations and "run started" notices are noise on a terminal that shows progress.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent"):
        logging.getLogger(name).setLevel(logging.WARNING)


class StageRun:
    """Logging calls for one active MLflow run."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def log_params(self, params: dict[str, Any]) -> None:
        import mlflow

        flat = flatten(params)
        existing = mlflow.get_run(self.run_id).data.params
        fresh = {k: v for k, v in flat.items() if k not in existing}
        if fresh:
            mlflow.log_params(fresh)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        import mlflow

        finite = {k: float(v) for k, v in metrics.items() if v is not None and pd.notna(v)}
        if finite:
            mlflow.log_metrics(finite, step=step)

    def set_tags(self, tags: dict[str, Any]) -> None:
        import mlflow

        mlflow.set_tags({k: str(v) for k, v in tags.items()})

    def log_input_table(self, frame: pd.DataFrame, *, name: str, source: Path, context: str) -> None:
        import mlflow

        # Nested columns (the reward vector) are flattened so MLflow can compute schema and digest.
        flat = pd.json_normalize(frame.to_dict(orient="records"), sep=".") if len(frame) else frame
        with warnings.catch_warnings():
            # Two notices per table that say nothing about our data: MLflow registers its local-file
            # source class twice (a path "matches both"), and it hints that integer columns cannot hold NaN.
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_pandas(flat, source=str(source), name=name)
            mlflow.log_input(dataset, context=context)

    def register_model(
        self,
        name: str,
        version_key: str,
        log_model: Callable[[], str],
        alias: str = "current",
        description: str | None = None,
    ) -> int:
        """Register a model under `name` in the MLflow model registry, once per artifact version (its
        `version_key`): `log_model` logs it in this run and returns its model URI. Points `alias` at it.
        Returns the registry version."""
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        client = MlflowClient()
        try:
            client.get_registered_model(name)
        except MlflowException:
            client.create_registered_model(
                name,
                description=description
                or f"hominem: alias `{alias}` is the newest built; load with "
                f"mlflow.pyfunc.load_model('models:/{name}@{alias}')",
            )
        found = client.search_model_versions(f"name = '{name}' and tags.`{TAG_VERSION}` = '{version_key}'")
        if found:
            version = found[0].version
        else:
            source = log_model()
            # a model logged with MLflow 3's log_model is a LoggedModel (models:/m-...): a tracking server needs its id
            # with the source
            model_id = source.removeprefix("models:/") if source.startswith("models:/m-") else None
            version = client.create_model_version(
                name, source=source, run_id=self.run_id, tags={TAG_VERSION: version_key}, model_id=model_id
            ).version
        client.set_registered_model_alias(name, alias, version)
        return int(version)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        import mlflow

        if path.is_dir():
            mlflow.log_artifacts(str(path), artifact_path=artifact_path)
        else:
            mlflow.log_artifact(str(path), artifact_path=artifact_path)


class Tracker:
    def __init__(self, uri: str, experiment: str, artifact_root: Path):
        self.uri = uri
        self.experiment = experiment
        self.artifact_root = Path(artifact_root)
        self._experiment: str | None = None  # looked up (or created) once per tracker

    @property
    def _experiment_id(self) -> str:
        """Point MLflow at this tracker's store (the URI is process-global) and return the experiment."""
        import mlflow

        mlflow.set_tracking_uri(self.uri)
        if self._experiment is None:
            self._experiment = self._find_or_create_experiment()
        return self._experiment

    def _find_or_create_experiment(self) -> str:
        import mlflow

        exp = mlflow.get_experiment_by_name(self.experiment)
        if exp is not None:
            if EXPERIMENT_KIND[0] not in exp.tags:  # made by an older version, or by hand: opens on the runs table too
                mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, *EXPERIMENT_KIND)
            return exp.experiment_id
        from mlflow.exceptions import MlflowException

        try:
            if (
                self.server
            ):  # the tracking server keeps the artifacts (--artifacts-destination) and serves them to every client
                return mlflow.create_experiment(self.experiment, tags=dict([EXPERIMENT_KIND]))
            self.artifact_root.mkdir(parents=True, exist_ok=True)
            return mlflow.create_experiment(
                self.experiment,
                artifact_location=self.artifact_root.resolve().as_uri(),
                tags=dict([EXPERIMENT_KIND]),
            )
        except MlflowException as exc:  # another worker created it a moment ago: use theirs
            made = mlflow.get_experiment_by_name(self.experiment)
            if "RESOURCE_ALREADY_EXISTS" not in f"{exc.error_code} {exc}" or made is None:
                raise
            return made.experiment_id

    @property
    def server(self) -> bool:
        """Whether the URI is a tracking server (http/https), whose artifact store is its own, not artifact_root."""
        return self.uri.startswith(("http://", "https://"))

    def find_run(self, *, asset: str, partition: str, dagster_run_id: str) -> str | None:
        import mlflow

        runs = mlflow.search_runs(
            experiment_ids=[self._experiment_id],
            filter_string=(
                f"tags.`{TAG_DAGSTER_RUN}` = '{dagster_run_id}' and tags.`{TAG_ASSET}` = '{asset}' "
                f"and tags.`{TAG_PARTITION}` = '{partition}'"
            ),
            output_format="list",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def runs_for(self, asset: str) -> list[Any]:
        """All runs of one asset, newest first (for tests and reports)."""
        import mlflow

        return mlflow.search_runs(
            experiment_ids=[self._experiment_id],
            filter_string=f"tags.`{TAG_ASSET}` = '{asset}'",
            output_format="list",
            order_by=["attributes.start_time DESC"],
        )

    @contextlib.contextmanager
    def stage_run(
        self, *, asset: str, partition: str, dagster_run_id: str, tags: dict[str, str]
    ) -> Iterator[StageRun]:
        import mlflow

        _quiet_mlflow()
        experiment_id = self._experiment_id
        existing = self.find_run(asset=asset, partition=partition, dagster_run_id=dagster_run_id)
        all_tags = {
            TAG_DAGSTER_RUN: dagster_run_id,
            TAG_ASSET: asset,
            TAG_PARTITION: partition,
            "mlflow.runName": f"{asset}/{partition}",
            **tags,
        }
        if mlflow.active_run() is not None:
            mlflow.end_run()
        with mlflow.start_run(
            run_id=existing, experiment_id=None if existing else experiment_id, tags=all_tags
        ) as run:
            if existing:
                log.info("resuming MLflow run %s for %s/%s", existing, asset, partition)
            yield StageRun(run.info.run_id)


def mlflow_run_url(ui_url: str, run_id: str) -> str:
    """The run's page in the MLflow UI at `ui_url` (`tracking.ui_url`); the run is looked up in the
    tracking store the stage logged it to, which the runner has pointed MLflow at."""
    import mlflow

    return f"{ui_url.rstrip('/')}/#/experiments/{mlflow.get_run(run_id).info.experiment_id}/runs/{run_id}?{UI_VIEW}"


def experiment_url(uri: str, experiment: str, artifact_root: Path, ui_url: str) -> str:
    """The experiment's runs in the MLflow UI at `ui_url`, in the model-training view (the experiment
    is created if it does not exist yet, so the link works before the first run)."""
    return f"{ui_url.rstrip('/')}/#/experiments/{Tracker(uri, experiment, artifact_root)._experiment_id}?{UI_VIEW}"
