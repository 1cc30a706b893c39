"""What one online update learns from: people's pairs, nudges, liked replies and stated facts from the
interaction log, the teacher's pairs beside them in the replay buffer, and the batch sampled from it
(`gather`, which also names the version it will train and says why an update has nothing to do)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.online.live import LIVE_DIR, ONLINE_ADAPTERS, LiveState, utc_now
from hominem_pipeline.core.online.nudges import (
    Pressure,
    dimension_pairs,
    nudged_conversations,
    pair_weights,
    pressure,
    sampled_candidates,
    scored_gaps,
)
from hominem_pipeline.core.online.replay import ReplayBuffer
from hominem_pipeline.core.online.slow_loop import adjustment_on
from hominem_pipeline.core.online.taste_pairs import Ender, Sampler
from hominem_pipeline.core.online.updates.result import UpdateResult
from hominem_pipeline.core.online.updates.sources import (
    feedback_events,
    feedback_items,
    reward_model_at,
    teacher_items,
    update_sources,
)
from hominem_pipeline.core.pipeline.artifacts import fingerprint

if TYPE_CHECKING:
    from hominem_pipeline.core.attune.personal import PersonalModel
    from hominem_pipeline.core.online.taste_pairs import TastePairs
    from hominem_pipeline.core.reward.model import RewardModel

log = logging.getLogger(__name__)

PEOPLE_SEEN = "people_pairs.json"  # beside an online adapter: the ids of people's pairs its replay buffer held
# beside an online adapter: the replay batch it trained on, as trained (the dimension pairs last)
REPLAY_BATCH = "replay_batch.parquet"


def nudge_pairs(
    cfg: HominemConfig,
    keys: list[Any],
    push: Pressure,
    reward_model: RewardModel,
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


@contextlib.contextmanager
def served_student(cfg: HominemConfig, adapter: Path | None) -> Iterator[tuple[Any, Any]]:
    """(model, tokenizer) of the student with `adapter` (None: the base) merged in for sampling."""
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.lora import load_policy, merged

    model, tokenizer = load_policy(student_path(cfg), adapter, None)
    with merged(model) if adapter is not None else contextlib.nullcontext(model):
        yield model, tokenizer


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
    from hominem_pipeline.core.lm.generation import chat_text, generate

    sc = cfg.serving
    out: list[Any] = []
    with served_student(cfg, adapter) as (model, tokenizer):
        texts = [chat_text(tokenizer, p) for p in prompts for _ in range(k)]
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


def _sampled(what: str, n: int, kind: str, adapter: Path | None, where: str, started: float) -> None:
    log.info(
        "%s: %d %s sampled from %s %s in %.0f s",
        what,
        n,
        kind,
        adapter.name if adapter else "the base",
        where,
        time.monotonic() - started,
    )


def own_ender(cfg: HominemConfig, adapter: Path | None, seed: int, what: str) -> Ender:
    """(prompts, openings, n) -> n replies (text, finished) to each prompt that begin with its opening, the rest
    sampled from `adapter` (None: the base) as the server samples (its temperature, top-p and repetition penalty), in
    `evaluation.max_new_tokens` with the opening's tokens, as the page shows them (`generation.as_shown`)."""
    from hominem_pipeline.core.lm.generation import as_shown, chat_text, generate

    sc, limit = cfg.serving, cfg.evaluation.max_new_tokens

    def end(prompts: list[str], openings: list[str], n: int) -> list[list[tuple[str, bool]]]:
        started, out = time.monotonic(), []
        with served_student(cfg, adapter) as (model, tokenizer):
            for i, (prompt, begun) in enumerate(zip(prompts, openings)):
                used = len(tokenizer(begun, add_special_tokens=False)["input_ids"])
                endings = generate(
                    model,
                    tokenizer,
                    [chat_text(tokenizer, prompt) + begun] * n,
                    max_new_tokens=max(8, limit - used),
                    seed=seed + i,
                    temperature=sc.temperature or None,
                    top_p=sc.top_p,
                    repetition_penalty=sc.repetition_penalty,
                    strip=False,
                )
                out.append([as_shown(begun + g.text, g.finished) for g in endings])
        _sampled(what, len(prompts) * n, "endings", adapter, f"after {len(prompts)} opening(s)", started)
        return out

    return end


