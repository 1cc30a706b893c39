"""Configuration: `config/hominem.yaml` parsed into frozen pydantic models.

The YAML file holds every default (the fields here have none, but for the optional keys of a list item such as a
candidate style's `weak`); these models carry each setting's type, allowed range and meaning
(`Field(description=...)`, shown by `hominem config KEY` and in errors). A user's file (`--config PATH`) overlays
the defaults key by key. Any unknown key or bad value fails at start with the key's path, the value, what is allowed
and what the key means.

One module per YAML section (`project.py` holds the small ones about the project itself), the root
model in `hominem.py`, and `loader.py`, which reads the files. Import the models from here.
"""

from hominem_pipeline.core.config.attune import (
    AttunementConfig,
    ClusterConfig,
    DriftConfig,
    SelectionConfig,
    SelectionWeights,
)
from hominem_pipeline.core.config.base import (
    ConfigError,
    LoraConfig,
    PolicyLoraConfig,
    _Frozen,
)
from hominem_pipeline.core.config.evaluation import (
    EvaluationConfig,
    FixturesConfig,
    HealthConfig,
    HealthWeights,
    ManifoldConfig,
    ProbesConfig,
)
from hominem_pipeline.core.config.hominem import DEFAULT_CONFIG_RELPATH, HominemConfig
from hominem_pipeline.core.config.online import (
    SLOW_LOOP_STEPS,
    HistoryConfig,
    NudgesConfig,
    OnlineConfig,
    PrivacyConfig,
    ReplayConfig,
    SlowLoopConfig,
    TasteConfig,
)
from hominem_pipeline.core.config.policy import (
    ChannelsConfig,
    DualConfig,
    PeopleStartConfig,
    PolicyConfig,
    PreferencesConfig,
    RLConfig,
    SafetyGateConfig,
)
from hominem_pipeline.core.config.project import (
    DimensionConfig,
    EncoderModelConfig,
    ModelsConfig,
    ProjectConfig,
    RetrainConfig,
    RuntimeConfig,
    StudentModelConfig,
    TrackingConfig,
)
from hominem_pipeline.core.config.prompts import (
    EvolutionaryGeneratorConfig,
    FreeformGeneratorConfig,
    PerturbationGeneratorConfig,
    PromptGeneratorsConfig,
    PromptsConfig,
    TemplatedGeneratorConfig,
)
from hominem_pipeline.core.config.reward import (
    PairLossConfig,
    PeoplePairsConfig,
    PeopleScoreConfig,
    RewardBackboneConfig,
    RewardLoraConfig,
    RewardLossWeights,
    RewardModelConfig,
    UncertaintyConfig,
)
from hominem_pipeline.core.config.serving import ServingConfig
from hominem_pipeline.core.config.teacher import (
    DEFAULT_KEY_ENV,
    CandidateStyle,
    LabelingConfig,
    ModelPrice,
    TeacherAPIConfig,
    TeacherClientConfig,
    TeacherConfig,
    VerifierConfig,
)

__all__ = [
    "ConfigError",
    "LoraConfig",
    "PolicyLoraConfig",
    "_Frozen",
    "ProjectConfig",
    "RuntimeConfig",
    "TrackingConfig",
    "DimensionConfig",
    "StudentModelConfig",
    "EncoderModelConfig",
    "ModelsConfig",
    "RetrainConfig",
    "TemplatedGeneratorConfig",
    "PerturbationGeneratorConfig",
    "EvolutionaryGeneratorConfig",
    "FreeformGeneratorConfig",
    "PromptGeneratorsConfig",
    "PromptsConfig",
    "CandidateStyle",
    "DEFAULT_KEY_ENV",
    "TeacherAPIConfig",
    "TeacherClientConfig",
    "ModelPrice",
    "TeacherConfig",
    "LabelingConfig",
    "VerifierConfig",
    "RewardLossWeights",
    "RewardLoraConfig",
    "RewardBackboneConfig",
    "PairLossConfig",
    "UncertaintyConfig",
    "PeoplePairsConfig",
    "PeopleScoreConfig",
    "RewardModelConfig",
    "PreferencesConfig",
    "SafetyGateConfig",
    "PeopleStartConfig",
    "ChannelsConfig",
    "DualConfig",
    "RLConfig",
    "PolicyConfig",
    "EvaluationConfig",
    "FixturesConfig",
    "ProbesConfig",
    "HealthWeights",
    "ManifoldConfig",
    "HealthConfig",
    "ServingConfig",
    "ReplayConfig",
    "NudgesConfig",
    "TasteConfig",
    "OnlineConfig",
    "HistoryConfig",
    "PrivacyConfig",
    "SLOW_LOOP_STEPS",
    "SlowLoopConfig",
    "DriftConfig",
    "ClusterConfig",
    "SelectionWeights",
    "SelectionConfig",
    "AttunementConfig",
    "DEFAULT_CONFIG_RELPATH",
    "HominemConfig",
]
