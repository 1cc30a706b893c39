"""Configuration: `config/hominem.yaml` parsed into frozen pydantic models.

The YAML file carries each setting's meaning next to it; these models carry the types and allowed
ranges. A user's file (`--config PATH`) overlays the defaults key by key. Any unknown key or bad value
fails at start with the key's path, the value and what is allowed.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_CONFIG_RELPATH = Path("config") / "hominem.yaml"


class ConfigError(ValueError):
    """A configuration file is missing, unreadable or invalid."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProjectConfig(_Frozen):
    data_dir: str
    partitions_start: dt.date
    seed: int = Field(ge=0)


class TrackingConfig(_Frozen):
    mlflow_uri: str = Field(min_length=1)
    artifact_root: str = Field(min_length=1)
    experiment: str = Field(min_length=1)


class DimensionConfig(_Frozen):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str = Field(min_length=1)
    question: str = Field(min_length=1)


class StudentModelConfig(_Frozen):
    path: str = Field(min_length=1)
    gguf_package: str | None
    hub_id: str | None


class EncoderModelConfig(_Frozen):
    path: str | None
    package: str | None
    package_subdir: str

    @model_validator(mode="after")
    def _one_source(self) -> EncoderModelConfig:
        if not self.path and not self.package:
            raise ValueError("set `path` (an HF encoder folder) or `package` (a package that ships one)")
        return self


class ModelsConfig(_Frozen):
    student: StudentModelConfig
    encoder: EncoderModelConfig


PerturbationKind = Literal["conflict", "ambiguity", "intensity", "typo", "terse"]


class TemplatedGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000)
    file: str


class PerturbationGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000)
    kinds: list[PerturbationKind] = Field(min_length=1)


class EvolutionaryGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000)
    axes: dict[str, str] = Field(min_length=1)  # axis -> what "harder along it" means
    instruction: str = Field(min_length=1)  # with {axis}, {meaning} and {prompt}
    max_new_tokens: int = Field(ge=8, le=2048)


class FreeformGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000)
    instruction: str = Field(min_length=1)  # with {category} and {domain}
    domains: list[str] = Field(min_length=1)
    max_new_tokens: int = Field(ge=8, le=2048)


class PromptGeneratorsConfig(_Frozen):
    templated: TemplatedGeneratorConfig
    perturbation: PerturbationGeneratorConfig
    evolutionary: EvolutionaryGeneratorConfig
    freeform: FreeformGeneratorConfig
    min_words: int = Field(ge=1, le=1000)
    max_words: int = Field(ge=1, le=10_000)
    near_duplicate_similarity: float = Field(gt=0.0, le=1.0)
    evolution_min_similarity: float = Field(ge=-1.0, le=1.0)

    @property
    def uses_teacher(self) -> bool:
        return self.evolutionary.count > 0 or self.freeform.count > 0

    @property
    def enabled(self) -> bool:
        return self.templated.count > 0 or self.perturbation.count > 0 or self.uses_teacher


class PromptsConfig(_Frozen):
    seed_file: str
    categories: list[str] = Field(min_length=1)
    per_partition: int = Field(ge=1, le=100_000)
    eval_per_category: int = Field(ge=0, le=1_000)
    generators: PromptGeneratorsConfig


class CandidateStyle(_Frozen):
    name: str = Field(min_length=1)
    temperature: float = Field(gt=0.0, le=2.0)
    top_p: float = Field(gt=0.0, le=1.0)
    system: str | None = None
    weak: bool = False  # a deliberately weaker variant (terse, careless): drawn for `weak_share` of the candidates


Provider = Literal["local", "anthropic", "openai", "openai_compatible"]
DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


class TeacherAPIConfig(_Frozen):
    """What an API teacher is asked, and of whom (these settings change the answers, so they are part of
    the data's version)."""

    model: str | None
    base_url: str | None
    api_key_env: str | None
    structured_output: Literal["auto", "tool", "json_schema", "prompt"]
    rating_max_tokens: int = Field(ge=64, le=8192)

    def resolved_structured_output(self, provider: str) -> str:
        if self.structured_output != "auto":
            return self.structured_output
        return {"anthropic": "tool", "openai": "json_schema"}.get(provider, "prompt")


