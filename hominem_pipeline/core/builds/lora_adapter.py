"""The `lora_adapter` stage: a LoRA adapter on the student, by `policy.mode` (dpo, dual or rl)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
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
    from hominem_pipeline.core.policy.launch import LaunchSpec, run_launched, write_spec
    from hominem_pipeline.core.reward.feature_cache import (
        FEATURE_CACHE,
        SHIPPED_FEATURES,
    )

    cfg, processes = ctx.cfg, ctx.cfg.runtime.train_processes
    # every policy setting, as a PolicyConfig the processes read whole: the slice's view holds only what this
    # stage's trainer reads (the same trainer code, whose reads the slice checks when it runs in one process)
    policy = adjusted_policy(cfg.full.policy, slow)  # the slow loop's factors in force today, as the stage read them
    with tempfile.TemporaryDirectory(prefix="hominem-launch-") as scratch:
        memory, batches = inputs.pop("memory", None), inputs.pop("batches", None)
        if reward_model:
            inputs |= {
                "reward_model": ctx.one("reward_model").path,
                "feature_cache": (cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES)),
            }
        spec = LaunchSpec(
            mode=policy.mode,
            student=common["student_path"],
            policy=policy,
            seed=common["seed"],
            out_dir=common["out_dir"],
            device=cfg.runtime.device,
            **inputs,
        )
        spec = write_spec(Path(scratch), spec, pairs=pairs, memory=memory, batches=batches)
        result = run_launched(spec, processes, device=cfg.runtime.device)
    for entry in result.history:
        common["on_log"](int(entry["step"]), {k: v for k, v in entry.items() if k != "step"})
    return result


@dataclass
class _Run:
    """What the stage's trainers share: the day's pairs, the policy settings in force, the common arguments."""

    ctx: StageContext
    pc: PolicyConfig  # with the slow loop's factors in force today
    slow: Any  # the slow loop's adjustment
    pairs: pd.DataFrame
    common: dict[str, Any]  # student_path, device, cfg, out_dir, seed, on_log: what every trainer takes
    loaded: list[Any] = field(default_factory=list)

    @property
    def pair_refs(self) -> list[Any]:
        return self.ctx.inputs["preference_pairs"]

    def reward_model(self) -> Any:
        """The day's reward model, loaded when first needed (training or the manifold's figures), once."""
        from hominem_pipeline.core.reward.model import project_reward_model

        if not self.loaded:
            self.loaded.append(project_reward_model(self.ctx.one("reward_model").path, self.ctx.cfg))
        return self.loaded[0]


@dataclass
class _Trained:
    result: Any  # AdapterTraining
    pairs: pd.DataFrame  # what it trained on: the day's pairs, then people's
    n_people: int = 0
    memory_data: list[list[str]] = field(default_factory=list)
    start: str = "a fresh LoRA"


def _run(ctx: StageContext) -> _Run:
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.online.slow_loop import adjusted_policy, adjustment_on
    from hominem_pipeline.core.policy.pairs import read_preference_pairs

    slow = adjustment_on(ctx.cfg.data_dir, ctx.partition)  # the slow loop's factors in force today (versioned)
    pc = adjusted_policy(ctx.cfg.policy, slow)
    pairs = read_preference_pairs([r.file("pairs.parquet") for r in ctx.inputs["preference_pairs"]])
    common = dict(
        student_path=student_path(ctx.cfg),
        device=resolve_device(ctx.cfg.runtime.device),
        cfg=pc,
        out_dir=ctx.out_dir,
        seed=policy_seed(ctx.seed, pc.seed),
        on_log=lambda step, m: ctx.run.log_metrics(
            {k.replace("/", "_"): v for k, v in m.items() if v is not None and np.isfinite(v)}, step=step
        ),
    )
    return _Run(ctx, pc, slow, pairs, common)


def _train_dual(run: _Run) -> _Trained:
    """The dual-channel adapter: on the day's pairs (by the replay buffer, with people's pairs mixed in where
    `policy.dual.people_share` says) and the memory files."""
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.policy.dual import REFERENCE_CACHE, DualBatching, DualStart, train_dual_adapter
    from hominem_pipeline.core.reward.feature_cache import SHIPPED_FEATURES

    ctx, pc, common = run.ctx, run.pc, run.common
    memory = read_memory_rows(memory_paths(ctx.cfg))
    needs_rm = "reward_model" in (pc.dual.intensity_source, pc.dual.safety_source)
    memory_data = memory_digest(memory_paths(ctx.cfg))
    pairs, n_people, sampler = _dual_pairs(run)
    caches = dict(
        reference_cache=ctx.cfg.data_dir / REFERENCE_CACHE,
        shipped_reference=ctx.cfg.path(SHIPPED_FEATURES),
        people_start=people_start_setting(ctx.cfg),
    )
    if ctx.cfg.runtime.train_processes > 1:  # the launched processes replay the batches this one draws
        from hominem_pipeline.core.policy.dual import batch_rows
        from hominem_pipeline.core.policy.launch import draw_batches

        batches = None
        if sampler is not None:
            per_batch = batch_rows(pc.dual, pc.batch_size, len(memory), len(pairs))[0]
            batches = draw_batches(sampler, per_batch, pc.max_steps * pc.gradient_accumulation_steps)
        result = _launched(
            ctx, common, run.slow, pairs, memory=memory, batches=batches, reward_model=needs_rm, **caches
        )
    else:
        result = train_dual_adapter(
            pairs,
            memory,
            start=DualStart(common["student_path"], device=common["device"], **caches),
            cfg=pc,
            out_dir=common["out_dir"],
            seed=common["seed"],
            reward_model=run.reward_model() if needs_rm else None,
            batching=DualBatching(pair_sampler=sampler),
            on_log=common["on_log"],
        )
    return _Trained(result, pairs, n_people, memory_data, result.channels["start"])


def _dual_pairs(run: _Run) -> tuple[pd.DataFrame, int, Any]:
    """(the pairs the dual adapter trains on, how many of them are people's, the sampler that draws them; None:
    each once per pass)."""
    ctx, pc, pairs = run.ctx, run.pc, run.pairs
    sampler = None
    if pc.dual.sampler == "replay":
        from hominem_pipeline.core.online.replay import ReplayBuffer, teacher_replay_items
        from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

        items = teacher_replay_items(ArtifactStore(ctx.cfg.data_dir), run.pair_refs)
        # the newest day's pairs are the recent ones
        sampler = ReplayBuffer(items, ctx.cfg.replay, recent="newest_time").batches(run.common["seed"])
    n_people = 0
    if pc.dual.people_share > 0:
        from hominem_pipeline.core.policy.dual import mixed_sampler

        people = people_training_pairs(ctx)
        n_ranked, n_people = len(pairs), len(people)
        pairs = pd.concat([pairs, people], ignore_index=True)
        sampler = mixed_sampler(n_ranked, n_people, pc.dual.people_share, run.common["seed"], sampler)
    return pairs, n_people, sampler


def _train(run: _Run) -> _Trained:
    """The adapter by `policy.mode`, in this process or in `runtime.train_processes` launched ones."""
    processes, pairs, common = run.ctx.cfg.runtime.train_processes, run.pairs, run.common
    if run.pc.mode == "dual":
        return _train_dual(run)
    if run.pc.mode == "dpo":
        from hominem_pipeline.core.policy.dpo import train_dpo_adapter

        launched = processes > 1
        return _Trained(
            _launched(run.ctx, common, run.slow, pairs) if launched else train_dpo_adapter(pairs, **common), pairs
        )
    from hominem_pipeline.core.policy.rl import train_rl_adapter

    weights = run.ctx.cfg.preferences.dimension_weights
    if processes > 1:
        result = _launched(run.ctx, common, run.slow, pairs[["prompt"]], reward_model=True, dimension_weights=weights)
    else:
        prompts = list(pairs["prompt"])
        result = train_rl_adapter(prompts, reward_model=run.reward_model(), dimension_weights=weights, **common)
    return _Trained(result, pairs)


def _write_metadata(run: _Run, trained: _Trained) -> None:
    from hominem_pipeline.core.lm.model_refs import model_name
    from hominem_pipeline.core.lm.models import student_path

    ctx, pc, slow, result = run.ctx, run.pc, run.slow, trained.result
    training = _training_settings(pc)
    if pc.mode == "dual" and pc.dual.sampler == "replay":
        training["replay"] = ctx.cfg.replay.model_dump()
    if not slow.neutral:
        training["slow_loop"] = {
            "lr_factor": slow.lr_factor,
            "rank_factor": slow.rank_factor,
            "in_force": list(slow.steps),
        }
    AdapterMetadata(
        mode=pc.mode,
        base_model=model_name(student_path(ctx.cfg)),
        base_checksum=result.base_checksum,
        reward_model=ctx.one("reward_model").key,
        preference_data=[r.key for r in run.pair_refs],
        preference_pairs=len(trained.pairs) - trained.n_people,
        memory_data=trained.memory_data,
        channel_contributions=result.channel_contributions,
        channels=result.channels,
        lora=pc.lora.model_dump(),
        training=training,
        date=ctx.partition,
    ).write(ctx.out_dir)


def _write_card(run: _Run, trained: _Trained, metrics: dict[str, Any]) -> None:
    """The adapter's README: what it is, what it trained on, its figures."""
    from hominem_pipeline.core.lm.models import base_name, shown_path, student_path
    from hominem_pipeline.core.policy.export import write_model_card
    from hominem_pipeline.core.policy.lora import name_base

    ctx, pc, n_people = run.ctx, run.pc, trained.n_people
    rm_ref, student = ctx.one("reward_model"), ctx.cfg.models.student
    name_base(ctx.out_dir, base_name(ctx.cfg))
    data = {"preference pairs": f"{len(trained.pairs) - n_people} over {len(run.pair_refs)} day(s)"}
    if n_people:
        data["people's pairs"] = f"{n_people} ({pc.dual.people_share:.0%} of each batch)"
    data |= {
        "reward model": f"{rm_ref.partition}/{rm_ref.version}",
        "LoRA": f"r {pc.lora.r}, alpha {pc.lora.alpha}, on {', '.join(pc.lora.target_modules)}",
        "started from": trained.start,
    }
    write_model_card(
        ctx.out_dir,
        base_hub_id=student.hub_id,
        base_path=shown_path(ctx.cfg, student_path(ctx.cfg)),
        gguf_package=student.gguf_package,
        mode=pc.mode,
        date=ctx.partition,
        metrics=metrics,
        data=data,
    )


