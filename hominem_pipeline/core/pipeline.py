"""The eight stages of the offline pipeline, in order:

prompts -> teacher_trajectories -> teacher_labels -> reward_model -> preference_pairs -> lora_adapter
-> evaluation -> reward_health_index

Each `build_*` function reads its inputs from the `StageContext`, calls the core function that does
the work, and writes its files into `ctx.out_dir`. `run_stage` (core/stages.py) does the rest.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.artifacts import file_sha256, fingerprint
from hominem_pipeline.core.config import HominemConfig, PolicyConfig
from hominem_pipeline.core.schema import Prompt, Trajectory, vector_matrix
from hominem_pipeline.core.stages import StageContext, StageOutput, StageSpec, Upstream

log = logging.getLogger(__name__)


def _write_json(path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n")


def _finite(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


# --- prompts --------------------------------------------------------------------------------------


def build_prompts(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.prompts import load_seed_prompts, partition_prompts

    cfg = ctx.cfg
    seeds = load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories)
    train, evaluation = partition_prompts(cfg, seeds, ctx.seed)
    generated, gen_metrics, gen_metadata = _generated_prompts(cfg, train, seeds, ctx.seed)
    train = train + generated
    rows = [p.model_dump() | {"split": "train"} for p in train] + [p.model_dump() | {"split": "eval"} for p in evaluation]
    frame = pd.DataFrame(rows)
    frame.to_parquet(ctx.out_dir / "prompts.parquet", index=False)
    by_cat = frame[frame.split == "train"].groupby("category").size().to_dict()
    by_source = frame[frame.split == "train"].groupby("source").size().to_dict()
    return StageOutput(
        metrics={"train_prompts": len(train), "eval_prompts": len(evaluation), **gen_metrics},
        metadata={"rows": len(frame), "train_by_category": by_cat, "train_by_source": by_source, **gen_metadata},
        table="prompts.parquet",
    )


def _generated_prompts(cfg: HominemConfig, base: list[Prompt], known: list[Prompt], seed: int) -> tuple[list[Prompt], dict[str, Any], dict[str, Any]]:
    """The generators' prompts for the day, with their counts (proposed, kept, dropped and why)."""
    from hominem_pipeline.core.models import encoder_path
    from hominem_pipeline.core.prompt_generators import generate_prompts, sentence_embedder
    from hominem_pipeline.core.teacher import WriteRequest, build_teacher

    g = cfg.prompts.generators
    if not g.enabled:
        return [], {}, {}
    teacher = build_teacher(cfg) if g.uses_teacher else None
    tokens = {"evolutionary": g.evolutionary.max_new_tokens, "freeform": g.freeform.max_new_tokens}

    usage: dict[str, float | None] = {}

    def write(plans):
        requests = [
            WriteRequest(key=f"{p.source}-{i}", instruction=p.instruction, max_new_tokens=tokens[p.source], temperature=0.9, seed=seed + i)
            for i, p in enumerate(plans)
        ]
        written = teacher.write(requests)
        usage.update(written.usage)
        return written.items

    try:
        result = generate_prompts(cfg, base, known, seed, write=write if teacher else None, embed=sentence_embedder(encoder_path(cfg)))
    finally:
        if teacher is not None:
            teacher.close()
    kept = pd.Series([p.source for p in result.prompts], dtype=str).value_counts().to_dict()
    metrics: dict[str, Any] = {"generated_prompts": len(result.prompts), "dropped_generated_prompts": len(result.dropped)}
    metrics.update({f"generated_{k}": kept.get(k, 0) for k in result.proposed})
    metrics.update({f"teacher_{k}": v for k, v in usage.items()})
    if result.dropped:
        log.info("prompt generators: %d of %d proposed prompts dropped (near-duplicates or unusable)", len(result.dropped), sum(result.proposed.values()))
    return result.prompts, metrics, {"generators_proposed": result.proposed, "generators_dropped": result.dropped[:20]}


def _prompts_fingerprint(cfg: HominemConfig, partition: str) -> dict[str, Any]:
    """What the prompts depend on beyond their settings: the seed and template files, and the teacher
    and encoder when the generators use them."""
    g = cfg.prompts.generators
    out: dict[str, Any] = {"seeds": file_sha256(cfg.path(cfg.prompts.seed_file))}
    if g.templated.count:
        out["templates"] = file_sha256(cfg.path(g.templated.file))
    if g.enabled:
        out["encoder"] = cfg.section("models.encoder")
    if g.uses_teacher:
        out["teacher"] = cfg.section("teacher.provider", "teacher.api", "models.student")
    return out