class TeacherClientConfig(_Frozen):
    """How API calls are made: these never change an answer, only how fast and how safely it arrives."""

    concurrency: int = Field(ge=1, le=1024)
    requests_per_minute: float | None = Field(gt=0)
    tokens_per_minute: float | None = Field(gt=0)
    timeout_seconds: float = Field(gt=0, le=3600)
    max_retries: int = Field(ge=0, le=20)
    backoff_seconds: float = Field(gt=0, le=600)
    max_backoff_seconds: float = Field(gt=0, le=3600)
    max_retry_after_seconds: float = Field(gt=0, le=3600)
    stream: bool
    cache_path: str | None  # sqlite file of answered calls; null disables the cache


class ModelPrice(_Frozen):
    input: float = Field(ge=0.0)  # USD per million input tokens
    output: float = Field(ge=0.0)  # USD per million output tokens


class TeacherConfig(_Frozen):
    provider: Provider
    candidates_per_prompt: int = Field(ge=2, le=16)
    max_new_tokens: int = Field(ge=1, le=4096)
    batch_size: int = Field(ge=1, le=512)
    weak_share: float = Field(ge=0.0, le=1.0)
    styles: list[CandidateStyle] = Field(min_length=1)
    api: TeacherAPIConfig
    client: TeacherClientConfig
    prices: dict[str, ModelPrice]

    @model_validator(mode="after")
    def _check(self) -> TeacherConfig:
        names = [s.name for s in self.styles]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"styles: duplicate names {dupes}")
        n_weak = round(self.candidates_per_prompt * self.weak_share)
        if n_weak and not any(s.weak for s in self.styles):
            raise ValueError(f"weak_share {self.weak_share} asks for {n_weak} weak candidates per prompt, but no style has `weak: true`")
        if n_weak < self.candidates_per_prompt and all(s.weak for s in self.styles):
            raise ValueError(f"weak_share {self.weak_share} leaves strong candidates, but every style has `weak: true`")
        if self.provider != "local" and not self.api.model:
            raise ValueError(f"provider {self.provider!r} needs `teacher.api.model` (the model name the API serves)")
        if self.provider == "openai_compatible" and not self.api.base_url:
            raise ValueError("provider 'openai_compatible' needs `teacher.api.base_url`, e.g. http://localhost:1234/v1 for LM Studio")
        if self.api.structured_output == "tool" and self.provider not in ("anthropic",):
            raise ValueError(f"structured_output 'tool' is the Anthropic tool-use mode; for {self.provider!r} use json_schema or prompt")
        if self.api.structured_output == "json_schema" and self.provider == "anthropic":
            raise ValueError("for provider 'anthropic' use structured_output 'tool' (or 'prompt')")
        return self

    def key_env(self) -> str | None:
        """The environment variable holding the API key (None: the provider needs no key)."""
        return self.api.api_key_env or DEFAULT_KEY_ENV.get(self.provider)

    def candidate_styles(self) -> list[CandidateStyle]:
        """The style of each candidate of a prompt: strong styles first, then `weak_share` of the
        candidates from the weak styles, each group cycling through its styles in order."""
        n_weak = round(self.candidates_per_prompt * self.weak_share)
        strong = [s for s in self.styles if not s.weak]
        weak = [s for s in self.styles if s.weak]
        n_strong = self.candidates_per_prompt - n_weak
        return [strong[i % len(strong)] for i in range(n_strong)] + [weak[i % len(weak)] for i in range(n_weak)]


class LabelingConfig(_Frozen):
    judge_system: str = Field(min_length=1)
    scalar_question: str = Field(min_length=1)
    intensity_question: str = Field(min_length=1)
    safety_question: str = Field(min_length=1)
    rationale_instruction: str = Field(min_length=1)
    rationale_max_new_tokens: int = Field(ge=1, le=512)
    max_context_tokens: int = Field(ge=32, le=8192)
    api_judge_system: str = Field(min_length=1)  # API teachers: instructions before the dimension list


