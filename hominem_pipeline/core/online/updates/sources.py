"""Where an online update's data comes from: the interaction log's events and people's pairs in it, the
teacher's pairs the live adapter was trained on, the reward model it follows, the held-out prompts it is
gated on."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.files import atomic_path
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.online.live import LiveError, LiveState
from hominem_pipeline.core.online.replay import FINISHED, ITEM_COLUMNS, feedback_pair_items, teacher_replay_items
from hominem_pipeline.core.pipeline.artifacts import fingerprint

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel

log = logging.getLogger(__name__)

SCORES = "replay_scores.parquet"  # per reward model: the safety and vector of each people's pair's chosen reply


def feedback_events(cfg: HominemConfig) -> list[dict[str, Any]]:
    """The events of the last `online.feedback_days` files of the interaction log, oldest first."""
    from hominem_pipeline.core.online.log import log_folder, read_events

    folder = log_folder(cfg)
    files = sorted(folder.glob("*.jsonl"))[-cfg.online.feedback_days :] if folder.is_dir() else []
    return [e for path in files for e in read_events(path)]


def _scored(
    cfg: HominemConfig, reward_model: RewardModel, rm_path: Path, pairs: pd.DataFrame
) -> dict[str, np.ndarray | list]:
    """The reward model's safety score and vector of each pair's chosen reply; pairs scored before by
    the same reward model are read from its cache (`<log_dir>/replay/<reward model>/`), the rest scored
    and added."""
    folder = cfg.data_dir / cfg.serving.log_dir / "replay" / fingerprint([str(rm_path.resolve())], 16)
    path = folder / SCORES
    cached = pd.read_parquet(path) if path.is_file() else pd.DataFrame(columns=["pair_id", "safety_score", "vector"])
    known = set(cached["pair_id"])
    todo = pairs[~pairs["pair_id"].isin(known)]
    if len(todo):
        raw = reward_model.raw_scores(list(todo["prompt"]), list(todo["chosen"]))
        new = pd.DataFrame(
            {
                "pair_id": todo["pair_id"].to_numpy(),
                "safety_score": raw["safety_score"].astype(float),
                "vector": [json.dumps(dict(zip(reward_model.dimensions, map(float, row)))) for row in raw["vector"]],
            }
        )
        cached = pd.concat([cached, new], ignore_index=True) if len(cached) else new
        with atomic_path(path) as tmp:
            cached.to_parquet(tmp, index=False)
    by_id = cached.drop_duplicates("pair_id", keep="last").set_index("pair_id").loc[list(pairs["pair_id"])]
    return {
        "safety_score": by_id["safety_score"].to_numpy(dtype=float),
        "vector": [json.loads(v) for v in by_id["vector"]],
    }


def feedback_items(
    cfg: HominemConfig, events: list[dict[str, Any]], pairs: pd.DataFrame, reward_model: RewardModel, rm_path: Path
) -> pd.DataFrame:
    """People's preference pairs among the log's `events` (`feedback_tables(events).pairs`) as replay items."""
    from hominem_pipeline.core.online.events import STRENGTHS

    if pairs.empty:
        return pd.DataFrame(columns=ITEM_COLUMNS + FINISHED)
    times = {e["id"]: e["time"] for e in events if e.get("kind") == "turn"}
    return feedback_pair_items(pairs, times, _scored(cfg, reward_model, rm_path, pairs), max(STRENGTHS.values()))


def teacher_items(cfg: HominemConfig, sources: list[Any]) -> tuple[pd.DataFrame, list[Any]]:
    """The teacher's preference pairs of the newest `online.teacher_days` days among `sources` (VersionKeys
    of preference_pairs versions) as replay items, and the keys they came from."""
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    store = ArtifactStore(cfg.data_dir)
    keys = sorted(sources, key=lambda k: k.partition)[-cfg.online.teacher_days :] if cfg.online.teacher_days else []
    refs, used = [], []
    for key in keys:
        ref = store.existing(key.asset, key.partition, key.version)
        if ref is None:
            log.warning(
                "the teacher's pairs %s/%s are gone from %s; the update goes on without them",
                key.partition,
                key.version,
                cfg.data_dir,
            )
            continue
        refs.append(ref)
        used.append(key)
    return teacher_replay_items(store, refs), used


def held_out_prompts(cfg: HominemConfig, sources: list[Any]) -> list[str]:
    """The held-out prompts the update is gated on: those of the prompts the newest of `sources` (the
    live adapter's preference_pairs) was built from; without sources, `promotion.gate_prompts`."""
    from hominem_pipeline.core.builds.common import prompts_of
    from hominem_pipeline.core.online.promotion import gate_prompts
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    store = ArtifactStore(cfg.data_dir)
    for key in sorted(sources, key=lambda k: k.partition, reverse=True):
        ref = store.existing(key.asset, key.partition, key.version)
        found = store.upstream(ref, "prompts") if ref is not None else None
        if found is not None:
            return [p.text for p in prompts_of(pd.read_parquet(found.file("prompts.parquet")), "eval")]
    return gate_prompts(cfg)


def update_sources(cfg: HominemConfig, state: LiveState) -> tuple[Path, list[Any]]:
    """(the reward model, the teacher's preference_pairs versions) an update follows: those the live
    adapter was trained with (its METADATA.json) and the reward model the live pointer names; with the
    base live, those of the newest adapter the gate judged (history.json); with none judged yet, the
    newest reward model and preference pairs built under this config."""
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.policy.metadata import AdapterMetadata

    current = state.current()
    anchor = state.adapter_path(current)
    if anchor is None:
        judged = [state.absolute(e["adapter"]) for e in state.history() if e.get("adapter")]
        anchor = next((a for a in reversed(judged) if (a / "METADATA.json").is_file()), None)
    meta = AdapterMetadata.read(anchor) if anchor is not None else None
    rm_path = state.reward_model_path(current) or (meta.reward_model.path(cfg.data_dir) if meta else None)
    pairs = list(meta.preference_data) if meta else []
    if meta is None:
        data = lineage(cfg)
        rm_ref, pairs_ref = data.newest("reward_model")[0], data.newest("preference_pairs")[0]
        rm_path = rm_ref.path if rm_ref else None
        pairs = [version_key(pairs_ref.path)] if pairs_ref else []
    if rm_path is None or not rm_path.is_dir():
        raise LiveError(
            "no reward model to score people's pairs and gate the update with "
            f"({rm_path or 'none built'}); build one with `hominem run`"
        )
    return rm_path, pairs


def version_key(path: Path) -> Any:
    """The VersionKey of a stage's version folder, `<data>/<asset>/<partition>/<version>`."""
    from hominem_pipeline.core.policy.metadata import VersionKey

    asset, partition, version = Path(path).parts[-3:]
    return VersionKey(asset=asset, partition=partition, version=version)


# the reward model an update of this process loaded, by folder (versions are immutable)
_REWARD_MODELS: dict[str, Any] = {}


def reward_model_at(path: Path, cfg: HominemConfig) -> Any:
    """The reward model at `path` as the project's stages score with it (`project_reward_model`: on
    `runtime.device`, through the feature cache), loaded once per process (the newest one asked for is kept)."""
    from hominem_pipeline.core.reward.model import project_reward_model

    key = str(Path(path).resolve())
    if key not in _REWARD_MODELS:
        _REWARD_MODELS.clear()
        _REWARD_MODELS[key] = project_reward_model(path, cfg)
    return _REWARD_MODELS[key]


def prepare(cfg: HominemConfig) -> None:
    """Load ahead what the next update loads first: the reward model it would follow now and the student
    its guard columns read (`hominem live update --ready`, while it waits). If another becomes live in
    the meantime, the update loads that one."""
    try:
        rm_path, _ = update_sources(cfg, LiveState(cfg.data_dir))
        reward_model_at(rm_path, cfg).warm()
    except Exception as exc:  # noqa: BLE001 - the update itself meets it again and reports it
        log.warning("could not load ahead what the next update needs (%s); it loads it when it runs", exc)
