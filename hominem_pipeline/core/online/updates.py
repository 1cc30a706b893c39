"""Online updates of the live adapter (design 002 Phase 7.3; the fast loop of 001 Phase 10.3).

One update:

1. builds the replay buffer: people's preference pairs from the last `online.feedback_days` of the
   interaction log (their strength is the intensity; the live reward model scores the chosen reply's
   safety and vector, once per pair and reward model) and the teacher's preference pairs of the newest
   `online.teacher_days` days the live adapter was trained on (`update_sources`);
2. samples `online.batch_items` of them (recent and old, by priority and at random; with people's nudges
   pressing on dimensions, every pair is weighted by the pressure and dimension pairs join the batch,
   taking `online.nudges.pair_share` of it or trained beside it, `nudges.py`) and trains the live adapter
   (the base when none is live) for `online.max_steps` steps (`online.nudges.max_steps` while nudges
   press) of the `dual` loss on them and the memory files, into an immutable `data/live/adapters/<version>/`;
3. offers it to the gate (`promotion.offer`) with its partial Reward Health Index: DCS on its replies to
   the held-out prompts and GVS on its gradient norms, weighted as in `health.weights` and renormalised,
   written to `health.json` beside it. Below `online.skip_below` it stays a candidate; below
   `online.rollback_below` the online update live now is rolled back too; below `online.freeze_below`
   online updates are frozen until `hominem live unfreeze` (each left null: the health calibration's
   `fast_loop.thresholds`, `calibration.fast_loop`).

Before that, facts and corrections people stated in the log, and the replies they thumbed up
(`online.liked_replies`), become memory rows (`facts`, in `online.memory_folder`). An update with nothing
from people to learn from (no pair, no nudge, no newly liked reply, no new fact), nothing
new since the live online update was trained, or whose batch and starting adapter equal an earlier
update's, is skipped with the reason. `hominem live update`, the server's scheduler and
POST /admin/live/update all run `run_update`.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.files import atomic_path
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.evaluation.calibration import fast_loop
from hominem_pipeline.core.online.live import (
    HEALTH,
    LIVE_DIR,
    ONLINE_ADAPTERS,
    LiveError,
    LiveState,
    utc_now,
)
from hominem_pipeline.core.online.nudges import (
    Pressure,
    dimension_pairs,
    nudged_conversations,
    pair_weights,
    pressure,
    sampled_candidates,
    scored_gaps,
)
from hominem_pipeline.core.online.replay import (
    FINISHED,
    ITEM_COLUMNS,
    ReplayBuffer,
    feedback_pair_items,
    teacher_replay_items,
)
from hominem_pipeline.core.online.slow_loop import adjustment_on
from hominem_pipeline.core.pipeline.artifacts import fingerprint

log = logging.getLogger(__name__)

PEOPLE_SEEN = "people_pairs.json"  # beside an online adapter: the ids of people's pairs its replay buffer held
SCORES = "replay_scores.parquet"  # per reward model: the safety and vector of each people's pair's chosen reply
# beside an online adapter: the replay batch it trained on, as trained (the dimension pairs last)
REPLAY_BATCH = "replay_batch.parquet"


@dataclass(frozen=True)
class UpdateResult:
    outcome: str  # promoted | refused | skipped
    reason: str
    version: str | None = None
    live: str | None = None  # what is live afterwards (None: the base)
    partial_rhi: float | None = None
    items: dict[str, int] = field(default_factory=dict)  # the batch by source
    actions: list[str] = field(default_factory=list)  # what the fast loop did beyond refusing: rollback, freeze
    gate: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the replay buffer -------------------------------------------------------------------------------


def feedback_events(cfg: HominemConfig) -> list[dict[str, Any]]:
    """The events of the last `online.feedback_days` files of the interaction log, oldest first."""
    from hominem_pipeline.core.online.log import log_folder, read_events

    folder = log_folder(cfg)
    files = sorted(folder.glob("*.jsonl"))[-cfg.online.feedback_days :] if folder.is_dir() else []
    return [e for path in files for e in read_events(path)]


def _scored(cfg: HominemConfig, reward_model: Any, rm_path: Path, pairs: pd.DataFrame) -> dict[str, np.ndarray | list]:
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
    cfg: HominemConfig, events: list[dict[str, Any]], pairs: pd.DataFrame, reward_model: Any, rm_path: Path
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


def nudge_pairs(
    cfg: HominemConfig,
    keys: list[Any],
    push: Pressure,
    reward_model: Any,
    sampled: Callable[[], pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """`online.nudges.pair_share` of the batch as dimension pairs (`nudges.dimension_pairs`) of the teacher's
    candidates behind the preference pairs `keys`, those the verifier flagged degenerate left out, and of
    the student's own replies `sampled()` returns (`nudges.sampled_candidates`), each scored by `reward_model`
    (none without pressure)."""
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    n = round(cfg.online.nudges.pair_share * cfg.online.batch_items)
    if not push.active or n <= 0:
        return dimension_pairs(pd.DataFrame(), cfg.dimension_names, push, 0, 0.0, 0.0, utc_now())
    store, frames = ArtifactStore(cfg.data_dir), []
    for key in keys:
        ref = store.existing(key.asset, key.partition, key.version)
        labels_ref = store.upstream(ref, "teacher_labels") if ref is not None else None
        if labels_ref is not None:
            frames.append(pd.read_parquet(labels_ref.file("labels.parquet")))
    labels = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    floor = cfg.verifier.min_reply_logp
    if len(labels) and floor is not None and "reply_logp" in labels:
        labels = labels[labels["reply_logp"].isna() | (labels["reply_logp"] >= floor)].reset_index(drop=True)
    own = sampled() if sampled is not None else pd.DataFrame()
    if len(own):
        labels = pd.concat([labels, own], ignore_index=True) if len(labels) else own
    if len(labels):
        dims = list(reward_model.dimensions)
        raw = reward_model.raw_scores(list(labels["prompt"]), list(labels["response"]))
        labels = labels.assign(vector=[dict(zip(dims, map(float, row))) for row in raw["vector"]])
        for column in (
            "reward_intensity",
            "safety_score",
        ):  # the student's replies have no teacher label: the reward model's
            given = labels[column] if column in labels else pd.Series(np.nan, index=labels.index)
            labels[column] = given.astype(float).fillna(
                pd.Series(np.asarray(raw[column], dtype=float), index=labels.index)
            )
    nc = cfg.online.nudges
    return dimension_pairs(
        labels, list(reward_model.dimensions), push, n, nc.min_gap, nc.tolerance, utc_now(), nc.hold
    )


def sample_as_served(
    cfg: HominemConfig,
    adapter: Path | None,
    prompts: list[str],
    k: int,
    seed: int,
    *,
    max_new_tokens: int,
    batch_size: int,
) -> list[list[Any]]:
    """`k` replies (`generation.Generated`) to each prompt from the student with `adapter` (None: the base), sampled
    as the server samples (its temperature, top-p, repetition penalty and plain start), `batch_size` at a time."""
    import contextlib

    from hominem_pipeline.core.lm.generation import chat_text, generate
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.lora import load_policy, merged

    sc = cfg.serving
    model, tokenizer = load_policy(student_path(cfg), adapter, None)
    texts = [chat_text(tokenizer, p) for p in prompts for _ in range(k)]
    out: list[Any] = []
    with merged(model) if adapter is not None else contextlib.nullcontext(model):
        for start in range(0, len(texts), batch_size):
            out += generate(
                model,
                tokenizer,
                texts[start : start + batch_size],
                max_new_tokens=max_new_tokens,
                seed=seed + start,
                temperature=sc.temperature or None,
                top_p=sc.top_p,
                repetition_penalty=sc.repetition_penalty,
                plain_start=sc.plain_start,
            )
    return [out[i * k : (i + 1) * k] for i in range(len(prompts))]


def own_replies(
    cfg: HominemConfig, events: list[dict[str, Any]], push: Pressure, adapter: Path | None, seed: int
) -> pd.DataFrame:
    """The candidates `online.nudges.samples` adds (`nudges.sampled_candidates`): replies sampled from
    `adapter` (None: the base) to the newest `sample_prompts` conversations people nudged, as the server
    samples them (`sample_as_served`), `evaluation.max_new_tokens` long and in batches of
    `evaluation.batch_size`; none without pressure or with `samples` 0."""
    nc, ec = cfg.online.nudges, cfg.evaluation
    conversations = nudged_conversations(events, push, nc.sample_prompts) if push.active and nc.samples else []

    def sample(prompts: list[str], k: int) -> list[list[tuple[str, bool]]]:
        started = time.monotonic()
        drawn = sample_as_served(
            cfg, adapter, prompts, k, seed, max_new_tokens=ec.max_new_tokens, batch_size=ec.batch_size
        )
        log.info(
            "nudges: %d replies sampled from %s to %d nudged conversation(s) in %.0f s",
            len(prompts) * k,
            adapter.name if adapter else "the base",
            len(prompts),
            time.monotonic() - started,
        )
        return [[(g.text, g.finished) for g in replies] for replies in drawn]

    return sampled_candidates(conversations, nc.samples, sample)


def remember_liked(cfg: HominemConfig, conversations: pd.DataFrame) -> int:
    """The replies people thumbed up (`conversations`: the log's, `feedback_tables`) written to
    `online.memory_folder`'s liked.jsonl (memory rows, `facts.write_liked`); returns the rows added, changed or
    removed (0 with the folder or `liked_replies` off)."""
    from hominem_pipeline.core.online.facts import LIKED, write_liked
    from hominem_pipeline.core.online.feedback import liked_replies

    oc = cfg.online
    if oc.memory_folder is None or not oc.liked_replies:
        return 0
    liked, window = liked_replies(conversations)
    if not liked and not (cfg.path(oc.memory_folder) / LIKED).is_file():
        return 0
    path, changed = write_liked(cfg.path(oc.memory_folder), liked, window, oc.liked_replies)
    if changed:
        log.info(
            "%d reply(ies) people liked in the log, %d added, changed or removed, in %s", len(liked), changed, path
        )
    return changed


def stated_facts(cfg: HominemConfig, events: list[dict[str, Any]]) -> list[Any]:
    """The facts people stated in the log's messages, read as `online.facts_by` says (none when
    `online.memory_folder` is null)."""
    from hominem_pipeline.core.online.facts import extract_facts

    oc = cfg.online
    if oc.memory_folder is None:
        return []
    from hominem_pipeline.core.online.facts import FACTS_INSTRUCTION, FACTS_SYSTEM
    from hominem_pipeline.core.teacher.factory import build_teacher

    by_teacher = oc.facts_by in ("teacher", "both")
    # the teacher's answers, per teacher and request text: the teacher is built only for a message not read before
    answers = (
        cfg.data_dir
        / cfg.serving.log_dir
        / "facts"
        / f"{fingerprint([cfg.section('teacher'), FACTS_SYSTEM, FACTS_INSTRUCTION], 16)}.json"
    )
    return extract_facts(
        events,
        rules=oc.facts_by in ("rules", "both"),
        teacher=(lambda: build_teacher(cfg)) if by_teacher else None,
        answers=answers,
    )


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


# -- the partial health index ------------------------------------------------------------------------


def partial_health(
    cfg: HominemConfig,
    reward_model: Any,
    prompts: list[str],
    replies: list[str],
    grad_norms: list[float],
    adapter: Path | None = None,
):
    """The fast loop's Reward Health Index: DCS on the adapter's replies (on the update's LoRA at `adapter`
    with `health.dcs_on: policy`) and GVS on its gradient norms (normalised by the calibration's constant
    for the dual mode, which online updates train in), weighted as in the health index and renormalised
    (`health.aggregate` over the two)."""
    from hominem_pipeline.core.evaluation.calibration import resolve
    from hominem_pipeline.core.evaluation.health import (
        aggregate,
        coherence,
        gradient_variance_stability,
    )

    answered = [i for i, r in enumerate(replies) if r.strip()]
    components = {
        "dcs": coherence(cfg, reward_model, [prompts[i] for i in answered], [replies[i] for i in answered], adapter),
        "gvs": gradient_variance_stability(grad_norms, resolve(cfg).reference("gvi_max", "dual")),
    }
    return aggregate(components, cfg)


# -- one update --------------------------------------------------------------------------------------


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
        pairs = [_version_key(pairs_ref.path)] if pairs_ref else []
    if rm_path is None or not rm_path.is_dir():
        raise LiveError(
            "no reward model to score people's pairs and gate the update with "
            f"({rm_path or 'none built'}); build one with `hominem run`"
        )
    return rm_path, pairs


def _version_key(path: Path):
    """The VersionKey of a stage's version folder, `<data>/<asset>/<partition>/<version>`."""
    from hominem_pipeline.core.policy.metadata import VersionKey

    asset, partition, version = Path(path).parts[-3:]
    return VersionKey(asset=asset, partition=partition, version=version)