class VerifierConfig(_Frozen):
    max_failure_rate: float = Field(ge=0.0, le=1.0)


class RewardLossWeights(_Frozen):
    vector: float = Field(ge=0.0)
    scalar: float = Field(ge=0.0)
    intensity: float = Field(ge=0.0)
    safety: float = Field(ge=0.0)


class LoraConfig(_Frozen):
    r: int = Field(ge=1, le=1024)
    alpha: float = Field(gt=0.0)
    dropout: float = Field(ge=0.0, lt=1.0)
    target_modules: list[str] = Field(min_length=1)


class RewardLoraConfig(LoraConfig):
    target_modules: list[str] | None  # None: the backbone's attention projections (PEFT's default for its type)


class RewardBackboneConfig(_Frozen):
    path: str | None  # None: models.encoder; "student": models.student; else a folder or an HF id
    kind: Literal["auto", "encoder", "decoder"]
    pooling: Literal["auto", "mean", "last", "last_mean"]  # auto: mean for encoders, the last real token for decoders
    finetune: Literal["full", "lora", "frozen"]
    # pair: [CLS] prompt [SEP] reply [SEP]. judge: a chat model reads the exchange in the local judge's
    # frame (its chat template, the judge's system text, "Conversation to judge: User: ... Assistant: ...")
    # judge_question: the judge frame followed by the judge's overall question (labeling.scalar_question) up to
    # "Rating: ", so the heads read the state where the judge gives its rating
    frame: Literal["pair", "judge", "judge_question"]
    # Keep only the first `depth` transformer layers (null: all): the heads read the state after them. A causal
    # LM's middle layers carry more of what a judge weighs than its last, and the cut model is faster and smaller.
    depth: int | None = Field(ge=1, le=1000)
    # Pool the states after these layers (1 = the first block's output, counted within depth), side by side,
    # instead of the last one alone (null). A sentence encoder's last layer is tuned for similarity; its
    # middle layers order more human preferences (docs/BENCHMARKS.md).
    layers: list[int] | None = Field(default=None, min_length=1)
    lora: RewardLoraConfig


class PairLossConfig(_Frozen):
    weight: float = Field(ge=0.0)  # Bradley-Terry loss on the scalar head, next to the regression losses
    scale: float = Field(gt=0.0, le=100.0)  # logit = scale * (scalar_chosen - scalar_rejected); the scalar lives in [-1, 1]
    teacher_weight: float = Field(ge=0.0)  # per pair: same-prompt teacher pairs (scalar gap >= 0.1)
    human_weight: float = Field(ge=0.0)  # per pair: human_preferences pairs


class UncertaintyConfig(_Frozen):
    method: Literal["ensemble", "mc_dropout", "none"]
    members: int = Field(ge=1, le=64)  # ensemble: heads on the shared backbone, each on its own bootstrap weights
    mc_samples: int = Field(ge=2, le=256)  # mc_dropout: stochastic forward passes per score() call