def prompts_of(frame: pd.DataFrame, split: str) -> list[Prompt]:
    cols = list(Prompt.model_fields)
    rows = frame[frame.split == split][cols]
    rows = rows.astype(object).where(rows.notna(), None)  # a missing parent_id reads back as NaN
    return [Prompt(**{k: (list(v) if k == "tags" else v) for k, v in row.items()}) for row in rows.to_dict(orient="records")]


# --- teacher --------------------------------------------------------------------------------------


def _teacher_accounting(usage: dict[str, float | None], failed: list[dict[str, Any]], out_dir) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Metrics and metadata for a teacher's calls: usage (calls, cache hits, retries, tokens, cost) and
    the calls that failed for good, written to failed_calls.json so the partition says what is missing."""
    metadata: dict[str, Any] = {"missing": len(failed)}
    if failed:
        _write_json(out_dir / "failed_calls.json", failed)
        metadata["failed_examples"] = failed[:3]
        log.warning("%d teacher calls failed after every retry; the partition is incomplete (see failed_calls.json)", len(failed))
    if usage:
        metadata["usage"] = usage
    return {**usage, "missing": len(failed)}, metadata


def build_teacher_trajectories(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.teacher import build_teacher

    prompts = prompts_of(pd.read_parquet(ctx.one("prompts").file("prompts.parquet")), "train")
    teacher = build_teacher(ctx.cfg)
    started = time.monotonic()
    try:
        result = teacher.sample(prompts, ctx.cfg.teacher.candidate_styles(), ctx.cfg.teacher.max_new_tokens, ctx.seed)
    finally:
        teacher.close()
    seconds = time.monotonic() - started
    if not result.items:
        raise RuntimeError(f"the teacher produced no trajectory for {ctx.partition}: {len(result.failed)} calls failed, e.g. {result.failed[:1]}")
    frame = pd.DataFrame([t.model_dump() for t in result.items])
    frame.to_parquet(ctx.out_dir / "trajectories.parquet", index=False)
    tokens = int(frame["new_tokens"].sum())
    usage_metrics, usage_metadata = _teacher_accounting(result.usage, result.failed, ctx.out_dir)
    return StageOutput(
        metrics={
            "trajectories": len(frame),
            "generation_seconds": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else None,
            "mean_new_tokens": float(frame["new_tokens"].mean()),
            "unfinished_share": float((~frame["finished"]).mean()),
            "empty_responses": int((frame["response"].str.strip() == "").sum()),
            **usage_metrics,
        },
        metadata={"rows": len(frame), "teacher": teacher.describe(), "styles": frame.groupby("style").size().to_dict(), **usage_metadata},
        table="trajectories.parquet",
        complete=not result.failed,
    )


LABEL_COLUMNS = ["trajectory_id", "prompt_id", "vector", "scalar", "reward_intensity", "safety_score", "rationale", "prompt", "response", "category", "style"]


def build_teacher_labels(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.labeling import QUARANTINE_COLUMNS, quarantine_row, verify_labels
    from hominem_pipeline.core.teacher import TeacherOutput, build_teacher

    trajectories_frame = pd.read_parquet(ctx.one("teacher_trajectories").file("trajectories.parquet"))
    trajectories = [Trajectory(**row) for row in trajectories_frame.to_dict(orient="records")]
    # An empty response has nothing to judge: it is quarantined without spending a rating on it.
    empty = [t for t in trajectories if not t.response.strip()]
    to_rate = [t for t in trajectories if t.response.strip()]
    teacher = build_teacher(ctx.cfg)
    started = time.monotonic()
    try:
        result = teacher.rate(to_rate) if to_rate else TeacherOutput([])
    finally:
        teacher.close()
    seconds = time.monotonic() - started
    dims = ctx.cfg.dimension_names
    by_id = {t.trajectory_id: t for t in to_rate}
    rows = [
        label.model_dump() | {"prompt": t.prompt, "response": t.response, "category": t.category, "style": t.style}
        for label in result.items
        for t in [by_id[label.trajectory_id]]
    ]
    frame, quarantine = verify_labels(pd.DataFrame(rows, columns=LABEL_COLUMNS), dims)
    extra = [quarantine_row(t.model_dump(), "empty_response", "empty response, not rated") for t in empty] + result.rejected
    if extra:
        quarantine = pd.concat([quarantine, pd.DataFrame(extra, columns=QUARANTINE_COLUMNS)], ignore_index=True)
    if frame.empty:
        raise ValueError(
            f"the verifier rejected all {len(quarantine)} labels of {ctx.partition} "
            f"({quarantine['check'].value_counts().to_dict()}); see data/quarantine/teacher_labels/{ctx.partition}/"
        )
    frame.to_parquet(ctx.out_dir / "labels.parquet", index=False)
    vec = vector_matrix(frame["vector"], dims)
    total = len(frame) + len(quarantine)
    usage_metrics, usage_metadata = _teacher_accounting(result.usage, result.failed, ctx.out_dir)
    metrics: dict[str, float | None] = {
        "labels": len(frame),
        "quarantined": len(quarantine),
        "failure_rate": len(quarantine) / total,
        "labeling_seconds": seconds,
        **usage_metrics,
    }
    for j, d in enumerate(dims):
        metrics[f"mean_{d}"] = float(vec[:, j].mean())
        metrics[f"std_{d}"] = float(vec[:, j].std())
    for key in ("scalar", "reward_intensity", "safety_score"):
        metrics[f"mean_{key}"] = float(frame[key].mean())
        metrics[f"std_{key}"] = float(frame[key].std(ddof=0))
    return StageOutput(
        metrics=metrics,
        metadata={
            "rows": len(frame),
            "teacher": teacher.describe(),
            "scalar_by_style": frame.groupby("style")["scalar"].mean().round(4).to_dict(),
            "quarantined_by_check": quarantine["check"].value_counts().to_dict() if len(quarantine) else {},
            **usage_metadata,
        },
        table="labels.parquet",
        quarantine=quarantine,
        complete=not result.failed,
    )


# --- reward model ---------------------------------------------------------------------------------

REWARD_MODEL_NAME = "hominem-reward-model"  # in the MLflow model registry; alias `current` = the latest built


def build_reward_model(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.models import reward_backbone
    from hominem_pipeline.core.reward_model import DIMENSION_PLOT, METADATA, RELIABILITY_PLOT, train_reward_model
    from hominem_pipeline.core.teacher import rubric_system

    labels = ctx.tables("teacher_labels")
    human = ctx.tables("human_preferences") if ctx.inputs["human_preferences"] else None
    # Content digest: the sha256 of every table read, as their manifests recorded them.
    digest = fingerprint([[a, r.partition, r.manifest["files"][r.manifest["table"]]] for a in ("teacher_labels", "human_preferences") for r in ctx.inputs[a]], 64)
    started = time.monotonic()
    metrics = train_reward_model(
        labels,
        dimensions=ctx.cfg.dimension_names,
        backbone_path=reward_backbone(ctx.cfg),
        cfg=ctx.cfg.reward_model,
        out_dir=ctx.out_dir,
        seed=ctx.seed,
        data_digest=digest,
        date=ctx.partition,
        human_pairs=human,
        on_epoch=lambda epoch, m: ctx.run.log_metrics(m, step=epoch),
        judge_system=rubric_system(ctx.cfg.labeling),
        judge_question=ctx.cfg.labeling.scalar_question,
    )
    metrics["train_seconds"] = time.monotonic() - started
    return StageOutput(
        metrics={k: v for k, v in metrics.items() if v is None or isinstance(v, (int, float))},
        metadata={
            "rows": len(labels),
            "human_pairs": 0 if human is None else len(human),
            "label_partitions": [r.partition for r in ctx.inputs["teacher_labels"]],
            "human_preference_partitions": [r.partition for r in ctx.inputs["human_preferences"]],
            "training_data_digest": digest,
        },
        mlflow_artifacts=[METADATA] + [p for p in (RELIABILITY_PLOT, DIMENSION_PLOT) if (ctx.out_dir / p).is_file()],
        register_model=REWARD_MODEL_NAME,
    )


# --- preference pairs -----------------------------------------------------------------------------


def build_preference_pairs(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.preferences import build_preference_pairs as build_pairs
    from hominem_pipeline.core.preferences import sparse_pairs_warning
    from hominem_pipeline.core.reward_model import RewardModel

    labels = pd.read_parquet(ctx.one("teacher_labels").file("labels.parquet"))
    # whether each candidate ended or was cut at the teacher's token budget (training must not teach a stop there)
    trajectories = pd.read_parquet(ctx.one("teacher_trajectories").file("trajectories.parquet"), columns=["trajectory_id", "finished"])
    labels = labels.merge(trajectories, on="trajectory_id", how="left")
    answered = labels["response"].str.strip().astype(bool).to_numpy()
    rm = RewardModel.load(ctx.one("reward_model").path)
    rm_scalar, rm_vectors = _reward_model_scores(rm, labels)  # unanswered rows score NaN and never enter a pair
    pc = ctx.cfg.preferences
    student = _student_replies(ctx, labels, rm) if pc.against_student else None
    pairs = build_pairs(
        labels, weights=pc.dimension_weights, min_margin=pc.min_margin, max_pairs_per_prompt=pc.max_pairs_per_prompt,
        rm_scalar=rm_scalar, rm_vectors=rm_vectors, rank_by=pc.rank_by, strategy=pc.strategy, guard=pc.guard_dimension,
        student=student, min_scalar_margin=pc.min_scalar_margin,
    )
    pairs.to_parquet(ctx.out_dir / "pairs.parquet", index=False)
    if student is not None:  # what the pairs against the student were built from, for inspection
        student.to_parquet(ctx.out_dir / "student_replies.parquet", index=False)
    covered = int(pairs["prompt_id"].nunique()) if len(pairs) else 0
    if warning := sparse_pairs_warning(covered, labels.loc[answered, "prompt_id"].nunique(), pc.rank_by, pc.min_margin, pc.min_scalar_margin):
        log.warning(warning)
    return StageOutput(
        metrics={
            "pairs": len(pairs),
            "prompts_with_pairs": covered,
            "mean_margin": _finite(pairs["margin"].mean()) if len(pairs) else None,
            # how often the other judge agrees with the pairs' order (the one that ranked them always does)
            "reward_model_agreement": float((pairs["rm_margin"] > 0).mean()) if len(pairs) else None,
            "teacher_agreement": float((pairs["teacher_margin"] > 0).mean()) if len(pairs) else None,
            **({"student_pairs": int((pairs["source"] == "student").sum())} if student is not None else {}),
        },
        metadata={"rows": len(pairs), "candidates": len(labels), **({"student_replies": len(student)} if student is not None else {})},
        table="pairs.parquet",
    )


def _student_replies(ctx: StageContext, labels: pd.DataFrame, rm: Any) -> pd.DataFrame:
    """The base student's own reply to each prompt of the day, decoded as the evaluation decodes it,
    with the reward model's scalar and vector (`preferences.against_student`)."""
    from hominem_pipeline.core.evaluation import greedy_replies
    from hominem_pipeline.core.models import load_student, student_path

    prompts = labels.drop_duplicates("prompt_id")[["prompt_id", "prompt"]].reset_index(drop=True)
    model, tokenizer = load_student(student_path(ctx.cfg))
    replies = greedy_replies(model, tokenizer, list(prompts["prompt"]), ctx.cfg.evaluation, ctx.seed, "student replies")
    del model
    replied = prompts.assign(response=[g.text for g in replies], finished=[g.finished for g in replies])
    scalar, vectors = _reward_model_scores(rm, replied)
    return replied.assign(scalar=scalar, vector=vectors)