def build_lora_adapter(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.common.locks import training
    from hominem_pipeline.core.evaluation.manifold import keep_manifold

    run = _run(ctx)
    with training(ctx.cfg.data_dir, f"the daily run's lora_adapter {ctx.partition}"):  # never beside an online update
        trained = _train(run)
    result, pc, slow = trained.result, run.pc, run.slow
    write_json(ctx.out_dir / "training_history.json", {"history": result.history, "grad_norms": result.grad_norms})
    reward_signal = f"The reward signal of lora_adapter {ctx.partition}"
    # the pairs the reward model ranked: the signal its manifold's figures are read on (people's pairs are people's)
    shape = keep_manifold(run.reward_model(), run.pairs, ctx.out_dir, reward_signal)
    _write_metadata(run, trained)
    shares = result.channels.get("gradient_share") or {}  # the dominance monitor's (dual)
    metrics = {
        **result.metrics,
        **{f"channel_{k}": v for k, v in result.channel_contributions.items()},
        "people_pairs": trained.n_people,
        **{f"gradient_share_{c}": s for c, s in shares.items()},
        **({"rebalanced_steps": result.channels["rebalanced_steps"]} if shares else {}),
        **shape.metrics(),
    }
    _write_card(run, trained, metrics)
    metadata = {
        "rows": len(trained.pairs) - trained.n_people,
        "mode": pc.mode,
        "pair_partitions": [r.partition for r in run.pair_refs],
        "reward_model_version": ctx.one("reward_model").version,
        "started from": trained.start,
        "learning_rate": pc.learning_rate,
        "lora_r": pc.lora.r,
    }
    if not slow.neutral:
        metadata["slow loop"] = (
            f"{', '.join(slow.steps)} in force (learning rate x{slow.lr_factor:g}, rank x{slow.rank_factor:g})"
        )
    artifacts = ["adapter_config.json", "adapter_model.safetensors", "METADATA.json", "README.md"]
    return StageOutput(
        metrics=metrics,
        metadata=metadata,
        mlflow_artifacts=[*artifacts, "training_history.json", MANIFOLD, MANIFOLD_PLOT],
    )
