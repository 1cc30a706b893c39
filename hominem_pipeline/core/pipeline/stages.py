"""The stage table: every stage of the pipeline, declared once.

Each row names the stage's inputs (with the window of days each reads), the config paths it reads
(`reads`: its slice, part of its version; `runtime`: read, but never changing what it builds), the
files outside the config it depends on, and its build function. Everything else is derived from it:
the Dagster assets with their deps, partition mappings and code versions (`defs/assets.py`), each
version id and the input versions a stage reads (`core/pipeline/lineage.py`).

    prompts -> teacher_trajectories -> teacher_labels -> reward_model -> preference_pairs -> lora_adapter ->
    evaluation -> reward_health_index;  human_preferences (imported), human_feedback (the service's log) ->
    reward_model, lora_adapter
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hominem_pipeline.core.builds.attunement import (
    build_attunement,
    preference_drift_check,
    window_days,
)
from hominem_pipeline.core.builds.evaluation import build_evaluation, reply_checks_digest
from hominem_pipeline.core.builds.human_feedback import build_human_feedback, log_digest
from hominem_pipeline.core.builds.human_preferences import (
    build_human_preferences,
    inbox_digest,
)
from hominem_pipeline.core.builds.lora_adapter import (
    build_lora_adapter,
    reward_manifold_check,
)
from hominem_pipeline.core.builds.memory_files import memory_files_digest
from hominem_pipeline.core.builds.predictions import (
    build_predictions,
    seed_prompts_digest,
)
from hominem_pipeline.core.builds.preference_pairs import build_preference_pairs
from hominem_pipeline.core.builds.probes import (
    build_probes,
    probe_consistency_check,
    probe_files_digest,
)
from hominem_pipeline.core.builds.prompts import build_prompts, prompt_files_digest
from hominem_pipeline.core.builds.reward_health_index import build_reward_health_index
from hominem_pipeline.core.builds.reward_model import (
    REWARD_MODEL_NAME,
    build_reward_model,
    human_agreement,
    people_pairs_digest,
    reward_backbone_digest,
    reward_dimension_fixtures,
    reward_fixtures,
)
from hominem_pipeline.core.builds.teacher_labels import (
    build_teacher_labels,
    labels_pass_verifier,
    served_log_digest,
)
from hominem_pipeline.core.builds.teacher_trajectories import build_teacher_trajectories
from hominem_pipeline.core.config import HominemConfig, PolicyConfig
from hominem_pipeline.core.evaluation.calibration import calibration_digest
from hominem_pipeline.core.evaluation.fixtures import fixtures_file_digest
from hominem_pipeline.core.online.slow_loop import adjustment_on
from hominem_pipeline.core.pipeline.stage import Check, Input, Registered, Stage
from hominem_pipeline.core.policy.people_start import people_start_digest
from hominem_pipeline.core.reward.feature_cache import SHIPPED_FEATURES

# What the teacher is asked and how it answers; `teacher.client` (speed, retries) and `teacher.prices`
# change how fast and at what cost, never the answers.
TEACHER = (
    "teacher.provider",
    "teacher.candidates_per_prompt",
    "teacher.max_new_tokens",
    "teacher.batch_size",
    "teacher.weak_share",
    "teacher.styles",
    "teacher.api",
    "models.student",
)
TEACHER_RUNTIME = ("teacher.client", "teacher.prices")


def _log_reward_pyfunc(model_dir: Path) -> str:
    """The reward model logged as an MLflow pyfunc (`core/reward/pyfunc.py`), MLflow imported only then: every
    command that reads the stage table (the lineage) starts a second and a half sooner."""
    from hominem_pipeline.core.reward.pyfunc import log_reward_pyfunc

    return log_reward_pyfunc(model_dir)


def _prompts_reads(c: HominemConfig) -> tuple[str, ...]:
    g = c.prompts.generators
    return ("prompts",) + (("models.encoder",) if g.enabled else ()) + (TEACHER if g.uses_teacher else ())


def _pairs_reads(c: HominemConfig) -> tuple[str, ...]:
    # against the student: its greedy replies, decoded as the evaluation decodes them
    student = (
        "models.student",
        "evaluation.max_new_tokens",
        "evaluation.repetition_penalty",
        "evaluation.plain_start",
        "evaluation.batch_size",
    )
    return ("preferences", "verifier.min_reply_logp") + (student if c.preferences.against_student else ())


def _policy_reads(c: HominemConfig) -> tuple[str, ...]:
    """The shared policy settings and the chosen mode's own section (with the safety gate where it applies)."""
    mode = c.policy.mode
    shared = tuple(f"policy.{k}" for k in PolicyConfig.model_fields if k not in ("dual", "rl", "safety_gate"))
    own = () if mode == "dpo" else (f"policy.{mode}", "policy.safety_gate")
    replay = ("replay",) if mode == "dual" and c.policy.dual.sampler == "replay" else ()
    people = ("reward_model.people_pairs",) if _learns_from_people(c) else ()
    return (
        shared
        + own
        + replay
        + people
        + ("models.student",)
        + (("preferences.dimension_weights",) if mode == "rl" else ())
    )