_REWARD_MODELS: dict[
    str, Any
] = {}  # the reward model an update of this process loaded, by folder (versions are immutable)


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


def train_update(
    cfg: HominemConfig,
    batch: pd.DataFrame,
    out: Path,
    *,
    seed: int,
    live: str | None,
    live_adapter: Path | None,
    reward_model: Any,
    rm_path: Path,
    teacher_keys: list[Any],
    people_ids: list[str],
    lr_factor: float = 1.0,
    max_steps: int | None = None,
):
    """Train the live adapter (`live_adapter`; None: a fresh one on the base) on the replay `batch` and the
    memory files into the new version's folder `out`, written whole (a temp folder renamed) with its
    METADATA, training history, replay batch and the people's pairs its buffer held. With
    `online.rehearse_memory`, every memory row is trained on once; with `online.nudges.pair_rows` extra, every
    dimension pair once, beside each step's pair rows; with `online.nudges.imitate`, each dimension pair's
    chosen reply is a memory row too. `lr_factor`: the slow loop's lower_lr in force;
    `max_steps`: the update's steps (None: `online.max_steps`)."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.manifold import keep_manifold
    from hominem_pipeline.core.evaluation.memory import memory_digest, read_memory_rows
    from hominem_pipeline.core.lm.model_refs import model_name
    from hominem_pipeline.core.lm.models import base_name, student_path
    from hominem_pipeline.core.policy.dual import (
        REFERENCE_CACHE,
        DualBatching,
        DualStart,
        beside_sampler,
        train_dual_adapter,
    )
    from hominem_pipeline.core.policy.lora import name_base
    from hominem_pipeline.core.policy.metadata import AdapterMetadata

    oc = cfg.online
    dimension, n_beside = batch["source"].astype(str).str.startswith("nudge:"), 0
    if oc.nudges.pair_rows == "extra":  # the dimension pairs last, where the sampler reads them
        batch = pd.concat([batch[~dimension], batch[dimension]], ignore_index=True)
        dimension = pd.concat([dimension[~dimension], dimension[dimension]], ignore_index=True)
        n_beside = int(dimension.sum())
    pairs = pd.DataFrame(
        {
            "prompt": batch["prompt"],
            "chosen": batch["chosen"],
            "rejected": batch["rejected"],
            "chosen_reward_intensity": batch["reward_intensity"].astype(float),
            "chosen_safety_score": batch["safety_score"].astype(float),
            **(
                {"weight": batch["nudge_weight"].astype(float)} if "nudge_weight" in batch else {}
            ),  # the nudges' weights scale the intensity
            **{f: batch[f].fillna(True).astype(bool) if f in batch else True for f in FINISHED},
        }
    )  # as the daily training encodes them
    files = memory_paths(cfg)
    memory, memory_data = read_memory_rows(files), memory_digest(files)
    if oc.nudges.imitate:  # each dimension pair's chosen reply is also a memory row: the student imitates it
        chosen = batch[dimension]
        imitated = pd.DataFrame(
            {
                "memory_id": [fingerprint([p, r], 12) for p, r in zip(chosen["prompt"], chosen["chosen"])],
                "prompt": chosen["prompt"],
                "response": chosen["chosen"],
                "facts": [[] for _ in range(len(chosen))],
                "source": chosen["id"],
            }
        )
        memory = (
            pd.concat([memory, imitated], ignore_index=True)
            .drop_duplicates("memory_id", keep="first")
            .reset_index(drop=True)
        )
        if len(imitated):  # where they come from: the replay batch written beside the adapter
            memory_data.append([f"{REPLAY_BATCH}#imitated", fingerprint(sorted(imitated["memory_id"]), 64)])
    steps = max_steps or oc.max_steps
    policy = cfg.policy.model_copy(
        update={"max_steps": steps, "learning_rate": (oc.learning_rate or cfg.policy.learning_rate) * lr_factor}
    )
    tmp = out.parent / f".{out.name}.{uuid.uuid4().hex}.tmp"
    tmp.mkdir(parents=True)
    try:
        needs_rm = "reward_model" in (policy.dual.intensity_source, policy.dual.safety_source)
        per_step = math.ceil(n_beside / (steps * policy.gradient_accumulation_steps)) if n_beside else 0
        sampler = beside_sampler(len(batch) - n_beside, n_beside, per_step, seed) if n_beside else None
        result = train_dual_adapter(
            pairs,
            memory,
            start=DualStart(
                student_path(cfg), init_adapter=live_adapter, reference_cache=cfg.data_dir / REFERENCE_CACHE
            ),
            cfg=policy,
            out_dir=tmp,
            seed=seed,
            reward_model=reward_model if needs_rm else None,
            batching=DualBatching(
                pair_sampler=sampler,
                extra_pair_rows=per_step,
                memory_per_step=math.ceil(len(memory) / steps) if oc.rehearse_memory else None,
            ),
        )
        (tmp / "training_history.json").write_text(
            json.dumps({"history": result.history, "grad_norms": result.grad_norms}, indent=1) + "\n"
        )
        batch.drop(columns=["vector"]).to_parquet(tmp / REPLAY_BATCH, index=False)
        (tmp / PEOPLE_SEEN).write_text(json.dumps(people_ids) + "\n")
        try:  # the gate judges the reward signal this update learned from (`evaluation.manifold`)
            keep_manifold(reward_model, pairs, tmp, f"The reward signal of online update {out.name}")
        except (
            ValueError
        ) as exc:  # a reward model written before it carried its labels' spread: the gate says not measured
            log.warning("online update %s: reward manifold not measured: %s", out.name, exc)
        AdapterMetadata(
            mode="dual",
            base_model=model_name(student_path(cfg)),
            base_checksum=result.base_checksum,
            reward_model=_version_key(rm_path),
            preference_data=teacher_keys,
            preference_pairs=len(pairs),
            memory_data=memory_data,
            channel_contributions=result.channel_contributions,
            channels=result.channels,
            lora=policy.lora.model_dump(),
            training={"online": oc.model_dump(mode="json"), "from": live, "policy": policy.model_dump(mode="json")},
            date=utc_now()[:10],
        ).write(tmp)
        name_base(tmp, base_name(cfg))
        os.replace(tmp, out)  # the version appears whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def run_update(cfg: HominemConfig, *, by: str, reason: str) -> UpdateResult:
    """One online update of the live adapter, gated; see the module's docstring. One at a time per data
    folder (a file lock; another process's update in progress: skipped); a temp folder an update killed
    mid-training left behind is removed."""
    from filelock import FileLock, Timeout

    folder = cfg.data_dir / LIVE_DIR / ONLINE_ADAPTERS
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(folder / ".update.lock"), timeout=0):
            for torn in folder.glob(".online-*.tmp"):
                shutil.rmtree(torn, ignore_errors=True)
            return _update(cfg, by=by, reason=reason)
    except Timeout:
        return UpdateResult(
            "skipped",
            f"another online update of {cfg.data_dir} is running",
            live=LiveState(cfg.data_dir).current().version,
        )


def _update(cfg: HominemConfig, *, by: str, reason: str) -> UpdateResult:
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import memory_digest
    from hominem_pipeline.core.online.facts import write_extracted
    from hominem_pipeline.core.online.feedback import feedback_tables
    from hominem_pipeline.core.online.promotion import offer, rollback

    started = time.monotonic()
    oc = cfg.online
    limits = fast_loop(cfg)  # before anything trains: a missing threshold is named now
    skip, back, freeze = limits["skip_below"], limits["rollback_below"], limits["freeze_below"]
    state = LiveState(cfg.data_dir)
    current = state.current()
    if current.frozen:
        return UpdateResult(
            "skipped",
            f"online updates are frozen since {current.frozen['since']} ({current.frozen['reason']}); "
            "`hominem live unfreeze` resumes them",
            live=current.version,
        )
    rm_path, pair_sources = update_sources(cfg, state)
    reward_model = reward_model_at(rm_path, cfg)
    events = feedback_events(cfg)
    facts = stated_facts(cfg, events)
    new_facts = 0
    if facts:
        path, new_facts = write_extracted(cfg.path(oc.memory_folder), facts)
        log.info("%d fact(s) people stated in the log, %d new or changed, in %s", len(facts), new_facts, path)
    tables = feedback_tables(events)
    new_liked = remember_liked(cfg, tables.conversations)
    people = feedback_items(cfg, events, tables.pairs, reward_model, rm_path)
    nc = oc.nudges
    push = pressure(events, cfg.dimension_names, dt.datetime.now(dt.timezone.utc), nc.half_life_days, nc.saturation)
    if people.empty and not new_facts and not new_liked and not push.active:
        return UpdateResult(
            "skipped",
            "nothing new from people in the interaction log: no preference pair (a choice between two replies, or "
            "one reply thumbed up and another to the same message down), no nudge, no newly liked reply "
            "and no new fact "
            "they stated",
            live=current.version,
        )
    live_adapter = state.adapter_path(current)
    seen_file = None if live_adapter is None else live_adapter / PEOPLE_SEEN
    heard = set(people["id"]) | {f"nudge:{i}" for i in push.ids}  # people's pairs and nudges
    if (
        not new_facts
        and not new_liked
        and seen_file is not None
        and seen_file.is_file()
        and heard <= set(json.loads(seen_file.read_text()))
    ):
        return UpdateResult(
            "skipped",
            "no new preference pairs, nudges, liked replies or facts from people since "
            f"{current.version} was trained on them",
            live=current.version,
        )
    teacher, teacher_keys = teacher_items(cfg, pair_sources)
    buffer = ReplayBuffer(
        pd.concat([f for f in (teacher, people) if len(f)], ignore_index=True)
        if len(teacher) or len(people)
        else people,
        cfg.replay,
    )
    seed = int(fingerprint([cfg.project.seed, current.version, len(buffer.items)], 8), 16) % (2**31 - 1)
    extra = nudge_pairs(
        cfg, teacher_keys, push, reward_model, lambda: own_replies(cfg, events, push, live_adapter, seed)
    )
    batch = buffer.sample(oc.batch_items - (len(extra) if nc.pair_rows == "share" else 0), np.random.default_rng(seed))
    if (
        push.active
    ):  # pairs whose chosen reply has more of what people asked for weigh more; the dimension pairs join the batch
        weights = pair_weights(
            scored_gaps(reward_model, batch), push.vector(list(reward_model.dimensions)), nc.strength, nc.max_factor
        )
        batch = pd.concat(
            [batch.assign(nudge_weight=weights), extra.assign(nudge_weight=nc.pair_weight)], ignore_index=True
        )
        log.info("nudges: %s; %d dimension pair(s) in the batch", push.describe(), len(extra))
    items = {k: int(v) for k, v in batch["source"].str.split(":").str[0].value_counts().items()}
    # the version: what it starts from and trains on (the batch, the memory files), and how
    lr_factor = adjustment_on(cfg.data_dir, utc_now()[:10]).lr_factor  # the slow loop's lower_lr, while in force
    steps = (nc.max_steps or oc.max_steps) if push.active else oc.max_steps
    version = "online-" + fingerprint(
        [
            current.version,
            sorted(batch["id"]),
            memory_digest(memory_paths(cfg)),
            oc.max_steps,
            oc.learning_rate,
            oc.rehearse_memory,
            cfg.section("policy"),
            seed,
        ]
        + ([lr_factor] if lr_factor != 1.0 else [])
        + ([{d: round(p, 4) for d, p in push.by_dimension.items()}, nc.model_dump()] if push.active else []),
        12,
    )
    out = cfg.data_dir / LIVE_DIR / ONLINE_ADAPTERS / version
    if out.exists():
        return UpdateResult(
            "skipped",
            f"nothing new since update {version} (the same batch on the same live adapter)",
            version=version,
            live=current.version,
            items=items,
        )
    log.info(
        "online update %s: %d replay items (%s) on %s, %d steps",
        version,
        len(batch),
        items,
        current.version or "the base",
        steps,
    )

    result = train_update(
        cfg,
        batch,
        out,
        seed=seed,
        live=current.version,
        live_adapter=live_adapter,
        reward_model=reward_model,
        rm_path=rm_path,
        teacher_keys=teacher_keys,
        people_ids=sorted(heard),
        lr_factor=lr_factor,
        max_steps=steps,
    )
    trained = time.monotonic()

    health: dict[str, Any] = {}

    def measure(prompts: list[str], replies: list[str]) -> float | None:
        report = partial_health(cfg, reward_model, prompts, replies, result.grad_norms, out)
        health.update(
            report.as_dict(), threshold=skip.value, threshold_setting=skip.name, threshold_source=skip.source
        )
        (out / HEALTH).write_text(json.dumps(health, indent=1, default=str) + "\n")
        return report.rhi

    done = offer(
        cfg,
        out,
        by=by,
        reason=reason,
        rhi=measure,
        rhi_threshold=skip.value,
        threshold_name=skip.name,
        version=version,
        prompts=held_out_prompts(cfg, pair_sources),
        reward_model=reward_model,  # the one its METADATA names, loaded once
        people_pairs=oc.people_pairs,
    )
    rhi, actions = health.get("rhi"), []
    if not done.promoted and rhi is not None:
        if (
            rhi < back.value
            and current.version is not None
            and state.adapter_path(current).parent.name == ONLINE_ADAPTERS
        ):
            rollback(cfg, None, reason=f"fast loop: update {version} has partial RHI {rhi:.3f} < {back.text}", by=by)
            actions.append(f"rolled back {current.version}")
        if rhi < freeze.value:
            state.freeze(reason=f"fast loop: update {version} has partial RHI {rhi:.3f} < {freeze.text}", by=by)
            actions.append("froze online updates")
    live = state.current()
    seconds = {
        "train": round(trained - started, 2),
        "gate": round(time.monotonic() - trained, 2),
        "total": round(time.monotonic() - started, 2),
    }
    why = done.report.summary() + (f"; {'; '.join(actions)}" if actions else "")
    outcome = UpdateResult(
        "promoted" if done.promoted else "refused",
        why,
        version,
        live.version,
        rhi,
        items,
        actions,
        done.report.as_dict(),
        seconds,
    )
    log.info("online update %s %s in %.0f s: %s", version, outcome.outcome, seconds["total"], why)
    return outcome