def _reward_model_scores(rm: Any, rows: pd.DataFrame) -> tuple[np.ndarray, list[dict[str, float]]]:
    """The reward model's scalar and vector (by dimension name) of each row's prompt and response
    (`evaluation.score_side`: an empty response scores NaN)."""
    from hominem_pipeline.core.evaluation import score_side

    scores = score_side(rm, list(rows["prompt"]), list(rows["response"]))
    return scores["scalar"], [dict(zip(rm.dimensions, map(float, row))) for row in scores["vector"]]


def _pairs_fingerprint(cfg: HominemConfig, partition: str) -> dict[str, Any] | None:
    """With `preferences.against_student`, the student and the decoding its replies come from."""
    if not cfg.preferences.against_student:
        return None
    ev = cfg.evaluation
    return {"student": cfg.section("models.student"), "max_new_tokens": ev.max_new_tokens, "repetition_penalty": ev.repetition_penalty}


# --- LoRA adapter ---------------------------------------------------------------------------------


def _memory_paths(cfg: HominemConfig) -> list[Path]:
    return [cfg.path(p) for p in cfg.policy.dual.memory_files]


def _memory_fingerprint(cfg: HominemConfig, partition: str) -> list[list[str]]:
    """The memory files' digests: new or edited rows retrain a dual adapter and re-run the memory probe."""
    from hominem_pipeline.core.memory import memory_digest

    return memory_digest(_memory_paths(cfg))