def _learns_from_people(c: HominemConfig) -> bool:
    """Whether the daily adapter learns from people's own pairs (`policy.dual.people_share`)."""
    return c.policy.mode == "dual" and c.policy.dual.people_share > 0


def _adapter_people_window(c: HominemConfig) -> int:
    return c.policy.window_days if _learns_from_people(c) else 0


def _adapter_files(c: HominemConfig, partition: str) -> Any:
    """The memory files, the people's pairs and start it reads, and the slow loop's factors in force on the day
    (`slow_loop.adjustment`: none while neutral, so a quiet history changes no version)."""
    slow = adjustment_on(c.data_dir, partition).digest()
    if c.policy.mode != "dual":
        return None if slow is None else {"slow_loop": slow}
    memory = memory_files_digest(c, partition)
    files = {"memory": memory, "people": people_pairs_digest(c)} if _learns_from_people(c) else memory
    files = (
        files
        if c.policy.dual.people_start is None
        else {"files": files, "people_start": people_start_digest(c.path(SHIPPED_FEATURES))}
    )
    return files if slow is None else {"files": files, "slow_loop": slow}


def _evaluation_reads(c: HominemConfig) -> tuple[str, ...]:
    # reward_model.people_pairs: which of the people's pairs are held out (the implicit reward is measured on them)
    # serving.recall_facts: recall is asked as served; health's rule judges the reply checks
    return (
        "evaluation",
        "models.student",
        "fixtures.file",
        "dimensions",
        "reward_model.people_pairs",
        "serving.recall_facts",
        "health.confidence",
        "health.power",
        "health.reply_margins",
    ) + (("policy.dual.memory_files",) if c.evaluation.memory_probe else ())


def _health_files(c: HominemConfig, partition: str) -> Any:
    """The health index's calibration file (`health.calibration`): a new calibration measures every day again."""
    return {"calibration": calibration_digest(c)}


def _probe_files(c: HominemConfig, partition: str) -> Any:
    """The memory files the probe asks (when it runs), the contrast fixtures and the people's pairs files."""
    return {
        "memory": memory_files_digest(c, partition) if c.evaluation.memory_probe else None,
        "fixtures": fixtures_file_digest(c),
        "people": people_pairs_digest(c),
        "reply_checks": reply_checks_digest(c),
    }


def _reward_window(c: HominemConfig) -> int:
    return c.reward_model.window_days


def _human_window(c: HominemConfig) -> int:
    return c.reward_model.window_days if c.reward_model.human_preferences else 0


