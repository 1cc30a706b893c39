"""The whole configuration: one model per YAML section, checked against each other."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from hominem_pipeline.core.config.attune import AttunementConfig
from hominem_pipeline.core.config.base import _Frozen
from hominem_pipeline.core.config.evaluation import (
    EvaluationConfig,
    FixturesConfig,
    HealthConfig,
    ProbesConfig,
)
from hominem_pipeline.core.config.online import (
    HistoryConfig,
    OnlineConfig,
    PrivacyConfig,
    ReplayConfig,
    SlowLoopConfig,
)
from hominem_pipeline.core.config.policy import PolicyConfig, PreferencesConfig
from hominem_pipeline.core.config.project import (
    DimensionConfig,
    ModelsConfig,
    ProjectConfig,
    RetrainConfig,
    RuntimeConfig,
    TrackingConfig,
)
from hominem_pipeline.core.config.prompts import PromptsConfig
from hominem_pipeline.core.config.reward import RewardModelConfig
from hominem_pipeline.core.config.serving import ServingConfig
from hominem_pipeline.core.config.teacher import (
    LabelingConfig,
    TeacherConfig,
    VerifierConfig,
)

DEFAULT_CONFIG_RELPATH = Path("config") / "hominem.yaml"


class HominemConfig(_Frozen):
    project: ProjectConfig = Field(description="Where outputs go and the base seed.")
    tracking: TrackingConfig = Field(description="Where MLflow records runs, metrics and artifacts.")
    runtime: RuntimeConfig = Field(description="Where the networks run.")
    dimensions: list[DimensionConfig] = Field(
        min_length=1,
        description="The reward manifold: the list here is the list everywhere (labels, reward model heads, pairs).",
    )
    models: ModelsConfig = Field(description="The offline models.")
    prompts: PromptsConfig = Field(description="Where each day's prompts come from.")
    teacher: TeacherConfig = Field(description="Who samples and rates the replies.")
    labeling: LabelingConfig = Field(description="What the offline judge is asked.")
    verifier: VerifierConfig = Field(description="Checks on teacher output.")
    reward_model: RewardModelConfig = Field(description="The reward model distilled from the teacher's labels.")
    preferences: PreferencesConfig = Field(description="How preference pairs are built from the ranked candidates.")
    policy: PolicyConfig = Field(description="The student's LoRA adapter.")
    evaluation: EvaluationConfig = Field(description="Base against base+adapter on the held-out prompts.")
    fixtures: FixturesConfig = Field(
        description="Contrast pairs any attentive person agrees on: a yardstick for the reward model and the adapters."
    )
    health: HealthConfig = Field(description="The Reward Health Index and the deploy gate.")
    probes: ProbesConfig = Field(
        description="The probing suite on each day's reward model (`probes` asset, `hominem probe --suite`)."
    )
    retrain: RetrainConfig = Field(description="When the retrain sensor and schedule start a run.")
    serving: ServingConfig = Field(description="`hominem serve`: the chat and feedback service.")
    online: OnlineConfig = Field(
        description="Online updates of the live adapter from the replay buffer, and the fast-loop gate."
    )
    slow_loop: SlowLoopConfig = Field(
        description="The slow loop: the nightly RHI trend lowers the learning rate, shrinks the adapter or freezes, "
        "and undoes it on recovery."
    )
    replay: ReplayConfig = Field(
        description="The replay buffer's priorities and sampler (online updates; the daily dual training with "
        "policy.dual.sampler replay)."
    )
    attunement: AttunementConfig = Field(
        description="Predictions checked against people's later choices: calibration and drift over time, error "
        "clusters, the next question."
    )
    history: HistoryConfig = Field(
        description="The preference history index over the interaction log (`hominem history`): sqlite embedded, "
        "Postgres in a deployment."
    )
    privacy: PrivacyConfig = Field(description="How long raw conversations are kept.")

    # Not a YAML key: the folder relative paths are resolved against (set by `load_config`).
    root: Path = Field(default=Path("."), exclude=True)
    # Not a YAML key: the overlay file the config was loaded with (None: config/hominem.yaml alone), so
    # that messages can give the command to run with the same config.
    overlay: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _cross_checks(self) -> HominemConfig:
        names = [d.name for d in self.dimensions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"dimensions: duplicate names {dupes}")
        weights = set(self.preferences.dimension_weights)
        if weights != set(names):
            raise ValueError(
                "preferences.dimension_weights must name exactly the configured dimensions; "
                f"missing {sorted(set(names) - weights)}, unknown {sorted(weights - set(names))}"
            )
        folder = self.online.memory_folder
        if folder is not None and Path(folder) not in {Path(f) for f in self.policy.dual.memory_files}:
            raise ValueError(
                f"online.memory_folder {folder} is not among policy.dual.memory_files "
                f"{self.policy.dual.memory_files}: "
                "the facts people state would be extracted and never learned; add it there or set "
                "online.memory_folder to null"
            )
        unknown = sorted(set(self.replay.social_dimensions) - set(names))
        if unknown:
            raise ValueError(f"replay.social_dimensions names {unknown}, which are not configured dimensions {names}")
        unknown = sorted(set(self.health.manifold.intended) - set(names) - {"people"})
        if unknown:
            raise ValueError(
                f"health.manifold.intended names {unknown}; it takes configured dimensions {names} or "
                "`people` (the people's score)"
            )
        return self

    @property
    def dimension_names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def path(self, relative: str | os.PathLike[str]) -> Path:
        """Resolve a configured path against the project root."""
        p = Path(relative)
        return p if p.is_absolute() else (self.root / p)

    @property
    def data_dir(self) -> Path:
        return self.path(self.project.data_dir)

    @property
    def mlflow_uri(self) -> str:
        """The tracking URI with a relative sqlite path made absolute (MLflow resolves it against the cwd)."""
        uri = self.tracking.mlflow_uri
        prefix = "sqlite:///"
        if uri.startswith(prefix) and not uri[len(prefix) :].startswith("/"):
            return prefix + str(self.path(uri[len(prefix) :]).resolve())
        return uri

    def section(self, *keys: str) -> dict[str, Any]:
        """The named settings (`teacher`, or dotted like `models.student`) as plain data, keyed by name;
        used to fingerprint a stage's settings and to log them as MLflow params."""
        dumped = self.model_dump(mode="json")
        out: dict[str, Any] = {}
        for key in keys:
            node: Any = dumped
            for part in key.split("."):
                node = node[part]
            out[key] = node
        return out