def _adapter_fingerprint(cfg: HominemConfig, partition: str) -> list[list[str]]:
    return _memory_fingerprint(cfg, partition) if cfg.policy.mode == "dual" else []


def _probe_fingerprint(cfg: HominemConfig, partition: str) -> list[list[str]]:
    return _memory_fingerprint(cfg, partition) if cfg.evaluation.memory_probe else []


def _training_settings(pc: PolicyConfig) -> dict[str, Any]:
    """The policy settings this mode used: the shared ones, its own section, and the gate where it applies."""
    used = {k: v for k, v in pc.model_dump().items() if k not in ("lora", "dual", "rl", "safety_gate")}
    if pc.mode != "dpo":
        used[pc.mode] = getattr(pc, pc.mode).model_dump()
        used["safety_gate"] = pc.safety_gate.model_dump()
    return used


def policy_seed(stage_seed: int, extra: int) -> int:
    """The adapter's training seed: the stage's own (derived from project.seed and the date) when
    `policy.seed` is 0, else one mixed from both, so that retraining on the same pairs with another
    `policy.seed` draws other batches, LoRA initialisations and samples, and nothing upstream reruns."""
    return stage_seed if extra == 0 else int(fingerprint([stage_seed, extra], 8), 16) % (2**31 - 1)