class RewardModelConfig(_Frozen):
    window_days: int = Field(ge=1, le=3650)
    backbone: RewardBackboneConfig
    max_length: int = Field(ge=16, le=4096)
    epochs: int = Field(ge=1, le=1000)
    batch_size: int = Field(ge=1, le=4096)
    learning_rate: float = Field(gt=0.0, lt=1.0)
    head_learning_rate: float = Field(gt=0.0, lt=1.0)
    weight_decay: float = Field(ge=0.0, lt=1.0)
    val_fraction: float = Field(gt=0.0, lt=1.0)
    early_stopping_patience: int = Field(ge=1, le=1000)
    loss_weights: RewardLossWeights
    pair_loss: PairLossConfig
    rationale_weight: float = Field(ge=0.0)  # auxiliary target: the embedding of the teacher's rationale (0: off)
    uncertainty: UncertaintyConfig
    human_preferences: bool  # train on the human_preferences pairs of the window too
    dropout: float = Field(ge=0.0, lt=1.0)
    length_feature: bool  # heads also read log(real tokens): see reward_model.RewardNet
    # gradient: heads trained with the losses above, early stopping. ridge: with a frozen backbone, the heads
    # solved in closed form on standardised features (per member, on its bootstrap), the penalty picked by
    # cross-validation over the training prompts; no pair losses (human pairs then only measure it)
    head_fit: Literal["gradient", "ridge"]
    ridge_alphas: list[float]

    @model_validator(mode="after")
    def _check(self) -> RewardModelConfig:
        if self.head_fit == "ridge" and self.backbone.finetune != "frozen":
            raise ValueError(f"head_fit ridge solves the heads on fixed features: set reward_model.backbone.finetune to frozen (it is {self.backbone.finetune!r}), or use head_fit gradient")
        if not self.ridge_alphas or min(self.ridge_alphas) <= 0:
            raise ValueError(f"ridge_alphas {self.ridge_alphas}: give one or more penalties above 0")
        return self


class PreferencesConfig(_Frozen):
    dimension_weights: dict[str, float]
    strategy: Literal["margin", "best_vs_worst", "per_dimension"]
    rank_by: Literal["teacher", "reward_model"]  # whose vectors rank a prompt's candidates
    guard_dimension: str | None  # per_dimension: the chosen reply may not be worse on it
    min_margin: float = Field(ge=0.0, le=2.0)
    min_scalar_margin: float | None = Field(ge=0.0, le=2.0)  # None: the overall score is not consulted
    max_pairs_per_prompt: int = Field(ge=1, le=1000)
    against_student: bool  # also pair each prompt's best candidate against the student's own reply

    @model_validator(mode="after")
    def _student_needs_reward_model(self) -> "PreferencesConfig":
        if self.against_student and self.rank_by != "reward_model":
            raise ValueError(
                "preferences.against_student needs preferences.rank_by: reward_model (the student's replies carry no "
                f"teacher label to rank them by, and rank_by is {self.rank_by!r}); set rank_by: reward_model or against_student: false"
            )
        return self

    @field_validator("dimension_weights")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: w for k, w in v.items() if not w > 0}
        if bad:
            raise ValueError(f"weights must be > 0, got {bad}")
        return v


class SafetyGateConfig(_Frozen):
    """See `losses.SafetyGate`: how each example's safety_score gates what is learned from it."""

    pass_at: float = Field(ge=0.0, le=1.0)
    unsafe_below: float = Field(ge=0.0, le=1.0)
    unsafe: Literal["skip", "invert"]
    between: Literal["downweight", "pass", "skip"]
    downweight_by: Literal["factor", "score"]
    factor: float = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _ordered(self) -> "SafetyGateConfig":
        if self.unsafe_below > self.pass_at:
            raise ValueError(f"policy.safety_gate: unsafe_below ({self.unsafe_below}) must not exceed pass_at ({self.pass_at})")
        return self


class DualConfig(_Frozen):
    """The dual-channel loss: w_sft * L_sft + intensity * w_reward * L_reward per example."""

    sft_weight: float = Field(ge=0.0)
    reward_weight: float = Field(ge=0.0)
    memory_weight: float | None = Field(ge=0.0)  # w_sft of memory-file rows; None: sft_weight
    intensity_source: Literal["teacher", "reward_model", "constant"]
    safety_source: Literal["teacher", "reward_model"]
    normalize_intensity: bool  # divide by the mean over the training pairs: intensity redistributes, w_reward sets the strength
    memory_files: list[str]  # JSONL files or folders of them (instruction-response rows)
    mixing: Literal["fixed", "availability"]
    memory_fraction: float = Field(ge=0.0, le=1.0)  # fixed: memory rows' share of each batch; availability: the most it may be
    memory_rows: Literal["share", "extra"]  # share: memory rows take pair rows' places; extra: added to batch_size pair rows
    memory_margin: float | None = Field(ge=0.0)  # None: memory rows taught (plain NLL); m: anchored, learned only while their NLL is above the base's minus m
    memory_stop: bool  # True: memory rows also train their end-of-turn; False: the reply only (facts without their length)

    @model_validator(mode="after")
    def _some_channel(self) -> "DualConfig":
        if self.sft_weight == 0 and self.reward_weight == 0 and not self.memory_weight:
            raise ValueError("policy.dual: sft_weight, reward_weight and memory_weight are all 0 or unset, so nothing would be learned; set one above 0")
        return self