STAGES: tuple[Stage, ...] = (
    Stage(
        name="prompts",
        description="Seed prompts sampled for the day (stratified by category) and generated ones, plus the fixed "
        "held-out evaluation prompts.",
        group="data",
        kinds=frozenset({"python"}),
        inputs=(),
        reads=_prompts_reads,
        runtime=TEACHER_RUNTIME,
        build=build_prompts,
        files=prompt_files_digest,
    ),
    Stage(
        name="teacher_trajectories",
        description="Candidate responses of the teacher, several per prompt, with varied sampling and system prompts.",
        group="data",
        kinds=frozenset({"pytorch"}),
        inputs=(Input("prompts"),),
        reads=TEACHER,
        runtime=TEACHER_RUNTIME,
        build=build_teacher_trajectories,
    ),
    Stage(
        name="teacher_labels",
        description="The teacher's reward label per candidate, and per reply the student served the day before "
        "(labeling.served_turns): vector, scalar, intensity, safety and rationale.",
        group="data",
        kinds=frozenset({"pytorch"}),
        inputs=(Input("teacher_trajectories"),),
        # every teacher setting: those that shape the candidates reach the labels through them anyway
        reads=("dimensions", "labeling", "verifier.min_reply_logp", "serving.log_dir") + TEACHER,
        runtime=TEACHER_RUNTIME,
        build=build_teacher_labels,
        files=served_log_digest,  # the day before's log, whose served replies it rates too (labeling.served_turns)
        checks=(
            Check(
                "labels_pass_verifier",
                "The share of quarantined labels is within verifier.max_failure_rate.",
                labels_pass_verifier,
                blocking=True,
            ),
        ),
    ),
    Stage(
        name="human_feedback",
        description="A day of the interaction log (`hominem serve`): people's choices and thumbs as weighted "
        "preference pairs, and the conversations with their feedback.",
        group="data",
        kinds=frozenset({"python"}),
        inputs=(),
        reads=("serving.log_dir",),
        build=build_human_feedback,
        files=log_digest,
        refresh=True,  # feedback given after a day's run: every window that reads the day rebuilds it first
    ),
    Stage(
        name="reward_model",
        description="Multi-head reward model (vector, scalar, intensity, safety, uncertainty) trained on the labels "
        "and human pairs of a window of days.",
        group="training",
        kinds=frozenset({"pytorch"}),
        inputs=(
            Input("teacher_labels", _reward_window),
            Input("human_preferences", _human_window, optional=True),
            Input("human_feedback", _human_window, optional=True),
        ),
        # the judge's system text and question: what `frame: judge` / `judge_question` reads
        reads=(
            "dimensions",
            "reward_model",
            "models.encoder",
            "models.student",
            "labeling.judge_system",
            "labeling.scalar_question",
            "fixtures.file",
            "attunement.selection.retrain_boost",
        ),
        build=build_reward_model,
        files=reward_backbone_digest,
        registered=Registered(REWARD_MODEL_NAME, _log_reward_pyfunc),
        checks=(
            Check(
                "human_agreement",
                "People's held-out preference pairs are ordered as they chose at least "
                "reward_model.min_human_agreement of the time.",
                human_agreement,
            ),
            Check(
                "reward_fixtures",
                "The scalar prefers the better reply of the hand-written contrast fixtures at least "
                "fixtures.min_accuracy of the time, "
                "and at least fixtures.min_tag_accuracy within every tag; the pairs it gets wrong are listed.",
                reward_fixtures,
            ),
            Check(
                "reward_dimension_fixtures",
                "On the contrast fixtures about one dimension, that dimension alone prefers the better reply at least "
                "fixtures.min_dimension_accuracy of the time, and at least fixtures.min_dimension_tag_accuracy within "
                "every tag; the pairs it gets wrong are listed.",
                reward_dimension_fixtures,
            ),
        ),
    ),
    Stage(
        name="preference_pairs",
        description="(prompt, chosen, rejected) pairs by the configured strategy, ranked by the teacher's labels "
        "(or the reward model's scores), annotated with both.",
        group="training",
        kinds=frozenset({"python"}),
        inputs=(Input("teacher_labels"), Input("reward_model"), Input("teacher_trajectories")),
        reads=_pairs_reads,
        build=build_preference_pairs,
    ),
    Stage(
        name="lora_adapter",
        description="LoRA adapter on the student trained on the preference pairs of a window of days: DPO, the "
        "dual-channel loss (plus the memory files) or RL on the reward model.",
        group="training",
        kinds=frozenset({"pytorch"}),
        inputs=(
            Input("preference_pairs", lambda c: c.policy.window_days),
            Input("reward_model"),
            Input("human_preferences", _adapter_people_window, optional=True),
            Input("human_feedback", _adapter_people_window, optional=True),
        ),
        reads=_policy_reads,
        runtime=("runtime.train_processes",),
        build=build_lora_adapter,
        files=_adapter_files,
        checks=(
            Check(
                "reward_manifold",
                "The reward signal the adapter was trained on (its pairs scored by its reward model) "
                "has no collapsed dimension "
                "(spread under health.manifold.min_spread_ratio of the teacher's labels'), dimensions "
                "not merged into one (mean correlation "
                "above health.manifold.max_mean_correlation) and no column of the scalar that alone "
                "decides more than health.manifold.max_decided_share of the pairs; a failure blocks "
                "promotion (the live gate).",
                reward_manifold_check,
                error=True,
            ),
        ),
    ),
    Stage(
        name="evaluation",
        description="Base vs base+adapter on the held-out prompts: generations, reward scores, win rate, deltas; "
        "the memory probe's facts kept, lost and gained.",
        group="evaluation",
        kinds=frozenset({"pytorch"}),
        inputs=(Input("lora_adapter"), Input("reward_model"), Input("prompts")),
        reads=_evaluation_reads,
        build=build_evaluation,
        files=_probe_files,
    ),
    Stage(
        name="reward_health_index",
        description="The Reward Health Index of the new adapter and whether it may go live.",
        group="evaluation",
        kinds=frozenset({"pytorch"}),
        inputs=(Input("evaluation"), Input("lora_adapter"), Input("reward_model")),
        reads=("health", "policy.max_length", "models.student"),
        files=_health_files,
        build=build_reward_health_index,
    ),
    Stage(
        name="probes",
        description="The probing suite on the day's reward model: trade-offs (against the version before), "
        "adversarial consistency, "
        "counterfactuals, attribution, and the manifold's shape (PCA map, dimension correlations, reward collisions).",
        group="evaluation",
        kinds=frozenset({"pytorch"}),
        inputs=(Input("reward_model", lambda c: 2), Input("teacher_labels"), Input("human_feedback", optional=True)),
        reads=("dimensions", "probes", "fixtures.file", "health.dcs_layers"),
        build=build_probes,
        after_gate=True,
        files=probe_files_digest,
        checks=(
            Check(
                "probe_consistency",
                "No trade-off scenario the reward model before chose as written flips, and no meaning-preserving "
                "perturbation flips more than probes.max_flip_rate of the contrast pairs.",
                probe_consistency_check,
            ),
        ),
    ),
    Stage(
        name="predictions",
        description="The prediction log: every pair people ordered that day (page choices, imports) and the judge's "
        "ranked pairs, with what the newest "
        "earlier reward model predicted: P(chosen), gaps per dimension, uncertainty, domain, rater, time.",
        group="evaluation",
        kinds=frozenset({"pytorch"}),
        inputs=(
            Input("reward_model", lambda c: 2),
            Input("human_feedback", optional=True),
            Input("human_preferences", optional=True),
            Input("preference_pairs", optional=True),
        ),
        reads=("dimensions", "attunement.bins", "prompts.seed_file", "prompts.categories", "models.encoder"),
        build=build_predictions,
        after_gate=True,
        files=seed_prompts_digest,  # the domains are the seed prompts' categories
    ),
    Stage(
        name="attunement",
        description="Predictions read back over a window: calibration per day, version and domain; preference and "
        "served-reply drift; "
        "the pairs the day's reward model orders against people, clustered, named and followed from yesterday.",
        group="evaluation",
        kinds=frozenset({"python"}),
        inputs=(
            Input("predictions", window_days),
            Input("reward_model", lambda c: 2),
            Input(
                "human_feedback",
                lambda c: c.attunement.drift.recent_days + c.attunement.drift.reference_days,
                optional=True,
            ),
        ),
        reads=("dimensions", "attunement", "models.encoder"),
        build=build_attunement,
        after_gate=True,
        checks=(
            Check(
                "preference_drift",
                "People's preferences (each dimension's agreement with their choices, per rater too) "
                "and the served replies' "
                "reward vectors have not drifted between the recent and the reference window (attunement.drift).",
                preference_drift_check,
            ),
        ),
    ),
    Stage(
        name="human_preferences",
        description="Human preference pairs imported with `hominem data import-preferences` (HH-RLHF, JSONL or "
        "Parquet).",
        group="data",
        kinds=frozenset({"python"}),
        inputs=(),
        reads=(),
        build=build_human_preferences,
        files=inbox_digest,
        daily=False,
    ),
)

STAGES_BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
TEACHER_STAGES = (
    "prompts",
    "teacher_trajectories",
    "teacher_labels",
)  # the stages that call the teacher (prompts: it writes some)