def own_sampler(cfg: HominemConfig, adapter: Path | None, seed: int, what: str, *, shown: bool) -> Sampler:
    """(prompts, k) -> k replies (text, finished) to each from `adapter` (None: the base), sampled as the server
    samples them (`sample_as_served`), `evaluation.max_new_tokens` long, `evaluation.batch_size` at a time; `shown`:
    as the page shows them (`generation.as_shown`: one the token limit cut ends at its last sentence)."""
    from hominem_pipeline.core.lm.generation import as_shown

    ec = cfg.evaluation

    def sample(prompts: list[str], k: int) -> list[list[tuple[str, bool]]]:
        started = time.monotonic()
        drawn = sample_as_served(
            cfg, adapter, prompts, k, seed, max_new_tokens=ec.max_new_tokens, batch_size=ec.batch_size
        )
        _sampled(what, len(prompts) * k, "replies", adapter, f"to {len(prompts)} message(s)", started)
        return [
            [as_shown(g.text, g.finished) if shown else (g.text, g.finished) for g in replies] for replies in drawn
        ]

    return sample


def own_replies(
    cfg: HominemConfig, events: list[dict[str, Any]], push: Pressure, adapter: Path | None, seed: int
) -> pd.DataFrame:
    """The candidates `online.nudges.samples` adds (`nudges.sampled_candidates`): replies sampled from
    `adapter` (None: the base) to the newest `sample_prompts` conversations people nudged, as the server
    samples them (`sample_as_served`), `evaluation.max_new_tokens` long and in batches of
    `evaluation.batch_size`; none without pressure or with `samples` 0."""
    nc = cfg.online.nudges
    conversations = nudged_conversations(events, push, nc.sample_prompts) if push.active and nc.samples else []
    return sampled_candidates(conversations, nc.samples, own_sampler(cfg, adapter, seed, "nudges", shown=False))


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


@dataclass
class UpdateBatch:
    """What one update learns from and starts on, and the version it trains.

    Args:
        live: the live version it starts from (None: the base).
        live_adapter: that version's folder (None: a fresh adapter on the base).
        rm_path: the reward model it follows (the live one's, `update_sources`).
        reward_model: that reward model, loaded.
        pair_sources: the teacher's preference_pairs versions the live adapter was trained on.
        teacher_keys: those whose pairs are in the buffer.
        heard: the ids of people's pairs and nudges the buffer held.
        batch: the replay batch it trains on (with `nudge_weight` while nudges press).
        items: the batch's rows by source.
        seed: the update's seed.
        steps: its optimizer steps.
        lr_factor: the slow loop's lower_lr in force.
        push: the nudges' pressure.
        version: the version it trains (`online-<digest>`).
        tastes: the taste model of each person whose taste pairs it trains on (by rater), which judge it at the gate.
        choices: those persons' choices never trained on (by rater; `online.taste.held_out`), judged at the gate.
    """

    live: str | None
    live_adapter: Path | None
    rm_path: Path
    reward_model: RewardModel
    pair_sources: list[Any]
    teacher_keys: list[Any]
    heard: set[str]
    batch: pd.DataFrame
    items: dict[str, int]
    seed: int
    steps: int
    lr_factor: float
    push: Pressure
    version: str = ""
    tastes: dict[str, PersonalModel] = field(default_factory=dict)
    choices: dict[str, pd.DataFrame] = field(default_factory=dict)


@dataclass
class _Heard:
    """What people said in the log that an update may learn from."""

    events: list[dict[str, Any]]
    pairs: pd.DataFrame  # their preference pairs, as `feedback_tables` reads them (with who made each), to learn from
    held: pd.DataFrame  # their choices never trained on (`online.taste.held_out`): the gate judges their taste on them
    people: pd.DataFrame  # those pairs, as replay items
    push: Pressure  # their nudges
    new_facts: int  # facts they stated, new or changed
    new_liked: int  # replies they liked, added, changed or removed

    @property
    def anything(self) -> bool:
        return not self.people.empty or bool(self.new_facts) or bool(self.new_liked) or self.push.active