class RLConfig(_Frozen):
    """Policy-gradient on the reward model (TRL's GRPO or RLOO)."""

    algorithm: Literal["grpo", "rloo"]
    reward: Literal["scalar", "vector"]  # vector: preferences.dimension_weights' weighted mean of the reward vector
    num_generations: int = Field(ge=2, le=64)  # completions sampled per prompt (the group)
    max_new_tokens: int = Field(ge=1, le=4096)
    temperature: float = Field(gt=0.0, le=5.0)
    kl_beta: float = Field(ge=0.0, le=10.0)  # KL penalty to the base (the adapter switched off)


class PolicyConfig(_Frozen):
    mode: Literal["dpo", "dual", "rl"]
    seed: int = Field(ge=0)  # 0: the stage's seed; another value trains the same data with other random draws
    window_days: int = Field(ge=1, le=3650)
    lora: LoraConfig
    beta: float = Field(gt=0.0, le=10.0)
    learning_rate: float = Field(gt=0.0, lt=1.0)
    max_steps: int = Field(ge=1, le=1_000_000)
    batch_size: int = Field(ge=1, le=4096)
    gradient_accumulation_steps: int = Field(ge=1, le=4096)
    max_length: int = Field(ge=16, le=32768)
    safety_gate: SafetyGateConfig
    dual: DualConfig
    rl: RLConfig


class EvaluationConfig(_Frozen):
    max_new_tokens: int = Field(ge=1, le=4096)
    batch_size: int = Field(ge=1, le=512)
    repetition_penalty: float = Field(ge=1.0, le=2.0)
    memory_probe: bool  # ask the memory files' questions that carry a `fact` of base and adapter


class HealthWeights(_Frozen):
    dcs: float = Field(ge=0.0, le=1.0)
    gvs: float = Field(ge=0.0, le=1.0)
    mss: float = Field(ge=0.0, le=1.0)
    cdrs: float = Field(ge=0.0, le=1.0)
    lrps: float = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sum_to_one(self) -> HealthWeights:
        total = self.dcs + self.gvs + self.mss + self.cdrs + self.lrps
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the five RHI weights must sum to 1, they sum to {total:.4f}")
        return self


class HealthConfig(_Frozen):
    weights: HealthWeights
    gvi_max_reference: float = Field(gt=0.0)
    perturbations_per_response: int = Field(ge=1, le=100)
    deploy_threshold: float = Field(ge=0.0, le=1.0)
    min_win_rate: float = Field(ge=0.0, le=1.0)


class RetrainConfig(_Frozen):
    memory_conversations: int = Field(ge=1)
    reward_pairs: int = Field(ge=1)
    combined_fraction: float = Field(gt=0.0, le=1.0)
    sensor_interval_seconds: int = Field(ge=30)
    weekly_cron: str = Field(min_length=9)


class HominemConfig(_Frozen):
    project: ProjectConfig
    tracking: TrackingConfig
    dimensions: list[DimensionConfig] = Field(min_length=1)
    models: ModelsConfig
    prompts: PromptsConfig
    teacher: TeacherConfig
    labeling: LabelingConfig
    verifier: VerifierConfig
    reward_model: RewardModelConfig
    preferences: PreferencesConfig
    policy: PolicyConfig
    evaluation: EvaluationConfig
    health: HealthConfig
    retrain: RetrainConfig

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
