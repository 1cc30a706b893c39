"""Where the project keeps its outputs, how it runs and tracks, the reward dimensions, the offline models and the
retrain triggers (`project:`, `runtime:`, `tracking:`, `dimensions:`, `models:`, `retrain:`)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field, model_validator

from hominem_pipeline.core.config.base import _Frozen


class ProjectConfig(_Frozen):
    data_dir: str = Field(
        description="Folder of every output: data/<asset>/<date>/<version>/, the models, the MLflow and Dagster "
        "stores; relative to the project root."
    )
    partitions_start: dt.date | None = Field(
        description="First daily partition Dagster offers (YYYY-MM-DD); null: the project's first built day (today "
        "before any), so the catalog's fill is the project's own."
    )
    seed: int = Field(ge=0, description="Base seed, >= 0; each stage derives its own from it and the partition date.")

    def before_start(self, day: dt.date | str) -> bool:
        """`day` lies before a configured partitions_start (never, with null: the first built day reaches back)."""
        return self.partitions_start is not None and dt.date.fromisoformat(str(day)) < self.partitions_start


class RuntimeConfig(_Frozen):
    device: Literal["auto", "cpu", "cuda", "mps"] = Field(
        description="Where the networks run and the adapters train: auto (a CUDA GPU when torch sees one, else the "
        "Apple GPU, else the CPU), cpu, cuda or mps (the Apple GPU; each an error where torch sees none). fp32 "
        "everywhere. Changes how fast, not what is built (not part of any version)."
    )
    dagster_home: str | None = Field(
        description="The Dagster instance's folder (its dagster.yaml); null: the embedded one, data/dagster with "
        "the project's dagster.yaml (sqlite). A deployment: a folder holding deploy/dagster.yaml's kind "
        "(Postgres storage, the run queue). $DAGSTER_HOME is not read: this says which."
    )
    launch: Literal["in_process", "queue"] = Field(
        description="in_process: `hominem run` executes the run itself; queue: it submits the run to the instance's "
        "run queue (the daemon launches it; the UI sees and controls it) and waits for it."
    )
    executor: Literal["in_process", "multiprocess", "celery"] = Field(
        description="Where a run's steps execute: in_process (one process), multiprocess (a process per step), "
        "celery (a task per step on Celery workers: `dagster-celery worker start`)."
    )
    max_concurrent_steps: int = Field(ge=1, le=64, description="multiprocess: steps at once, 1-64.")
    celery_broker: str | None = Field(
        description="celery: the broker and result backend URL (redis://host:6379/0); $HOMINEM_CELERY_BROKER, when "
        "set, is used instead."
    )
    train_processes: int = Field(
        ge=1,
        le=64,
        description="Processes the daily adapter trains in (`lora_adapter`, every mode), 1-64: 1 trains in the "
        "stage's own process; more start them with `accelerate launch` on this machine (data-parallel, "
        "gradients averaged; on GPUs one per GPU, at most as many as torch sees; not with device: mps, one "
        "Apple GPU). Changes how fast, not what is built (not part of any version).",
    )

    @model_validator(mode="after")
    def _one_process_on_the_apple_gpu(self) -> RuntimeConfig:
        check_processes_on(self.device, self.train_processes)
        return self


def check_processes_on(device: str, processes: int) -> None:
    """Refuse training in several processes on the Apple GPU: it is one device, and torch.distributed has no
    backend for it (the config's check, and `policy.launch.run_launched`'s)."""
    if device == "mps" and processes > 1:
        raise ValueError(
            f"runtime.train_processes is {processes} with runtime.device: mps, but the Apple GPU is one device and "
            "torch.distributed has no backend for it; set runtime.train_processes: 1, or runtime.device: cpu to "
            "train in several processes on the CPU"
        )


class TrackingConfig(_Frozen):
    mlflow_uri: str = Field(
        min_length=1, description="MLflow tracking URI; a relative sqlite path is relative to the project root."
    )
    artifact_root: str = Field(
        min_length=1,
        description="Where a new MLflow experiment stores its artifacts (not used with a tracking server, "
        "http://..., which keeps its own: --artifacts-destination).",
    )
    experiment: str = Field(min_length=1, description="MLflow experiment name.")
    ui_url: str = Field(
        min_length=1,
        description="Where the MLflow UI is served (`hominem ui`: http://127.0.0.1:5000); each asset page in "
        "Dagster links its MLflow run there.",
    )


class DimensionConfig(_Frozen):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Dimension name: lower case, digits and underscores.")
    description: str = Field(min_length=1, description="What the dimension means (shown to API judges).")
    question: str = Field(
        min_length=1,
        description="What the offline rubric judge is asked for this dimension (1 = very poor, 5 = excellent).",
    )


class StudentModelConfig(_Frozen):
    path: str = Field(
        min_length=1, description="HF folder of the student model; built once from gguf_package when missing."
    )
    gguf_package: str | None = Field(
        description="Python package that ships the student's GGUF file; null: path must exist."
    )
    hub_id: str | None = Field(
        description="The base model's Hugging Face id, named in adapters' model cards (never downloaded); null: "
        "unknown."
    )


class EncoderModelConfig(_Frozen):
    path: str | None = Field(description="HF encoder folder; null: the folder inside `package`.")
    package: str | None = Field(description="Python package that ships the encoder (used when path is null).")
    package_subdir: str = Field(description="Folder of the encoder inside `package`.")

    @model_validator(mode="after")
    def _one_source(self) -> EncoderModelConfig:
        if not self.path and not self.package:
            raise ValueError("set `path` (an HF encoder folder) or `package` (a package that ships one)")
        return self


class ModelsConfig(_Frozen):
    student: StudentModelConfig = Field(description="The student (policy) model, also the offline teacher and judge.")
    encoder: EncoderModelConfig = Field(
        description="The sentence encoder (MiniLM): near-duplicate filtering, the encoder reward backbone."
    )


class RetrainConfig(_Frozen):
    memory_conversations: int = Field(
        ge=1,
        description="Conversations held with `hominem serve` since the last retrain (counted from the log) that "
        "trigger the memory (SFT) channel, >= 1.",
    )
    reward_pairs: int = Field(
        ge=1,
        description="People's preference pairs since the last retrain (distinct choices, thumbs, emotion and nudge "
        "pairs from the log, and imports) that trigger the reward channel, >= 1.",
    )
    combined_fraction: float = Field(
        gt=0.0, le=1.0, description="Both channels at this fraction of their thresholds also trigger, (0, 1]."
    )
    sensor: bool = Field(
        description="The retrain sensor runs by default wherever a Dagster daemon runs (`make ui`, deploy/); false: "
        "it starts stopped (switch it on in the UI's Automation)."
    )
    sensor_interval_seconds: int = Field(ge=5, description="Seconds between retrain sensor evaluations, >= 5.")
    schedule: bool = Field(
        description="The weekly schedule runs by default wherever a Dagster daemon runs; false: it starts stopped."
    )
    weekly_cron: str = Field(min_length=9, description="Cron of the weekly schedule (UTC).")
