"""The `lora_adapter` stage: a LoRA adapter on the student, by `policy.mode` (dpo, dual or rl)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.builds.common import write_json
from hominem_pipeline.core.builds.memory_files import memory_paths
from hominem_pipeline.core.config import HominemConfig, PolicyConfig
from hominem_pipeline.core.evaluation.manifold import (
    MANIFOLD,
    MANIFOLD_PLOT,
    ManifoldShape,
)
from hominem_pipeline.core.evaluation.memory import memory_digest
from hominem_pipeline.core.pipeline.artifacts import fingerprint
from hominem_pipeline.core.pipeline.stage import CheckOutcome, StageContext, StageOutput
from hominem_pipeline.core.policy.metadata import AdapterMetadata

log = logging.getLogger(__name__)


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


def people_training_pairs(ctx: StageContext) -> pd.DataFrame:
    """People's own pairs the daily adapter learns from (`builds.reward_model.human_pairs`: the shipped ones but the
    held-out it is judged on, the window's imported pairs and page choices), as preference rows
    (`policy.pairs.people_rows`)."""
    from hominem_pipeline.core.builds.reward_model import human_pairs
    from hominem_pipeline.core.policy.pairs import people_rows

    return people_rows(human_pairs(ctx, held_out=False))


def people_start_setting(cfg: HominemConfig) -> tuple[Path, str] | None:
    """(the shipped features folder, the key of the people's training pairs) for `train_dual_adapter`'s
    `people_start`; None where `policy.dual.people_start` is null or no people's pairs are shipped."""
    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.policy.people_start import pairs_key
    from hominem_pipeline.core.reward.feature_cache import SHIPPED_FEATURES

    train = people_pairs(cfg, "train") if cfg.policy.dual.people_start is not None else None
    return None if train is None else (cfg.path(SHIPPED_FEATURES), pairs_key(train))


def reward_manifold_check(metrics: dict[str, Any], cfg: HominemConfig, folder: Path) -> CheckOutcome:
    """The `reward_manifold` check: the adapter's figures judged under today's health.manifold."""
    shape = ManifoldShape.read(folder)
    if shape is None:
        return CheckOutcome(
            False, f"{folder} has no {MANIFOLD}: the reward manifold was not measured; rebuild the adapter", {}
        )
    verdict = shape.judged(cfg.health.manifold)
    meta = {
        **shape.metrics(),
        "blocked": verdict.blocked,
        "spread_ratio": shape.spread_ratio,
        "decided_share": shape.decided_share,
        "contribution_share": shape.contribution_share,
        "pairs": shape.pairs,
        **verdict.thresholds,
    }
    return CheckOutcome(not verdict.blocked, verdict.summary(), meta)


def _launched(
    ctx: StageContext,
    common: dict[str, Any],
    slow: Any,
    pairs: pd.DataFrame,
    *,
    reward_model: bool = False,
    **inputs: Any,
) -> Any:
    """The adapter trained in `runtime.train_processes` processes (`policy.launch`) on what the stage
    prepared, each step's figures logged to the stage's run afterwards as they would have been live;
    `reward_model`: the processes load the day's reward model (rank 0 through the project's feature cache)."""
    import tempfile

    from hominem_pipeline.core.online.slow_loop import adjusted_policy
    from hominem_pipeline.core.policy.launch import run_launched, write_spec
    from hominem_pipeline.core.reward.feature_cache import (
        FEATURE_CACHE,
        SHIPPED_FEATURES,
    )

    cfg, processes = ctx.cfg, ctx.cfg.runtime.train_processes
    # every policy setting, as a PolicyConfig the processes read whole: the slice's view holds only what this
    # stage's trainer reads (the same trainer code, whose reads the slice checks when it runs in one process)
    policy = adjusted_policy(cfg.full.policy, slow)  # the slow loop's factors in force today, as the stage read them
    with tempfile.TemporaryDirectory(prefix="hominem-launch-") as scratch:
        spec = write_spec(
            Path(scratch),
            mode=policy.mode,
            student=common["student_path"],
            policy=policy,
            seed=common["seed"],
            out_dir=common["out_dir"],
            pairs=pairs,
            device=cfg.runtime.device,
            **(
                {
                    "reward_model": ctx.one("reward_model").path,
                    "feature_cache": (cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES)),
                }
                if reward_model
                else {}
            ),
            **inputs,
        )
        result = run_launched(spec, processes, device=cfg.runtime.device)
    for entry in result.history:
        common["on_log"](int(entry["step"]), {k: v for k, v in entry.items() if k != "step"})
    return result