def _heard(cfg: HominemConfig, reward_model: RewardModel, rm_path: Path) -> _Heard:
    """Read the log: stated facts and liked replies go to the memory files now; pairs and nudges are returned."""
    from hominem_pipeline.core.online.facts import write_extracted
    from hominem_pipeline.core.online.feedback import feedback_tables
    from hominem_pipeline.core.online.taste_pairs import held_out_choices

    oc = cfg.online
    events = feedback_events(cfg)
    facts = stated_facts(cfg, events)
    new_facts = 0
    if facts:
        path, new_facts = write_extracted(cfg.path(oc.memory_folder), facts)
        log.info("%d fact(s) people stated in the log, %d new or changed, in %s", len(facts), new_facts, path)
    tables = feedback_tables(events)
    new_liked = remember_liked(cfg, tables.conversations)
    held = held_out_choices(tables.pairs, oc.taste.held_out, oc.taste.min_choices)
    pairs = tables.pairs[~held].reset_index(drop=True)
    people = feedback_items(cfg, events, pairs, reward_model, rm_path)
    nc = oc.nudges
    now = dt.datetime.now(dt.timezone.utc)
    push = pressure(events, cfg.dimension_names, now, nc.half_life_days, nc.saturation)
    return _Heard(events, pairs, tables.pairs[held].reset_index(drop=True), people, push, new_facts, new_liked)


def taste_pairs(cfg: HominemConfig, pairs: pd.DataFrame, plan: UpdateBatch) -> TastePairs:
    """The on-policy pairs people's taste models make of the live adapter's own replies (`online.taste`,
    `core.online.taste_pairs`), at most `share` of the batch, the surest first, and the models; none with
    `min_choices` 0. The replies are ranked and trained on as the page would show them (`generation.as_shown`)."""
    from hominem_pipeline.core.online.taste_pairs import TastePairs, taste_items

    tc = cfg.online.taste
    sample = own_sampler(cfg, plan.live_adapter, plan.seed, "taste", shown=True)
    ender = own_ender(cfg, plan.live_adapter, plan.seed, "taste") if tc.endings else None
    found = taste_items(
        pairs,
        plan.reward_model,
        sample,
        ender=ender,
        endings=tc.endings,
        min_choices=tc.min_choices,
        prompts=tc.prompts,
        samples=tc.samples,
        min_probability=tc.min_probability,
        now=utc_now(),
    )
    surest = found.items.sort_values("weight", ascending=False, kind="stable")
    return TastePairs(surest.head(round(tc.share * cfg.online.batch_items)), found.models)


