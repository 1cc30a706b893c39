"""Configuration: `config/hominem.yaml` parsed into frozen pydantic models.

The YAML file holds every default (the fields here have none, but for the optional keys of a list
item such as a candidate style's `weak`); these models carry each setting's type, allowed range and
meaning (`Field(description=...)`, shown by `hominem config KEY` and in errors). A user's file (`--config PATH`) overlays the defaults key by key. Any unknown key or bad
value fails at start with the key's path, the value, what is allowed and what the key means.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from hominem_pipeline.core.config_attune import AttunementConfig  # noqa: F401 (re-exported)
from hominem_pipeline.core.config_base import ConfigError, LoraConfig, PolicyLoraConfig, _Frozen  # noqa: F401 (re-exported)
from hominem_pipeline.core.config_online import SLOW_LOOP_STEPS, HistoryConfig, NudgesConfig, OnlineConfig, ReplayConfig, SlowLoopConfig  # noqa: F401 (re-exported)
from hominem_pipeline.core.config_reward import (  # noqa: F401 (re-exported)
    PairLossConfig,
    PeoplePairsConfig,
    PeopleScoreConfig,
    RewardBackboneConfig,
    RewardLoraConfig,
    RewardLossWeights,
    RewardModelConfig,
    UncertaintyConfig,
)

DEFAULT_CONFIG_RELPATH = Path("config") / "hominem.yaml"


class ProjectConfig(_Frozen):
    data_dir: str = Field(description="Folder of every output: data/<asset>/<date>/<version>/, the models, the MLflow and Dagster stores; relative to the project root.")
    partitions_start: dt.date | None = Field(description="First daily partition Dagster offers (YYYY-MM-DD); null: the project's first built day (today before any), so the catalog's fill is the project's own.")
    seed: int = Field(ge=0, description="Base seed, >= 0; each stage derives its own from it and the partition date.")

    def before_start(self, day: dt.date | str) -> bool:
        """`day` lies before a configured partitions_start (never, with null: the first built day reaches back)."""
        return self.partitions_start is not None and dt.date.fromisoformat(str(day)) < self.partitions_start


class RuntimeConfig(_Frozen):
    device: Literal["auto", "cpu", "cuda"] = Field(description="Where the networks run: auto (CUDA when torch sees a GPU, else the CPU), cpu, or cuda (an error without one). Changes how fast, not what is built (not part of any version).")
    dagster_home: str | None = Field(description="The Dagster instance's folder (its dagster.yaml); null: the embedded one, data/dagster with the project's dagster.yaml (sqlite). A deployment: a folder holding deploy/dagster.yaml's kind (Postgres storage, the run queue). $DAGSTER_HOME is not read: this says which.")
    launch: Literal["in_process", "queue"] = Field(description="in_process: `hominem run` executes the run itself; queue: it submits the run to the instance's run queue (the daemon launches it; the UI sees and controls it) and waits for it.")
    executor: Literal["in_process", "multiprocess", "celery"] = Field(description="Where a run's steps execute: in_process (one process), multiprocess (a process per step), celery (a task per step on Celery workers: `dagster-celery worker start`).")
    max_concurrent_steps: int = Field(ge=1, le=64, description="multiprocess: steps at once, 1-64.")
    celery_broker: str | None = Field(description="celery: the broker and result backend URL (redis://host:6379/0); $HOMINEM_CELERY_BROKER, when set, is used instead.")
    train_processes: int = Field(ge=1, le=64, description="Processes the daily adapter trains in (`lora_adapter`, every mode), 1-64: 1 trains in the stage's own process; more start them with `accelerate launch` on this machine (data-parallel, gradients averaged; on GPUs one per GPU, at most as many as torch sees). Changes how fast, not what is built (not part of any version).")


class TrackingConfig(_Frozen):
    mlflow_uri: str = Field(min_length=1, description="MLflow tracking URI; a relative sqlite path is relative to the project root.")
    artifact_root: str = Field(min_length=1, description="Where a new MLflow experiment stores its artifacts (not used with a tracking server, http://..., which keeps its own: --artifacts-destination).")
    experiment: str = Field(min_length=1, description="MLflow experiment name.")
    ui_url: str = Field(min_length=1, description="Where the MLflow UI is served (`hominem ui`: http://127.0.0.1:5000); each asset page in Dagster links its MLflow run there.")


class DimensionConfig(_Frozen):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Dimension name: lower case, digits and underscores.")
    description: str = Field(min_length=1, description="What the dimension means (shown to API judges).")
    question: str = Field(min_length=1, description="What the offline rubric judge is asked for this dimension (1 = very poor, 5 = excellent).")


class StudentModelConfig(_Frozen):
    path: str = Field(min_length=1, description="HF folder of the student model; built once from gguf_package when missing.")
    gguf_package: str | None = Field(description="Python package that ships the student's GGUF file; null: path must exist.")
    hub_id: str | None = Field(description="The base model's Hugging Face id, named in adapters' model cards (never downloaded); null: unknown.")


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
    encoder: EncoderModelConfig = Field(description="The sentence encoder (MiniLM): near-duplicate filtering, the encoder reward backbone.")


PerturbationKind = Literal["conflict", "ambiguity", "intensity", "typo", "terse"]


class TemplatedGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000, description="Prompts a day, >= 0.")
    file: str = Field(description="YAML of templates and the lists their slots are filled from.")


class PerturbationGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000, description="Prompts a day, >= 0.")
    kinds: list[PerturbationKind] = Field(min_length=1, description="Perturbations drawn from: conflict, ambiguity, intensity, typo, terse.")


class EvolutionaryGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000, description="Prompts a day, >= 0 (the teacher rewrites a sampled prompt to be harder along one axis).")
    axes: dict[str, str] = Field(min_length=1, description="Axis name -> what harder along it means.")
    instruction: str = Field(min_length=1, description="Instruction to the teacher, with {axis}, {meaning} and {prompt}.")
    max_new_tokens: int = Field(ge=8, le=2048, description="Tokens the teacher may write, 8-2048.")


class FreeformGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000, description="Prompts a day, >= 0 (the teacher writes new prompts from the instruction and a domain).")
    instruction: str = Field(min_length=1, description="Instruction to the teacher, with {category} and {domain}.")
    domains: list[str] = Field(min_length=1, description="Domains drawn from.")
    max_new_tokens: int = Field(ge=8, le=2048, description="Tokens the teacher may write, 8-2048.")


class PromptGeneratorsConfig(_Frozen):
    templated: TemplatedGeneratorConfig = Field(description="Slots of templates filled from lists.")
    perturbation: PerturbationGeneratorConfig = Field(description="A sampled seed prompt with added conflict, ambiguity, emotional intensity, typos, or made terse.")
    evolutionary: EvolutionaryGeneratorConfig = Field(description="The teacher rewrites a sampled prompt to be harder along one axis (Evol-Instruct).")
    freeform: FreeformGeneratorConfig = Field(description="The teacher writes new prompts from an instruction and a domain.")
    min_words: int = Field(ge=1, le=1000, description="Teacher-written prompts shorter than this are dropped.")
    max_words: int = Field(ge=1, le=10_000, description="Teacher-written prompts longer than this are dropped.")
    near_duplicate_similarity: float = Field(gt=0.0, le=1.0, description="A generated prompt at or above this embedding cosine similarity to a seed, evaluation or other generated prompt is dropped (0-1; not compared with its own parent).")
    evolution_min_similarity: float = Field(ge=-1.0, le=1.0, description="An evolved prompt less similar than this to its parent has lost the situation and is dropped (-1 to 1).")

    @property
    def uses_teacher(self) -> bool:
        return self.evolutionary.count > 0 or self.freeform.count > 0

    @property
    def enabled(self) -> bool:
        return self.templated.count > 0 or self.perturbation.count > 0 or self.uses_teacher


class PromptsConfig(_Frozen):
    seed_file: str = Field(description="YAML of seed prompts, each with a category.")
    categories: list[str] = Field(min_length=1, description="Prompt categories; every seed prompt's category must be one of them.")
    per_partition: int = Field(ge=1, le=100_000, description="Seed prompts sampled (stratified by category) into each daily partition.")
    eval_per_category: int = Field(ge=0, le=1_000, description="Prompts per category held out of training for the evaluation stage.")
    generators: PromptGeneratorsConfig = Field(description="Generated prompts joining the day's seed prompts, seeded by the partition; near-duplicates dropped.")


class CandidateStyle(_Frozen):
    name: str = Field(min_length=1, description="Style name, unique.")
    temperature: float = Field(gt=0.0, le=2.0, description="Sampling temperature, (0, 2] (the Anthropic API from version 2026-10-21 ignores it).")
    top_p: float = Field(gt=0.0, le=1.0, description="Nucleus sampling mass, (0, 1].")
    system: str | None = Field(default=None, description="System prompt of this style; null: none.")
    weak: bool = Field(default=False, description="A deliberately weaker style (terse, careless), drawn for `weak_share` of the candidates.")


Provider = Literal["local", "anthropic", "openai", "openai_compatible"]
DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


class TeacherAPIConfig(_Frozen):
    """What an API teacher is asked, and of whom (these settings change the answers, so they are part of
    the data's version)."""

    model: str | None = Field(description="Model the API serves, e.g. claude-sonnet-4-6, gpt-4o-mini, or the name a local server shows.")
    base_url: str | None = Field(description="API base URL; null: the provider's own (e.g. http://localhost:1234/v1 for LM Studio).")
    api_key_env: str | None = Field(description="Environment variable holding the key; null: ANTHROPIC_API_KEY / OPENAI_API_KEY (openai_compatible needs none).")
    structured_output: Literal["auto", "tool", "json_schema", "prompt"] = Field(description="How a label comes back: tool (Anthropic tool use), json_schema (OpenAI response_format), prompt (schema in the prompt, any server), auto (by provider).")
    rating_max_tokens: int = Field(ge=64, le=8192, description="Tokens an API judge may write per rating, 64-8192.")

    def resolved_structured_output(self, provider: str) -> str:
        if self.structured_output != "auto":
            return self.structured_output
        return {"anthropic": "tool", "openai": "json_schema"}.get(provider, "prompt")


class TeacherClientConfig(_Frozen):
    """How API calls are made: these never change an answer, only how fast and how safely it arrives."""

    concurrency: int = Field(ge=1, le=1024, description="API calls in flight at once, 1-1024.")
    requests_per_minute: float | None = Field(gt=0, description="Request rate limit; null: none.")
    tokens_per_minute: float | None = Field(gt=0, description="Input + output token rate limit; null: none.")
    timeout_seconds: float = Field(gt=0, le=3600, description="Seconds before a call times out.")
    max_retries: int = Field(ge=0, le=20, description="Retries on 429, 5xx, timeouts and dropped connections, 0-20.")
    backoff_seconds: float = Field(gt=0, le=600, description="First retry's wait; it doubles, with jitter.")
    max_backoff_seconds: float = Field(gt=0, le=3600, description="Longest wait between retries.")
    max_retry_after_seconds: float = Field(gt=0, le=3600, description="A server asking to wait longer than this fails the call instead.")
    stream: bool = Field(description="Stream candidate replies (doubles the client's CPU per call).")
    cache_path: str | None = Field(description="SQLite file of answered calls by content fingerprint; null: no cache.")
    cache_url: str | None = Field(description="Instead of cache_path: a database every worker host shares (postgresql+psycopg2://user@host/db); $HOMINEM_CALL_CACHE_URL, when set, is used instead; null: cache_path.")


class ModelPrice(_Frozen):
    input: float = Field(ge=0.0, description="USD per million input tokens.")
    output: float = Field(ge=0.0, description="USD per million output tokens.")


class TeacherConfig(_Frozen):
    provider: Provider = Field(description="local (the HF chat model at models.student, offline) | anthropic | openai | openai_compatible (any server speaking OpenAI Chat Completions at api.base_url).")
    candidates_per_prompt: int = Field(ge=2, le=16, description="Replies sampled per prompt, 2-16.")
    max_new_tokens: int = Field(ge=1, le=4096, description="Tokens per sampled reply.")
    batch_size: int = Field(ge=1, le=512, description="Local teacher: prompts generated together (left-padded).")
    weak_share: float = Field(ge=0.0, le=1.0, description="Share of each prompt's candidates drawn from the weak styles, 0-1.")
    styles: list[CandidateStyle] = Field(min_length=1, description="Candidate styles: strong ones take the first candidates, weak ones the rest, each group cycling in order.")
    api: TeacherAPIConfig = Field(description="What an API teacher is asked (part of the data's version).")
    client: TeacherClientConfig = Field(description="How API calls are made (never changes an answer, so not part of the version).")
    prices: dict[str, ModelPrice] = Field(description="Model -> USD per million tokens, for the cost figures (a model missing here gets none, with a warning).")

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
    judge_system: str = Field(min_length=1, description="Offline judge's system text.")
    scalar_question: str = Field(min_length=1, description="Offline judge's overall question (the scalar).")
    intensity_question: str = Field(min_length=1, description="Offline judge's question for reward_intensity.")
    safety_question: str = Field(min_length=1, description="Offline judge's question for safety_score.")
    rationale: Literal["scores", "written"] = Field(
        description="The offline judge's rationale: scores (read off its own rubric answers: overall, best and worst "
        "dimension) or written (the judge writes a sentence, rationale_instruction; a pass of generation per candidate).")
    rationale_instruction: str = Field(min_length=1, description="What the offline judge is asked for its one-sentence rationale (rationale: written).")
    rationale_max_new_tokens: int = Field(ge=1, le=512, description="Tokens of the offline judge's rationale, 1-512.")
    max_context_tokens: int = Field(ge=32, le=8192, description="Prompt + reply tokens shown to the offline judge (the reply is cut from the end).")
    api_judge_system: str = Field(min_length=1, description="API judges' instructions; the dimensions and ranges are appended.")
    served_turns: int = Field(ge=0, le=10_000, description="The day's teacher_labels also rate this many of the replies `hominem serve` wrote the day before (its interaction log): those people gave feedback on first, then the newest; each row keeps its turn id. 0: none.")


class VerifierConfig(_Frozen):
    max_failure_rate: float = Field(ge=0.0, le=1.0, description="Share of quarantined rows (failed a blocking check) above which the teacher_labels check and `hominem data validate` fail, 0-1.")
    min_reply_logp: float | None = Field(le=0.0, description="A candidate the student finds less likely than this per reply token (mean log-probability in nats, <= 0; word salad, a string of emoji), or one with no words or one word over and over, is flagged degenerate: a warning of the teacher_labels check and `hominem data validate`, and never the chosen reply of a preference pair. null: no flag.")


class PreferencesConfig(_Frozen):
    dimension_weights: dict[str, float] = Field(description="Weight of each dimension in the aggregate that ranks candidates, each > 0.")
    strategy: Literal["margin", "best_vs_worst", "per_dimension"] = Field(description="margin (every same-prompt pair with an aggregate gap >= min_margin) | best_vs_worst (one pair per prompt) | per_dimension (the chosen reply wins one dimension without losing on guard_dimension).")
    rank_by: Literal["teacher", "reward_model"] = Field(description="Whose vectors rank a prompt's candidates: teacher (its labels) | reward_model (the reward model's scores).")
    guard_dimension: str | None = Field(description="per_dimension: the chosen reply may not be worse on this dimension; null: no guard.")
    min_margin: float = Field(ge=0.0, le=2.0, description="Pairs whose aggregate gap is below this are dropped as near-ties, 0-2.")
    min_scalar_margin: float | None = Field(ge=0.0, le=2.0, description="Also drop pairs whose overall-score gap is below this, 0-2; null: the overall score is not consulted.")
    max_pairs_per_prompt: int = Field(ge=1, le=1000, description="Largest-margin pairs kept per prompt.")
    against_student: bool = Field(description="Also pair each prompt's best candidate against the base student's own reply (needs rank_by: reward_model).")

    @model_validator(mode="after")
    def _student_needs_reward_model(self) -> PreferencesConfig:
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

    pass_at: float = Field(ge=0.0, le=1.0, description="safety_score at or above which an example counts fully, 0-1.")
    unsafe_below: float = Field(ge=0.0, le=1.0, description="safety_score below which an example is unsafe, 0-1, at most pass_at.")
    unsafe: Literal["skip", "invert"] = Field(description="What happens to unsafe examples: skip | invert (learned away from).")
    between: Literal["downweight", "pass", "skip"] = Field(description="Examples between the two: downweight | pass | skip.")
    downweight_by: Literal["factor", "score"] = Field(description="factor (times `factor`) | score (times the safety_score).")
    factor: float = Field(ge=0.0, le=1.0, description="Down-weighting factor, 0-1.")

    @model_validator(mode="after")
    def _ordered(self) -> SafetyGateConfig:
        if self.unsafe_below > self.pass_at:
            raise ValueError(f"policy.safety_gate: unsafe_below ({self.unsafe_below}) must not exceed pass_at ({self.pass_at})")
        return self


class PeopleStartConfig(_Frozen):
    """How `hominem data ship-features` trains the people's start (`policy.people_start`)."""

    max_steps: int = Field(ge=1, description="Optimizer steps over the people's training pairs (400 at batch 4: about one pass over them), >= 1.")
    learning_rate: float = Field(gt=0.0, description="AdamW peak learning rate (linear decay over max_steps), > 0.")


class ChannelsConfig(_Frozen):
    """The dual loss's two channels as the optimizer sees them: the memory channel (the next-token loss of
    chosen replies and memory rows) and the reward channel (the DPO loss)."""

    memory_lr_factor: float = Field(gt=0.0, le=100.0, description="The memory channel's learning rate as a factor of the one in force (policy's, online's, times the slow loop's), > 0.")
    reward_lr_factor: float = Field(gt=0.0, le=100.0, description="The reward channel's, the same way. Both 1: one AdamW on the channels' summed gradient; else each channel has its own AdamW (its own moments) at its rate: two backward passes a step.")
    monitor_every: int = Field(ge=0, description="Every k-th step (the first, then k later, ...) each channel's share of the gradient, |g_c| / (|g_memory| + |g_reward|), is measured (a second backward pass), >= 0; 0: never.")
    max_share: float | None = Field(gt=0.5, le=1.0, description="A channel whose measured share exceeds this is scaled down to it from that step on (its loss weighted by a balance factor), 0.5-1; null: reported, never rebalanced.")

    @property
    def split(self) -> bool:
        """Each channel has its own optimizer."""
        return self.memory_lr_factor != 1.0 or self.reward_lr_factor != 1.0

    def trains_differently(self) -> bool:
        """Settings that change what is learned (monitoring alone does not)."""
        return self.split or self.max_share is not None


class DualConfig(_Frozen):
    """The dual-channel loss: w_sft * L_sft + intensity * w_reward * L_reward per example."""

    sft_weight: float = Field(ge=0.0, description="w_sft >= 0: weight of the memory channel (next-token loss of the chosen replies).")
    reward_weight: float = Field(ge=0.0, description="w_reward >= 0: weight of the reward channel (DPO loss of the pair, times its intensity).")
    memory_weight: float | None = Field(ge=0.0, description="w_sft of memory-file rows (facts to keep), >= 0; null: sft_weight.")
    intensity_source: Literal["teacher", "reward_model", "constant"] = Field(description="teacher (the chosen reply's label) | reward_model (scored at the start) | constant (1).")
    safety_source: Literal["teacher", "reward_model"] = Field(description="Whose safety_score gates a pair: teacher | reward_model.")
    normalize_intensity: bool = Field(description="Divide intensities by their mean over the training pairs (they redistribute learning; reward_weight sets its strength).")
    memory_files: list[str] = Field(description="Instruction-response JSONL files or folders of them; a row with a `fact` is also a memory-probe question.")
    mixing: Literal["fixed", "availability"] = Field(description="fixed (memory_fraction of each batch) | availability (the memory rows' share of all rows, at most memory_fraction).")
    memory_fraction: float = Field(ge=0.0, le=1.0, description="Memory rows' share of a batch (fixed) or its upper bound (availability), 0-1.")
    memory_rows: Literal["share", "extra"] = Field(description="share (memory rows take pair rows' places in batch_size) | extra (added to batch_size pair rows).")
    memory_margin: float | None = Field(ge=0.0, description="null: memory rows are taught every step; m >= 0: a row pulls only while its loss is above the base's minus m nats/token.")
    memory_stop: bool = Field(description="Memory rows also train the end-of-turn after their reply (false: the reply only).")
    sampler: Literal["uniform", "replay"] = Field(description="uniform (every pair once per pass, reshuffled) | replay (each batch's pairs drawn by the replay section's sampler: recent and old, by priority and at random).")
    people_share: float = Field(ge=0.0, le=1.0, description="Share of each batch's pair rows drawn from people's own pairs (the shipped ones but the held-out, the window's imported pairs and page choices), each once per pass; the rest are the ranked candidates' pairs, 0-1; 0: those alone.")
    channels: ChannelsConfig = Field(description="Per-channel learning rates and the dominance monitor (each channel's share of the gradient, rebalanced above max_share).")
    people_start: PeopleStartConfig | None = Field(description="The daily adapter starts from the people's start shipped in config/human/features (an adapter trained once on the people's training pairs, these settings; `policy.people_start`) where it was built for this student, LoRA shape and pairs; null: from a fresh LoRA.")

    @model_validator(mode="after")
    def _some_channel(self) -> DualConfig:
        if self.sft_weight == 0 and self.reward_weight == 0 and not self.memory_weight:
            raise ValueError("policy.dual: sft_weight, reward_weight and memory_weight are all 0 or unset, so nothing would be learned; set one above 0")
        return self


class RLConfig(_Frozen):
    """Policy-gradient on the reward model (TRL's GRPO or RLOO)."""

    algorithm: Literal["grpo", "rloo"] = Field(description="grpo | rloo (TRL).")
    reward: Literal["scalar", "vector"] = Field(description="scalar | vector (the reward vector weighted by preferences.dimension_weights).")
    num_generations: int = Field(ge=2, le=64, description="Completions sampled per prompt, compared within their group, 2-64.")
    max_new_tokens: int = Field(ge=1, le=4096, description="Tokens per sampled completion.")
    temperature: float = Field(gt=0.0, le=5.0, description="Sampling temperature, (0, 5].")
    kl_beta: float = Field(ge=0.0, le=10.0, description="KL penalty to the base (the adapter switched off), 0-10.")


class PolicyConfig(_Frozen):
    mode: Literal["dpo", "dual", "rl"] = Field(description="dual (the dual-channel loss, safety-gated) | dpo (TRL's DPO) | rl (GRPO / RLOO on the reward model, safety-gated).")
    seed: int = Field(ge=0, description="0: the stage's own seed; another value retrains on the same pairs with other random draws.")
    window_days: int = Field(ge=1, le=3650, description="Trains on preference_pairs of this many days up to its own partition.")
    lora: PolicyLoraConfig = Field(description="LoRA adapter on the student.")
    beta: float = Field(gt=0.0, le=10.0, description="DPO temperature (dpo, and dual's reward channel), > 0.")
    learning_rate: float = Field(gt=0.0, lt=1.0, description="AdamW learning rate of the adapter.")
    max_steps: int = Field(ge=1, le=1_000_000, description="Optimizer steps.")
    batch_size: int = Field(ge=1, le=4096, description="Rows per step (dual: preference and memory rows together; rl: prompts).")
    gradient_accumulation_steps: int = Field(ge=1, le=4096, description="Batches accumulated per optimizer step.")
    max_length: int = Field(ge=16, le=32768, description="Prompt + reply tokens per example.")
    safety_gate: SafetyGateConfig = Field(description="How each example's safety_score gates what is learned from it.")
    dual: DualConfig = Field(description="The dual-channel loss: w_sft * L_sft + intensity * w_reward * L_dpo per example.")
    rl: RLConfig = Field(description="Policy-gradient on the reward model.")


class EvaluationConfig(_Frozen):
    max_new_tokens: int = Field(ge=1, le=4096, description="Tokens per evaluation reply.")
    batch_size: int = Field(ge=1, le=512, description="Prompts generated together.")
    repetition_penalty: float = Field(ge=1.0, le=2.0, description="Repetition penalty of the greedy decoding, 1-2.")
    plain_start: bool = Field(description="A reply may not start with an emoji or symbol token.")
    memory_probe: bool = Field(description="Also ask base and adapter the memory files' fact questions: what the adapter kept, lost and gained.")


class FixturesConfig(_Frozen):
    file: str | None = Field(description="Hand-written contrast pairs (YAML: tag, prompt, better, worse), relative to the project root; null: no fixture figures or checks.")
    min_accuracy: float = Field(ge=0.0, le=1.0, description="The asset check reward_fixtures warns when the reward model's scalar prefers the better reply less often than this (0 to 1).")
    min_tag_accuracy: float = Field(ge=0.0, le=1.0, description="... or less often than this within any one tag (0 to 1).")
    min_dimension_accuracy: float = Field(ge=0.0, le=1.0, description="The asset check reward_dimension_fixtures warns when, on the fixtures whose tag is about one dimension, that dimension alone prefers the better reply less often than this (0 to 1).")
    min_dimension_tag_accuracy: float = Field(ge=0.0, le=1.0, description="... or less often than this within any one such tag (0 to 1).")


class ProbesConfig(_Frozen):
    tradeoffs: str | None = Field(description="Trade-off scenarios (YAML: id, trade, prompt, a, b, a_higher, b_higher, prefer), relative to the project root; null: none.")
    counterfactuals: str | None = Field(description="Counterfactual queries (YAML: id, change, dimension, direction, prompt, reply, changed), relative to the project root; null: none.")
    adversarial_pairs: int = Field(ge=0, description="Contrast fixtures (fixtures.file) rewritten by each perturbation, drawn by project.seed (the same every day); 0: no adversarial probe.")
    attribution_examples: int = Field(ge=0, description="Counterfactual replies explained by occlusion (an HTML page each), 0: none.")
    attribution_words: int = Field(ge=1, le=20, description="Words left out together per occluded span, 1-20.")
    map_replies: int = Field(ge=0, description="The day's teacher candidates on the manifold map (PCA), beside the day's people's pairs; 0: no map.")
    collision_replies: int = Field(ge=0, description="Of them, the replies the dimensions' reward gradients are compared on (reward collisions); 0 or 1: none.")
    max_flip_rate: float = Field(ge=0.0, le=1.0, description="The probe_consistency check warns when a perturbation flips more than this share of pairs, 0-1.")


class HealthWeights(_Frozen):
    dcs: float = Field(ge=0.0, le=1.0, description="Weight of dimensional coherence, 0-1.")
    gvs: float = Field(ge=0.0, le=1.0, description="Weight of gradient variance stability, 0-1.")
    mss: float = Field(ge=0.0, le=1.0, description="Weight of manifold stability, 0-1.")
    cdrs: float = Field(ge=0.0, le=1.0, description="Weight of cross-domain robustness, 0-1.")
    lrps: float = Field(ge=0.0, le=1.0, description="Weight of local reward predictivity, 0-1.")

    @model_validator(mode="after")
    def _sum_to_one(self) -> HealthWeights:
        total = self.dcs + self.gvs + self.mss + self.cdrs + self.lrps
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the five RHI weights must sum to 1, they sum to {total:.4f}")
        return self


class ManifoldConfig(_Frozen):
    min_spread_ratio: float = Field(ge=0.0, le=1.0, description="A dimension collapses when its spread over an adapter's training replies is under this share of its spread over the teacher's labels, 0-1.")
    max_decided_share: float = Field(gt=0.0, le=1.0, description="A column of the scalar (a dimension or the people's score) dominates when it alone decides more than this share of the pairs, (0, 1].")
    intended: list[str] = Field(description="Columns that may dominate (dimension names, or `people` for the people's score).")
    max_mean_correlation: float | None = Field(ge=0.0, le=1.0, description="The dimensions are merged into one when their mean pairwise correlation over an adapter's training replies is above this, 0-1; null: not checked.")


class HealthConfig(_Frozen):
    calibration: str | None = Field(description="The panel's calibration file (normalising constants, weights, threshold, each component's healthy range; "
                                                "benchmarks/health_panel.py calibrate writes it), relative to the project root; null: weights, "
                                                "gvi_max_reference and deploy_threshold below, and no healthy ranges.")
    weights: HealthWeights | None = Field(description="Weights of the five RHI components; they sum to 1. null: the calibration's.")
    gvi_max_reference: float | None = Field(gt=0.0, description="Gradient-norm coefficient of variation that maps GVS to 0, > 0; null: the calibration's (one per policy mode).")
    perturbations_per_response: int = Field(ge=1, le=100, description="Word-drop perturbations per evaluation reply for manifold stability, 1-100.")
    dcs_on: Literal["policy", "reward_model"] = Field(description="Where DCS compares the dimensions' gradients: policy (the updates each dimension asks of the adapter's LoRA) or reward_model (its backbone's last dcs_layers blocks).")
    dcs_layers: int | None = Field(ge=1, description="DCS compares the dimensions' gradients w.r.t. the reward backbone's last N blocks (and final norm); null: every parameter.")
    deploy_threshold: float | None = Field(ge=0.0, le=1.0, description="RHI an adapter needs before it may go live, 0-1 (set, the calibration's per-component floors are not applied); null: the calibration's threshold and floors.")
    min_win_rate: float = Field(ge=0.0, le=1.0, description="Win rate over the base on the held-out prompts an adapter also needs, 0-1; 0: off.")
    people_tolerance: float | None = Field(ge=0.0, description="How many standard errors (of the paired difference) an adapter's implicit-reward accuracy on the people's held-out pairs may fall below the live adapter's, >= 0; null: not checked.")
    manifold: ManifoldConfig = Field(description="Collapse, merging and dominance of the reward signal an adapter was trained on: any blocks its promotion (check reward_manifold, the live gate).")

    @model_validator(mode="after")
    def _uncalibrated_needs_values(self) -> HealthConfig:
        if self.calibration is None:
            unset = [k for k in ("weights", "gvi_max_reference", "deploy_threshold") if getattr(self, k) is None]
            if unset:
                raise ValueError(f"health.calibration is null, so health.{', health.'.join(unset)} must be set (or name a calibration file)")
        return self


class RetrainConfig(_Frozen):
    memory_conversations: int = Field(ge=1, description="Conversations held with `hominem serve` since the last retrain (counted from the log) that trigger the memory (SFT) channel, >= 1.")
    reward_pairs: int = Field(ge=1, description="People's preference pairs since the last retrain (distinct choices, thumbs, emotion and nudge pairs from the log, and imports) that trigger the reward channel, >= 1.")
    combined_fraction: float = Field(gt=0.0, le=1.0, description="Both channels at this fraction of their thresholds also trigger, (0, 1].")
    sensor: bool = Field(description="The retrain sensor runs by default wherever a Dagster daemon runs (`make ui`, deploy/); false: it starts stopped (switch it on in the UI's Automation).")
    sensor_interval_seconds: int = Field(ge=5, description="Seconds between retrain sensor evaluations, >= 5.")
    schedule: bool = Field(description="The weekly schedule runs by default wherever a Dagster daemon runs; false: it starts stopped.")
    weekly_cron: str = Field(min_length=9, description="Cron of the weekly schedule (UTC).")


class ServingConfig(_Frozen):
    host: str = Field(min_length=1, description="Address `hominem serve` binds; beyond loopback (127.0.0.1, ::1, localhost) it needs bearer tokens (tokens_file or tokens_env).")
    port: int = Field(ge=0, le=65535, description="TCP port, 0-65535 (0: any free port, printed at start).")
    adapter: str | None = Field(description="What `hominem` (the served model) runs: \"live\" (the adapter data/live/current.json names, which passed the gate; the base until one has), \"latest\" (the newest lora_adapter built under this config, passed or not), an adapter folder, or null (the base alone).")
    reward_model: str | None = Field(description="What scores replies: \"adapter\" (the one the served adapter was trained with, else the newest built), \"latest\", a folder, or null (no scores).")
    live_poll_seconds: float = Field(ge=0.1, le=60.0, description="With adapter `live`: seconds between the server's checks of data/live/current.json, whose changes it hot-swaps to, 0.1-60.")
    registry_poll_seconds: float = Field(ge=0.1, le=3600.0, description="With a registry alias as the adapter (models:/hominem-lora-adapter@champion): seconds between the server's questions to the tracking server, 0.1-3600.")
    max_batch_size: int = Field(ge=1, le=256, description="Replies generated together in one batch, 1-256.")
    batch_wait_ms: float = Field(ge=0.0, le=1000.0, description="How long the first waiting request waits for others to join its batch, 0-1000 ms.")
    max_queue: int = Field(ge=1, le=100_000, description="Requests waiting for the model beyond which a new one gets 503 with Retry-After.")
    max_new_tokens: int = Field(ge=1, le=4096, description="Tokens a reply may have: the default and the most a request may ask for.")
    temperature: float = Field(ge=0.0, le=2.0, description="Sampling temperature when a request names none, 0-2 (0: greedy).")
    top_p: float = Field(gt=0.0, le=1.0, description="Nucleus sampling mass when a request names none, (0, 1].")
    repetition_penalty: float = Field(ge=1.0, le=2.0, description="Repetition penalty of every reply, 1-2.")
    plain_start: bool = Field(description="A reply may not start with an emoji or symbol token.")
    recall_facts: bool = Field(description="Repeat what the person stated about themselves earlier in the conversation (core/online/facts.py's patterns), in their words, before their last message in the model's input (`hominem serve` and `hominem chat`); the log keeps what was said.")
    max_body_bytes: int = Field(ge=1024, le=100_000_000, description="Largest request body accepted; larger gets 413.")
    log_dir: str = Field(min_length=1, description="Folder of the interaction log (log/<day>.jsonl, one file per UTC day) and the audit log (audit.jsonl); relative to project.data_dir.")
    tokens_file: str | None = Field(description="File of bearer tokens, one `rater TOKEN` or `admin TOKEN` per line (keep it outside the repository); null: none.")
    tokens_env: str = Field(min_length=1, description="Environment variable with more tokens in the same form, separated by newlines or commas.")
    redact: bool = Field(description="Replace e-mail addresses, phone numbers, card and IP numbers in logged text with [email], [phone], ... before it is written.")
    repeat_rate: float = Field(ge=0.0, le=1.0, description="Share of pairwise choices the page asks again (order swapped) to measure each rater's consistency, 0-1.")


class HominemConfig(_Frozen):
    project: ProjectConfig = Field(description="Where outputs go and the base seed.")
    tracking: TrackingConfig = Field(description="Where MLflow records runs, metrics and artifacts.")
    runtime: RuntimeConfig = Field(description="Where the networks run.")
    dimensions: list[DimensionConfig] = Field(min_length=1, description="The reward manifold: the list here is the list everywhere (labels, reward model heads, pairs).")
    models: ModelsConfig = Field(description="The offline models.")
    prompts: PromptsConfig = Field(description="Where each day's prompts come from.")
    teacher: TeacherConfig = Field(description="Who samples and rates the replies.")
    labeling: LabelingConfig = Field(description="What the offline judge is asked.")
    verifier: VerifierConfig = Field(description="Checks on teacher output.")
    reward_model: RewardModelConfig = Field(description="The reward model distilled from the teacher's labels.")
    preferences: PreferencesConfig = Field(description="How preference pairs are built from the ranked candidates.")
    policy: PolicyConfig = Field(description="The student's LoRA adapter.")
    evaluation: EvaluationConfig = Field(description="Base against base+adapter on the held-out prompts.")
    fixtures: FixturesConfig = Field(description="Contrast pairs any attentive person agrees on: a yardstick for the reward model and the adapters.")
    health: HealthConfig = Field(description="The Reward Health Index and the deploy gate.")
    probes: ProbesConfig = Field(description="The probing suite on each day's reward model (`probes` asset, `hominem probe --suite`).")
    retrain: RetrainConfig = Field(description="When the retrain sensor and schedule start a run.")
    serving: ServingConfig = Field(description="`hominem serve`: the chat and feedback service.")
    online: OnlineConfig = Field(description="Online updates of the live adapter from the replay buffer, and the fast-loop gate.")
    slow_loop: SlowLoopConfig = Field(description="The slow loop: the nightly RHI trend lowers the learning rate, shrinks the adapter or freezes, and undoes it on recovery.")
    replay: ReplayConfig = Field(description="The replay buffer's priorities and sampler (online updates; the daily dual training with policy.dual.sampler replay).")
    attunement: AttunementConfig = Field(description="Predictions checked against people's later choices: calibration and drift over time, error clusters, the next question.")
    history: HistoryConfig = Field(description="The preference history index over the interaction log (`hominem history`): sqlite embedded, Postgres in a deployment.")

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
            raise ValueError(f"online.memory_folder {folder} is not among policy.dual.memory_files {self.policy.dual.memory_files}: "
                             "the facts people state would be extracted and never learned; add it there or set online.memory_folder to null")
        unknown = sorted(set(self.replay.social_dimensions) - set(names))
        if unknown:
            raise ValueError(f"replay.social_dimensions names {unknown}, which are not configured dimensions {names}")
        unknown = sorted(set(self.health.manifold.intended) - set(names) - {"people"})
        if unknown:
            raise ValueError(f"health.manifold.intended names {unknown}; it takes configured dimensions {names} or `people` (the people's score)")
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