def build_lora_adapter(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.lm.model_refs import model_name
    from hominem_pipeline.core.lm.models import base_name, shown_path, student_path
    from hominem_pipeline.core.online.slow_loop import adjusted_policy, adjustment_on
    from hominem_pipeline.core.policy.export import write_model_card
    from hominem_pipeline.core.policy.lora import name_base
    from hominem_pipeline.core.policy.pairs import read_preference_pairs
    from hominem_pipeline.core.reward.feature_cache import SHIPPED_FEATURES
    from hominem_pipeline.core.reward.model import project_reward_model

    slow = adjustment_on(
        ctx.cfg.data_dir, ctx.partition
    )  # the slow loop's factors in force today (part of the version)
    pc = adjusted_policy(ctx.cfg.policy, slow)
    pair_refs = ctx.inputs["preference_pairs"]
    loaded: list[Any] = []

    def reward_model() -> Any:  # loaded when first needed (training or the manifold's figures), once
        if not loaded:
            loaded.append(project_reward_model(ctx.one("reward_model").path, ctx.cfg))
        return loaded[0]

    pairs = read_preference_pairs([r.file("pairs.parquet") for r in pair_refs])
    # the pairs the reward model ranked: the signal its manifold's figures are read on (people's pairs are people's)
    ranked = pairs
    rm_ref = ctx.one("reward_model")
    common = dict(
        student_path=student_path(ctx.cfg),
        cfg=pc,
        out_dir=ctx.out_dir,
        seed=policy_seed(ctx.seed, pc.seed),
        on_log=lambda step, m: ctx.run.log_metrics(
            {k.replace("/", "_"): v for k, v in m.items() if v is not None and np.isfinite(v)}, step=step
        ),
    )
    memory_data: list[list[str]] = []
    n_people, start = 0, "a fresh LoRA"
    processes = ctx.cfg.runtime.train_processes
    if pc.mode == "dpo":
        from hominem_pipeline.core.policy.dpo import train_dpo_adapter

        result = _launched(ctx, common, slow, pairs) if processes > 1 else train_dpo_adapter(pairs, **common)
    elif pc.mode == "dual":
        from hominem_pipeline.core.evaluation.memory import read_memory_rows
        from hominem_pipeline.core.policy.dual import (
            REFERENCE_CACHE,
            train_dual_adapter,
        )

        memory = read_memory_rows(memory_paths(ctx.cfg))
        memory_data = memory_digest(memory_paths(ctx.cfg))
        needs_rm = "reward_model" in (pc.dual.intensity_source, pc.dual.safety_source)
        sampler = None
        if pc.dual.sampler == "replay":
            from hominem_pipeline.core.online.replay import (
                ReplayBuffer,
                teacher_replay_items,
            )
            from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

            sampler = ReplayBuffer(
                teacher_replay_items(ArtifactStore(ctx.cfg.data_dir), pair_refs), ctx.cfg.replay, recent="newest_time"
            ).batches(common["seed"])  # the newest day's pairs are the recent ones
        n_ranked = len(pairs)
        if pc.dual.people_share > 0:
            from hominem_pipeline.core.policy.dual import mixed_sampler

            people = people_training_pairs(ctx)
            n_people = len(people)
            pairs = pd.concat([pairs, people], ignore_index=True)
            sampler = mixed_sampler(n_ranked, n_people, pc.dual.people_share, common["seed"], sampler)
        caches = dict(
            reference_cache=ctx.cfg.data_dir / REFERENCE_CACHE,
            shipped_reference=ctx.cfg.path(SHIPPED_FEATURES),
            people_start=people_start_setting(ctx.cfg),
        )
        if processes > 1:  # the launched processes replay the batches this one draws from its samplers
            from hominem_pipeline.core.policy.dual import batch_rows
            from hominem_pipeline.core.policy.launch import draw_batches

            batches = (
                None
                if sampler is None
                else draw_batches(
                    sampler,
                    batch_rows(pc.dual, pc.batch_size, len(memory), len(pairs))[0],
                    pc.max_steps * pc.gradient_accumulation_steps,
                )
            )
            result = _launched(
                ctx, common, slow, pairs, memory=memory, batches=batches, reward_model=needs_rm, **caches
            )
        else:
            result = train_dual_adapter(
                pairs,
                memory,
                reward_model=reward_model() if needs_rm else None,
                pair_sampler=sampler,
                **caches,
                **common,
            )
        start = result.channels["start"]
    else:
        from hominem_pipeline.core.policy.rl import train_rl_adapter

        weights = ctx.cfg.preferences.dimension_weights
        result = (
            _launched(ctx, common, slow, pairs[["prompt"]], reward_model=True, dimension_weights=weights)
            if processes > 1
            else train_rl_adapter(
                list(pairs["prompt"]), reward_model=reward_model(), dimension_weights=weights, **common
            )
        )
    write_json(ctx.out_dir / "training_history.json", {"history": result.history, "grad_norms": result.grad_norms})
    from hominem_pipeline.core.evaluation.manifold import keep_manifold

    shape = keep_manifold(reward_model(), ranked, ctx.out_dir, f"The reward signal of lora_adapter {ctx.partition}")
    AdapterMetadata(
        mode=pc.mode,
        base_model=model_name(student_path(ctx.cfg)),
        base_checksum=result.base_checksum,
        reward_model=rm_ref.key,
        preference_data=[r.key for r in pair_refs],
        preference_pairs=len(pairs) - n_people,
        memory_data=memory_data,
        channel_contributions=result.channel_contributions,
        channels=result.channels,
        lora=pc.lora.model_dump(),
        training=_training_settings(pc)
        | ({"replay": ctx.cfg.replay.model_dump()} if pc.mode == "dual" and pc.dual.sampler == "replay" else {})
        | (
            {"slow_loop": {"lr_factor": slow.lr_factor, "rank_factor": slow.rank_factor, "in_force": list(slow.steps)}}
            if not slow.neutral
            else {}
        ),
        date=ctx.partition,
    ).write(ctx.out_dir)
    shares = result.channels.get("gradient_share") or {}  # the dominance monitor's (dual)
    metrics = {
        **result.metrics,
        **{f"channel_{k}": v for k, v in result.channel_contributions.items()},
        "people_pairs": n_people,
        **{f"gradient_share_{c}": s for c, s in shares.items()},
        **({"rebalanced_steps": result.channels["rebalanced_steps"]} if shares else {}),
        **shape.metrics(),
    }
    student = ctx.cfg.models.student
    name_base(ctx.out_dir, base_name(ctx.cfg))
    write_model_card(
        ctx.out_dir,
        base_hub_id=student.hub_id,
        base_path=shown_path(ctx.cfg, student_path(ctx.cfg)),
        gguf_package=student.gguf_package,
        mode=pc.mode,
        date=ctx.partition,
        metrics=metrics,
        data={
            "preference pairs": f"{len(pairs) - n_people} over {len(pair_refs)} day(s)",
            **({"people's pairs": f"{n_people} ({pc.dual.people_share:.0%} of each batch)"} if n_people else {}),
            "reward model": f"{rm_ref.partition}/{rm_ref.version}",
            "LoRA": f"r {pc.lora.r}, alpha {pc.lora.alpha}, on {', '.join(pc.lora.target_modules)}",
            "started from": start,
        },
    )
    return StageOutput(
        metrics=metrics,
        metadata={
            "rows": len(pairs) - n_people,
            "mode": pc.mode,
            "pair_partitions": [r.partition for r in pair_refs],
            "reward_model_version": rm_ref.version,
            "started from": start,
            "learning_rate": pc.learning_rate,
            "lora_r": pc.lora.r,
            **(
                {
                    "slow loop": f"{', '.join(slow.steps)} in force (learning rate x{slow.lr_factor:g}, rank "
                    f"x{slow.rank_factor:g})"
                }
                if not slow.neutral
                else {}
            ),
        },
        mlflow_artifacts=[
            "adapter_config.json",
            "adapter_model.safetensors",
            "METADATA.json",
            "README.md",
            "training_history.json",
            MANIFOLD,
            MANIFOLD_PLOT,
        ],
    )