def _from_buffer(cfg: HominemConfig, buffer: ReplayBuffer, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """`n` items of the buffer: with `online.teacher_share` set, that share of `online.batch_items` (at most) from the
    teacher's pairs and the rest from people's, each side sampled by its own buffer (the other fills what one
    lacks); null: as the buffer mixes them."""
    share = cfg.online.teacher_share
    if share is None:
        return buffer.sample(n, rng)
    teacher = buffer.items["source"].astype(str).str.startswith("teacher:")
    sides = [ReplayBuffer(buffer.items[m].drop(columns=["row", "priority"]), cfg.replay) for m in (teacher, ~teacher)]
    n_teacher = min(n, round(share * cfg.online.batch_items), len(sides[0].items))
    people = sides[1].sample(n - n_teacher, rng)
    n_teacher = min(n - len(people), len(sides[0].items))  # the teacher's fill what people's pairs lack
    return pd.concat([sides[0].sample(n_teacher, rng), people], ignore_index=True)


def _sample(cfg: HominemConfig, heard: _Heard, plan: UpdateBatch, buffer: ReplayBuffer) -> None:
    """The replay batch: people's taste pairs, the rest sampled from the buffer, the nudges' dimension pairs beside
    it (weighted by their pressure); into `plan`."""
    nc, push, reward_model = cfg.online.nudges, heard.push, plan.reward_model

    def own() -> pd.DataFrame:
        return own_replies(cfg, heard.events, push, plan.live_adapter, plan.seed)

    extra = nudge_pairs(cfg, plan.teacher_keys, push, reward_model, own)
    found = taste_pairs(cfg, heard.pairs, plan)
    taste, plan.tastes = found.items, found.models
    if not heard.held.empty:
        held = heard.held
        plan.choices = {r: held[held["rater"] == r].reset_index(drop=True) for r in plan.tastes}
        plan.choices = {r: c for r, c in plan.choices.items() if len(c)}
    n = cfg.online.batch_items - len(taste) - (len(extra) if nc.pair_rows == "share" else 0)
    batch = _from_buffer(cfg, buffer, max(n, 0), np.random.default_rng(plan.seed))
    if len(taste):
        batch = pd.concat([batch, taste], ignore_index=True)
        log.info("taste: %d pair(s) of the live adapter's own replies in the batch", len(taste))
    if push.active:  # pairs whose chosen reply has more of what people asked for weigh more; dimension pairs join
        gaps = scored_gaps(reward_model, batch)
        weights = pair_weights(gaps, push.vector(list(reward_model.dimensions)), nc.strength, nc.max_factor)
        batch = pd.concat(
            [batch.assign(nudge_weight=weights), extra.assign(nudge_weight=nc.pair_weight)], ignore_index=True
        )
        log.info("nudges: %s; %d dimension pair(s) in the batch", push.describe(), len(extra))
    plan.batch = batch
    plan.items = {k: int(v) for k, v in batch["source"].str.split(":").str[0].value_counts().items()}


def _version(cfg: HominemConfig, plan: UpdateBatch) -> str:
    """The version: what it starts from and trains on (the batch, the memory files), and how."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import memory_digest

    oc, push = cfg.online, plan.push
    parts = [
        plan.live,
        sorted(plan.batch["id"]),
        memory_digest(memory_paths(cfg)),
        oc.max_steps,
        oc.learning_rate,
        oc.rehearse_memory,
        cfg.section("policy"),
        plan.seed,
    ]
    if plan.lr_factor != 1.0:
        parts.append(plan.lr_factor)
    if oc.taste.imitate:  # the chosen replies it imitates are memory rows too
        parts.append("imitate")
    if push.active:
        parts += [{d: round(p, 4) for d, p in push.by_dimension.items()}, oc.nudges.model_dump()]
    return "online-" + fingerprint(parts, 12)


def gather(cfg: HominemConfig, state: LiveState) -> UpdateBatch | UpdateResult:
    """What the next update learns from (see the module's docstring), or why it is skipped: updates frozen, nothing
    from people in the log, nothing new since the live update was trained, or the same batch on the same adapter
    as an update already made."""
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
    heard = _heard(cfg, reward_model, rm_path)
    if not heard.anything:
        return UpdateResult(
            "skipped",
            "nothing new from people in the interaction log: no preference pair (a choice between two replies, or "
            "one reply thumbed up and another to the same message down), no nudge, no newly liked reply "
            "and no new fact they stated",
            live=current.version,
        )
    live_adapter = state.adapter_path(current)
    seen_file = None if live_adapter is None else live_adapter / PEOPLE_SEEN
    ids = set(heard.people["id"]) | {f"nudge:{i}" for i in heard.push.ids}  # people's pairs and nudges
    learned = not heard.new_facts and not heard.new_liked and seen_file is not None and seen_file.is_file()
    if learned and ids <= set(json.loads(seen_file.read_text())):
        return UpdateResult(
            "skipped",
            "no new preference pairs, nudges, liked replies or facts from people since "
            f"{current.version} was trained on them",
            live=current.version,
        )
    teacher, teacher_keys = teacher_items(cfg, pair_sources)
    frames = [f for f in (teacher, heard.people) if len(f)]
    buffer = ReplayBuffer(pd.concat(frames, ignore_index=True) if frames else heard.people, cfg.replay)
    seed = int(fingerprint([cfg.project.seed, current.version, len(buffer.items)], 8), 16) % (2**31 - 1)
    oc = cfg.online
    plan = UpdateBatch(
        live=current.version,
        live_adapter=live_adapter,
        rm_path=rm_path,
        reward_model=reward_model,
        pair_sources=pair_sources,
        teacher_keys=teacher_keys,
        heard=ids,
        batch=pd.DataFrame(),
        items={},
        seed=seed,
        steps=(oc.nudges.max_steps or oc.max_steps) if heard.push.active else oc.max_steps,
        lr_factor=adjustment_on(cfg.data_dir, utc_now()[:10]).lr_factor,  # the slow loop's lower_lr, in force
        push=heard.push,
    )
    _sample(cfg, heard, plan, buffer)
    plan.version = _version(cfg, plan)
    if (cfg.data_dir / LIVE_DIR / ONLINE_ADAPTERS / plan.version).exists():
        return UpdateResult(
            "skipped",
            f"nothing new since update {plan.version} (the same batch on the same live adapter)",
            version=plan.version,
            live=current.version,
            items=plan.items,
        )
    return plan