def build_lora_adapter(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.models import student_path
    from hominem_pipeline.core.preferences import read_preference_pairs
    from hominem_pipeline.core.reward_model import RewardModel

    pc = ctx.cfg.policy
    pair_refs = ctx.inputs["preference_pairs"]
    pairs = read_preference_pairs([r.file("pairs.parquet") for r in pair_refs])
    rm_ref = ctx.one("reward_model")
    common = dict(
        student_path=student_path(ctx.cfg),
        cfg=pc,
        out_dir=ctx.out_dir,
        seed=policy_seed(ctx.seed, pc.seed),
        on_log=lambda step, m: ctx.run.log_metrics({k.replace("/", "_"): v for k, v in m.items() if v is not None and np.isfinite(v)}, step=step),
    )
    memory_data: list[list[str]] = []
    if pc.mode == "dpo":
        from hominem_pipeline.core.policy import train_dpo_adapter

        result = train_dpo_adapter(pairs, **common)
    elif pc.mode == "dual":
        from hominem_pipeline.core.dual_trainer import train_dual_adapter
        from hominem_pipeline.core.memory import read_memory_rows

        memory = read_memory_rows(_memory_paths(ctx.cfg))
        memory_data = _memory_fingerprint(ctx.cfg, ctx.partition)
        needs_rm = "reward_model" in (pc.dual.intensity_source, pc.dual.safety_source)
        result = train_dual_adapter(pairs, memory, reward_model=RewardModel.load(rm_ref.path) if needs_rm else None, **common)
    else:
        from hominem_pipeline.core.rl_trainer import train_rl_adapter

        result = train_rl_adapter(list(pairs["prompt"]), reward_model=RewardModel.load(rm_ref.path), dimension_weights=ctx.cfg.preferences.dimension_weights, **common)
    _write_json(ctx.out_dir / "training_history.json", {"history": result["history"], "grad_norms": result["grad_norms"]})
    _write_json(
        ctx.out_dir / "METADATA.json",
        {
            "mode": pc.mode,
            "base_model": str(student_path(ctx.cfg)),
            "base_checksum": result["base_checksum"],
            "reward_model": rm_ref.key,
            "preference_data": [r.key for r in pair_refs],
            "preference_pairs": len(pairs),
            "memory_data": memory_data,
            "channel_contributions": result["channel_contributions"],
            "channels": result.get("channels", {}),
            "lora": pc.lora.model_dump(),
            "training": _training_settings(pc),
            "date": ctx.partition,
        },
    )
    metrics = {k: v for k, v in result.items() if k not in ("history", "grad_norms", "base_checksum", "channels", "channel_contributions")}
    metrics.update({f"channel_{k}": v for k, v in result["channel_contributions"].items()})
    return StageOutput(
        metrics=metrics,
        metadata={"rows": len(pairs), "mode": pc.mode, "pair_partitions": [r.partition for r in pair_refs], "reward_model_version": rm_ref.version},
        mlflow_artifacts=["adapter_config.json", "adapter_model.safetensors", "METADATA.json", "training_history.json"],
    )


# --- evaluation -----------------------------------------------------------------------------------


def build_evaluation(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.evaluation import evaluate_adapter, plot_dimension_deltas
    from hominem_pipeline.core.memory import read_memory_rows
    from hominem_pipeline.core.models import student_path
    from hominem_pipeline.core.reward_model import RewardModel

    prompts = prompts_of(pd.read_parquet(ctx.one("prompts").file("prompts.parquet")), "eval")
    rm = RewardModel.load(ctx.one("reward_model").path)
    table, summary = evaluate_adapter(
        prompts,
        student_path=student_path(ctx.cfg),
        adapter_path=ctx.one("lora_adapter").path,
        reward_model=rm,
        cfg=ctx.cfg.evaluation,
        seed=ctx.seed,
        memory=read_memory_rows(_memory_paths(ctx.cfg)) if ctx.cfg.evaluation.memory_probe else None,
    )
    table.to_parquet(ctx.out_dir / "generations.parquet", index=False)
    _write_json(ctx.out_dir / "summary.json", summary)
    plot_dimension_deltas(summary, rm.dimensions, ctx.out_dir / "dimension_deltas.png", f"adapter vs base, {ctx.partition}")
    metrics = {k: v for k, v in summary.items() if v is None or isinstance(v, (int, float))}
    metrics.update({f"memory_{k}": v for k, v in summary.get("memory_probe", {}).items() if isinstance(v, int)})
    return StageOutput(
        metrics=metrics,
        metadata={"rows": len(table), "win_rate_by_category": summary["win_rate_by_category"], "memory_probe": summary.get("memory_probe")},
        table="generations.parquet",
        mlflow_artifacts=["summary.json", "dimension_deltas.png"],
    )


# --- reward health index --------------------------------------------------------------------------


def build_reward_health_index(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.health_index import compute_health, plot_health
    from hominem_pipeline.core.reward_model import RewardModel

    generations = pd.read_parquet(ctx.one("evaluation").file("generations.parquet"))
    history = json.loads(ctx.one("lora_adapter").file("training_history.json").read_text())
    rm = RewardModel.load(ctx.one("reward_model").path)
    report = compute_health(rm, generations, history["grad_norms"], ctx.cfg.health, ctx.seed)
    _write_json(ctx.out_dir / "health.json", report.as_dict())
    plot_health(report, ctx.out_dir / "health.png", f"Reward Health Index, {ctx.partition}")
    metrics: dict[str, float | None] = {"rhi": report.rhi, "deployable": float(report.deployable), "partial": float(report.partial)}
    for name, comp in report.components.items():
        metrics[name] = comp.value
    return StageOutput(
        metrics=metrics,
        metadata={"rows": 1, "missing": report.missing, "reason": report.reason, "how": {k: c.how for k, c in report.components.items()}},
        mlflow_artifacts=["health.json", "health.png"],
    )


# --- human preferences (imported, outside the daily chain) ----------------------------------------


def build_human_preferences(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.human_preferences import inbox_files, parse_preference_file

    files = inbox_files(ctx.cfg.data_dir, ctx.partition)
    if not files:
        raise ValueError(
            f"nothing imported for {ctx.partition}; import a file first: "
            f"hominem data import-preferences PATH --format hh-rlhf --date {ctx.partition}"
        )
    parsed = [(path, fmt, parse_preference_file(path, fmt, path.name)) for path, fmt, _ in files]
    pairs = pd.concat([p.pairs for _, _, p in parsed], ignore_index=True)
    before = len(pairs)
    pairs = pairs.drop_duplicates("pair_id", keep="first").reset_index(drop=True)
    quarantine = pd.concat([p.quarantine for _, _, p in parsed], ignore_index=True)
    pairs.to_parquet(ctx.out_dir / "pairs.parquet", index=False)
    return StageOutput(
        metrics={"pairs": len(pairs), "quarantined": len(quarantine), "duplicates_dropped": before - len(pairs), "files": len(files)},
        metadata={
            "rows": len(pairs),
            "files": {path.name: {"format": fmt, "pairs": len(p.pairs), "quarantined": len(p.quarantine)} for path, fmt, p in parsed},
            "quarantine_reasons": quarantine["reason"].value_counts().head(10).to_dict() if len(quarantine) else {},
        },
        table="pairs.parquet",
        quarantine=quarantine,
    )


def _inbox_digest(cfg: HominemConfig, partition: str) -> list[list[str]]:
    from hominem_pipeline.core.human_preferences import inbox_files

    return [[path.name, fmt, sha] for path, fmt, sha in inbox_files(cfg.data_dir, partition)]


# --- the graph ------------------------------------------------------------------------------------

TEACHER_CONTENT = tuple(
    f"teacher.{k}" for k in ("provider", "candidates_per_prompt", "max_new_tokens", "batch_size", "weak_share", "styles", "api")
)

STAGES: tuple[StageSpec, ...] = (
    StageSpec(
        "prompts",
        "Seed prompts sampled for the day (stratified by category) and generated ones, plus the fixed held-out evaluation prompts.",
        "2",
        ("project.seed", "prompts"),
        (),
        build_prompts,
        extra_fingerprint=_prompts_fingerprint,
    ),
    StageSpec(
        "teacher_trajectories",
        "Candidate responses of the teacher, several per prompt, with varied sampling and system prompts.",
        "2",
        # Settings that change the answers; teacher.client (speed, retries) and teacher.prices do not.
        TEACHER_CONTENT + ("models.student",),
        (Upstream("prompts"),),
        build_teacher_trajectories,
    ),
    StageSpec(
        "teacher_labels",
        "The teacher's reward label per candidate: vector, scalar, intensity, safety and rationale.",
        "3",
        ("dimensions", "labeling", "teacher.provider", "teacher.api", "models.student"),
        (Upstream("teacher_trajectories"),),
        build_teacher_labels,
    ),
    StageSpec(
        "reward_model",
        "Multi-head reward model (vector, scalar, intensity, safety, uncertainty) trained on the labels and human pairs of a window of days.",
        "6",
        ("dimensions", "reward_model", "models.encoder", "models.student", "labeling.judge_system", "labeling.scalar_question"),  # what frame: judge / judge_question reads
        (
            Upstream("teacher_labels", lambda c: c.reward_model.window_days),
            Upstream("human_preferences", lambda c: c.reward_model.window_days if c.reward_model.human_preferences else 0, optional=True),
        ),
        build_reward_model,
    ),
    StageSpec(
        "preference_pairs",
        "(prompt, chosen, rejected) pairs by the configured strategy, ranked by the teacher's labels (or the reward model's scores), annotated with both.",
        "4",  # 4: each reply's finished flag (cut at the token budget or ended)
        ("preferences",),
        (Upstream("teacher_labels"), Upstream("reward_model"), Upstream("teacher_trajectories")),
        build_preference_pairs,
        extra_fingerprint=_pairs_fingerprint,
    ),
    StageSpec(
        "lora_adapter",
        "LoRA adapter on the student trained on the preference pairs of a window of days: DPO, the dual-channel loss (plus the memory files) or RL on the reward model.",
        "3",
        ("policy", "models.student"),
        (Upstream("preference_pairs", lambda c: c.policy.window_days), Upstream("reward_model")),
        build_lora_adapter,
        extra_fingerprint=_adapter_fingerprint,
    ),
    StageSpec(
        "evaluation",
        "Base vs base+adapter on the held-out prompts: generations, reward scores, win rate, deltas; the memory probe's facts kept, lost and gained.",
        "3",  # 3: facts judged on the reply's first sentence
        ("evaluation", "policy.dual.memory_files"),
        (Upstream("lora_adapter"), Upstream("reward_model"), Upstream("prompts")),
        build_evaluation,
        extra_fingerprint=_probe_fingerprint,
    ),
    StageSpec(
        "reward_health_index",
        "The Reward Health Index of the new adapter and whether it may go live.",
        "1",
        ("health",),
        (Upstream("evaluation"), Upstream("lora_adapter"), Upstream("reward_model")),
        build_reward_health_index,
    ),
)

HUMAN_PREFERENCES = StageSpec(
    "human_preferences",
    "Human preference pairs imported with `hominem data import-preferences` (HH-RLHF, JSONL or Parquet).",
    "2",
    (),
    (),
    build_human_preferences,
    extra_fingerprint=_inbox_digest,
)

STAGES_BY_NAME = {s.name: s for s in (*STAGES, HUMAN_PREFERENCES)}
