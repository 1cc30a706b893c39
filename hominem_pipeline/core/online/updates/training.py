"""An update trained: the live adapter (or a fresh one on the base) on the replay batch and the memory files,
written whole into its version's folder with its METADATA, history, batch and the people's pairs it held."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from hominem_pipeline.core.common.files import atomic_folder
from hominem_pipeline.core.config import HominemConfig, PolicyConfig
from hominem_pipeline.core.online.live import utc_now
from hominem_pipeline.core.online.replay import FINISHED
from hominem_pipeline.core.online.updates.batch import PEOPLE_SEEN, REPLAY_BATCH, UpdateBatch
from hominem_pipeline.core.online.updates.sources import version_key
from hominem_pipeline.core.pipeline.artifacts import fingerprint

if TYPE_CHECKING:
    from hominem_pipeline.core.policy.lora import AdapterTraining

log = logging.getLogger(__name__)


def _dimension_pairs_last(cfg: HominemConfig, batch: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, int]:
    """(the batch, which rows are dimension pairs, how many train beside each step's rows): with
    `online.nudges.pair_rows: extra` the dimension pairs go last, where the sampler reads them."""
    dimension = batch["source"].astype(str).str.startswith("nudge:")
    if cfg.online.nudges.pair_rows != "extra":
        return batch, dimension, 0
    batch = pd.concat([batch[~dimension], batch[dimension]], ignore_index=True)
    dimension = pd.concat([dimension[~dimension], dimension[dimension]], ignore_index=True)
    return batch, dimension, int(dimension.sum())


def training_pairs(batch: pd.DataFrame) -> pd.DataFrame:
    """The batch as the daily training encodes its pairs; the nudges' weights scale the intensity."""
    columns = {
        "prompt": batch["prompt"],
        "chosen": batch["chosen"],
        "rejected": batch["rejected"],
        "chosen_reward_intensity": batch["reward_intensity"].astype(float),
        "chosen_safety_score": batch["safety_score"].astype(float),
    }
    if "nudge_weight" in batch:
        columns["weight"] = batch["nudge_weight"].astype(float)
    columns |= {f: batch[f].fillna(True).astype(bool) if f in batch else True for f in FINISHED}
    return pd.DataFrame(columns)


def imitated(cfg: HominemConfig, batch: pd.DataFrame, dimension: pd.Series) -> pd.Series:
    """Which of the batch's pairs have their chosen reply imitated too: the dimension pairs with
    `online.nudges.imitate`, the taste pairs and people's choices with `online.taste.imitate`."""
    source = batch["source"].astype(str)
    taste = source.str.startswith("taste:") | (source == "feedback:choice")
    return (dimension & cfg.online.nudges.imitate) | (taste & cfg.online.taste.imitate)


def _memory(cfg: HominemConfig, batch: pd.DataFrame, dimension: pd.Series) -> tuple[pd.DataFrame, list[list[str]]]:
    """(the memory rows, where they come from): the memory files, and the chosen replies the update imitates
    (`imitated`)."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import memory_digest, read_memory_rows

    files = memory_paths(cfg)
    memory, memory_data = read_memory_rows(files), memory_digest(files)
    chosen = batch[imitated(cfg, batch, dimension)]
    if chosen.empty:
        return memory, memory_data
    rows = pd.DataFrame(
        {
            "memory_id": [fingerprint([p, r], 12) for p, r in zip(chosen["prompt"], chosen["chosen"])],
            "prompt": chosen["prompt"],
            "response": chosen["chosen"],
            "facts": [[] for _ in range(len(chosen))],
            "source": chosen["id"],
        }
    )
    memory = pd.concat([memory, rows], ignore_index=True)
    memory = memory.drop_duplicates("memory_id", keep="first").reset_index(drop=True)
    # where they come from: the replay batch written beside the adapter
    memory_data.append([f"{REPLAY_BATCH}#imitated", fingerprint(sorted(rows["memory_id"]), 64)])
    return memory, memory_data


def update_policy(cfg: HominemConfig, steps: int, lr_factor: float) -> PolicyConfig:
    """The policy settings an update trains with: its steps, and its learning rate with the slow loop's factor."""
    rate = (cfg.online.learning_rate or cfg.policy.learning_rate) * lr_factor
    return cfg.policy.model_copy(update={"max_steps": steps, "learning_rate": rate})


def _fit(cfg: HominemConfig, plan: UpdateBatch, pairs: pd.DataFrame, memory: pd.DataFrame, n_beside: int, out: Path):
    """The dual-channel training of the update into `out`, on `runtime.device`."""
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.dual import (
        REFERENCE_CACHE,
        DualBatching,
        DualStart,
        beside_sampler,
        train_dual_adapter,
    )

    oc, steps = cfg.online, plan.steps
    policy = update_policy(cfg, steps, plan.lr_factor)
    needs_rm = "reward_model" in (policy.dual.intensity_source, policy.dual.safety_source)
    per_step = math.ceil(n_beside / (steps * policy.gradient_accumulation_steps)) if n_beside else 0
    sampler = beside_sampler(len(pairs) - n_beside, n_beside, per_step, plan.seed) if n_beside else None
    reference = cfg.data_dir / REFERENCE_CACHE
    return train_dual_adapter(
        pairs,
        memory,
        start=DualStart(
            student_path(cfg),
            init_adapter=plan.live_adapter,
            device=resolve_device(cfg.runtime.device),
            reference_cache=reference,
        ),
        cfg=policy,
        out_dir=out,
        seed=plan.seed,
        reward_model=plan.reward_model if needs_rm else None,
        batching=DualBatching(
            pair_sampler=sampler,
            extra_pair_rows=per_step,
            memory_per_step=math.ceil(len(memory) / steps) if oc.rehearse_memory else None,
        ),
    )


def train_update(cfg: HominemConfig, plan: UpdateBatch, out: Path) -> AdapterTraining:
    """Train the update `plan` describes into the new version's folder `out`, written whole (a temp folder
    renamed) with its METADATA, training history, replay batch and the people's pairs its buffer held. With
    `online.rehearse_memory`, every memory row is trained on once; with `online.nudges.pair_rows: extra`, every
    dimension pair once, beside each step's pair rows; the chosen replies it imitates (`imitated`) are memory rows
    too."""
    from hominem_pipeline.core.evaluation.manifold import keep_manifold
    from hominem_pipeline.core.lm.models import base_name
    from hominem_pipeline.core.policy.lora import name_base

    batch, dimension, n_beside = _dimension_pairs_last(cfg, plan.batch)
    pairs = training_pairs(batch)
    memory, memory_data = _memory(cfg, batch, dimension)
    with atomic_folder(out) as tmp:
        result = _fit(cfg, plan, pairs, memory, n_beside, tmp)
        history = {"history": result.history, "grad_norms": result.grad_norms}
        (tmp / "training_history.json").write_text(json.dumps(history, indent=1) + "\n")
        batch.drop(columns=["vector"]).to_parquet(tmp / REPLAY_BATCH, index=False)
        (tmp / PEOPLE_SEEN).write_text(json.dumps(sorted(plan.heard)) + "\n")
        try:  # the gate judges the reward signal this update learned from (`evaluation.manifold`)
            keep_manifold(plan.reward_model, pairs, tmp, f"The reward signal of online update {out.name}")
        except ValueError as exc:  # a reward model written before it carried its labels' spread: not measured
            log.warning("online update %s: reward manifold not measured: %s", out.name, exc)
        _write_metadata(cfg, plan, result, len(pairs), memory_data, tmp)
        name_base(tmp, base_name(cfg))
    return result


def _write_metadata(
    cfg: HominemConfig, plan: UpdateBatch, result: Any, n_pairs: int, memory_data: list[list[str]], folder: Path
) -> None:
    from hominem_pipeline.core.lm.model_refs import model_name
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.metadata import AdapterMetadata

    policy = update_policy(cfg, plan.steps, plan.lr_factor)
    AdapterMetadata(
        mode="dual",
        base_model=model_name(student_path(cfg)),
        base_checksum=result.base_checksum,
        reward_model=version_key(plan.rm_path),
        preference_data=plan.teacher_keys,
        preference_pairs=n_pairs,
        memory_data=memory_data,
        channel_contributions=result.channel_contributions,
        channels=result.channels,
        lora=policy.lora.model_dump(),
        training={
            "online": cfg.online.model_dump(mode="json"),
            "from": plan.live,
            "policy": policy.model_dump(mode="json"),
        },
        date=utc_now()[:10],
    ).write(folder)
