"""What the benchmarks share, each through the package: this code's config on another project's data, the
newest versions a project built (through its lineage, never by globbing its folders), scratch projects and data
folders beside a built project, the standard error of paired differences, and interaction-log events as the
service writes them."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def config_on(project: Path, overrides: dict | None = None):
    """This repo's config (this code's settings) with `project`'s data folder and student, then
    `overrides`: a project built under older code or config is measured with the settings of the code under test."""
    from hominem_pipeline.core.config.loader import deep_merge, load_config

    student = load_config(root=ROOT).models.student.path
    there = {"project": {"data_dir": str(project / "data")}, "models": {"student": {"path": str(project / student)}}}
    return load_config(root=ROOT, overrides=deep_merge(there, overrides or {}))


def project_config(project: Path):
    """The project's own config (its config/hominem.yaml), as `hominem` run in its folder reads it."""
    from hominem_pipeline.core.config.loader import load_config

    return load_config(root=project)


def newest(cfg, asset: str, day: str | None = None, *, any_settings: bool = False):
    """The version of `asset` a command reads (`Lineage.newest`: this config's on `day`, default the newest day
    that has one); SystemExit saying why when there is none. `any_settings`: else the newest complete version the
    project's store holds there, whatever code or settings built it (a benchmark that measures this code on a
    project's data through `config_on`, whose versions differ from the project's own)."""
    from hominem_pipeline.core.pipeline.lineage import lineage

    data = lineage(cfg)
    ref, why = data.newest(asset, day)
    if ref is None and any_settings:
        days = [day] if day else list(reversed(data.store.partitions(asset)))
        built = [r for d in days for r in reversed(data.store.versions(asset, d)) if r.manifest.get("complete", True)]
        if built:
            print(f"{asset}: {built[0].partition}/{built[0].version}, built under other code or settings than this")
            return built[0]
    if ref is None:
        raise SystemExit(f"no {asset} to read in {cfg.data_dir}: {why or 'none is built'}; run `make run`")
    return ref


def lora_backbone(cfg, kind: str):
    """(base folder, kept depth, tokenizer -> reader) of a preference LoRA (`core.reward.preference_lora`) on `kind`:
    student, the reward model's backbone cut to its depth and read in its judge frame; encoder, MiniLM (the people's
    score's encoder) whole, reading [CLS] prompt [SEP] reply [SEP]."""
    from hominem_pipeline.core.lm.models import encoder_path, student_path
    from hominem_pipeline.core.reward.encoding import judge_frame, make_encoder
    from hominem_pipeline.core.teacher.base import rubric_system

    rm = cfg.reward_model
    if kind == "encoder":
        return encoder_path(cfg), None, lambda tok: make_encoder(tok, None, rm.people_score.max_length)
    if kind != "student":
        raise ValueError(f"LoRA backbone {kind!r}: use student or encoder")

    def reader(tok):
        frame = judge_frame(tok, rubric_system(cfg.labeling), cfg.labeling.scalar_question)
        return make_encoder(tok, frame, rm.max_length)

    return student_path(cfg), rm.backbone.depth, reader


def train_first_day(cfg, labels, out: Path, date: str):
    """A reward model trained as a first day trains it: on the teacher's `labels`, with `cfg`'s settings and its
    shipped people's pairs alone (no imports or feedback), its features cache and shipped features read. Returns
    (the loaded `RewardModel`, the training's metrics)."""
    from hominem_pipeline.core.builds.reward_model import people_encoder, people_pairs
    from hominem_pipeline.core.lm.models import reward_backbone, student_path
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline.core.teacher.base import rubric_system

    metrics = train_reward_model(
        labels,
        dimensions=cfg.dimension_names,
        sources=RewardSources(
            reward_backbone(cfg),
            judge_system=rubric_system(cfg.labeling),
            judge_question=cfg.labeling.scalar_question,
            feature_cache=cfg.data_dir / FEATURE_CACHE,
            shipped_features=cfg.path(SHIPPED_FEATURES),
            guard_student=student_path(cfg) if cfg.reward_model.guards else None,
            people_encoder=people_encoder(cfg),
        ),
        cfg=cfg.reward_model,
        out_dir=out,
        seed=cfg.project.seed,
        data_digest="benchmark",
        date=date,
        human_pairs=people_pairs(cfg),
    ).metrics
    model = RewardModel.load(out)
    model.use_feature_cache(cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES))
    return model, metrics


def named_settings(items: list[str], flag: str, example: str) -> dict[str, dict]:
    """`NAME=JSON` arguments (`flag`, repeatable) as {name: settings}; SystemExit naming a bad one, with `example`."""
    import json

    out = {}
    for item in items:
        name, _, text = item.partition("=")
        try:
            out[name] = json.loads(text or "{}")
        except ValueError as exc:
            raise SystemExit(f"{flag} {item!r}: the part after = must be JSON settings, e.g. {example} ({exc})")
    return out


def paired_se(x: np.ndarray) -> float:
    """The standard error of a mean of paired differences (NaN with fewer than two)."""
    x = np.asarray(x, dtype=np.float64)
    return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def turn_event(turn_id: str, time: str, messages: list[dict[str, str]], reply: str, **fields: Any) -> dict[str, Any]:
    """A served turn as the interaction log holds it (`events.new_turn`): the `local` rater unless `fields` names
    another."""
    from hominem_pipeline.core.online.events import new_turn

    rater = fields.pop("rater", "local")
    fields.setdefault("model", "hominem")
    return new_turn(rater, messages, reply, id=turn_id, time=time, **fields).model_dump(mode="json")


def choice_event(event_id: str, time: str, chosen: str, rejected: str, **fields: Any) -> dict[str, Any]:
    """A choice between two turns as the log holds it (`events.Choice`); `clear` and the `local` rater by default."""
    from hominem_pipeline.core.online.events import Choice

    fields = {"rater": "local", "strength": "clear"} | fields
    return Choice(kind="choice", id=event_id, time=time, chosen=chosen, rejected=rejected, **fields).model_dump(
        mode="json", exclude_none=True
    )


LINKED = (
    "models",
    "reward_model",
    "preference_pairs",
    "teacher_labels",
    "teacher_trajectories",
    "prompts",
    "lora_adapter",
    "evaluation",
    "reward_health_index",
)
OPEN_GATE = {
    "health": {"win_rate_margin": None, "people_margin": None},
    "online": {"skip_below": 0.0, "rollback_below": 0.0, "freeze_below": 0.0},
}
SAMPLED_TOKENS = 64  # the evaluation's reply length: sampled replies are rated, not read


def sample_replies(
    cfg, adapter: Path, prompts: list[str], k: int, seed: int, max_tokens: int = SAMPLED_TOKENS, shown: bool = False
) -> list[list[str]]:
    """`k` replies to each prompt from the student with `adapter`, sampled as the server does
    (`updates.sample_as_served`), in batches of `serving.max_batch_size`; `shown`: as the page shows them (one the
    token limit cut ends at its last sentence, `generation.as_shown`)."""
    from hominem_pipeline.core.lm.generation import as_shown
    from hominem_pipeline.core.online.updates import sample_as_served

    drawn = sample_as_served(
        cfg, adapter, prompts, k, seed, max_new_tokens=max_tokens, batch_size=cfg.serving.max_batch_size
    )
    return [[as_shown(g.text, g.finished)[0] if shown else g.text for g in replies] for replies in drawn]


def reset_live(cfg, start: str | None, why: str) -> None:
    """The scratch project's live state back at version `start` (unfrozen) and the memory folder its updates wrote
    (the facts people stated, the replies they liked) removed, so the next case starts where the first did."""
    from hominem_pipeline.core.online.live import LiveState

    state = LiveState(cfg.data_dir)
    if state.current().frozen:
        state.unfreeze(by="benchmark")
    if state.current().version != start:
        state.rollback(start, reason=why, by="benchmark")
    shutil.rmtree(cfg.path(cfg.online.memory_folder), ignore_errors=True)


def scratch_project(
    project: Path, given_adapter: str | None, overrides: dict | None = None, like_make_run: bool = False
):
    """A scratch project in a temp folder: the repo's config (with `overrides`), `data/` linking to
    `project`'s built versions, its own live state (the daily adapter `given_adapter`, default the newest
    built, live at the start), log and MLflow store. Returns (temp folder, config, live state).
    `like_make_run`: the daily adapter is made live through the daily gate and the base's
    log-probabilities of its training pairs are cached, as `make run` under this code leaves a project
    (else it is made live by hand and every cache starts empty)."""
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.pipeline.tracking import Tracker
    from hominem_pipeline.core.policy.lora import adapter_reward_model

    source = daily_adapter(project, given_adapter)
    tmp = Path(tempfile.mkdtemp(prefix="hominem-live-"))
    into = tmp / "project"
    shutil.copytree(ROOT / "config", into / "config")
    shutil.copy(ROOT / "dagster.yaml", into / "dagster.yaml")
    (into / "data").mkdir()
    for name in LINKED:
        if (project / "data" / name).exists():
            (into / "data" / name).symlink_to((project / "data" / name).resolve())
    cfg = load_config(root=into, overrides=overrides)
    adapter = cfg.data_dir / source.relative_to(project / "data")
    state = LiveState(cfg.data_dir)
    if like_make_run:
        started = time.monotonic()
        warm_reference_cache(cfg, adapter)
        from hominem_pipeline.core.online.promotion import offer, reuse_evaluation_replies
        from hominem_pipeline.core.online.updates import held_out_prompts
        from hominem_pipeline.core.policy.metadata import AdapterMetadata

        # as the daily gate does: the adapter's evaluation's replies (and the base's) are read, not generated again
        reuse_evaluation_replies(cfg, adapter.parent.name, adapter.name, live_is_base=True)

        prompts = held_out_prompts(
            cfg, list(AdapterMetadata.read(adapter).preference_data)
        )  # its pairs' day's held-out prompts, as updates gate on
        done = offer(
            cfg,
            adapter,
            by="benchmark",
            reason="the daily job's adapter (benchmark start)",
            version=adapter.name,
            prompts=prompts,
        )
        if not done.promoted:
            raise SystemExit(f"the daily gate refused {adapter.name}: {done.report.summary()}")
        print(
            "as after `make run`: the daily adapter through the daily gate, the base's "
            "log-probabilities of its pairs cached "
            f"({time.monotonic() - started:.0f} s)"
        )
    else:
        state.promote(
            adapter.name,
            adapter,
            adapter_reward_model(adapter, cfg.data_dir),
            gate={"note": "the benchmark's starting point"},
            reason="benchmark start",
            by="benchmark",
        )
    Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root)).runs_for(
        "live"
    )  # the MLflow store exists, as in a used project
    print(f"scratch project {into}; live at start: {adapter.name} ({source})")
    return tmp, cfg, state


def warm_reference_cache(cfg, adapter: Path) -> None:
    """What the daily `dual` training leaves in data/cache/reference_logps.json: the base's summed
    log-probability of each sequence of the adapter's training pairs."""
    from trl.trainer.utils import add_fused_lm_head

    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.dual import (
        REFERENCE_CACHE,
        load_reference_cache,
        reference_logps,
        save_reference_cache,
    )
    from hominem_pipeline.core.policy.lora import lora_student
    from hominem_pipeline.core.policy.metadata import AdapterMetadata
    from hominem_pipeline.core.policy.pairs import read_preference_pairs
    from hominem_pipeline.core.policy.sequences import pair_sequences

    meta = AdapterMetadata.read(adapter)
    pairs = read_preference_pairs([key.path(cfg.data_dir) / "pairs.parquet" for key in meta.preference_data])
    model, tokenizer, base = lora_student(student_path(cfg), cfg.policy)
    add_fused_lm_head(model.get_base_model())
    path = cfg.data_dir / REFERENCE_CACHE
    cache = load_reference_cache(path, base)
    seqs = [s for pair in pair_sequences(tokenizer, pairs, cfg.policy.max_length) for s in pair]
    for start in range(0, len(seqs), 8):
        reference_logps(model, seqs[start : start + 8], cache, tokenizer.pad_token_id)
    save_reference_cache(path, base, cache)


def daily_adapter(project: Path, given: str | None) -> Path:
    if given:
        path = Path(given) if Path(given).is_absolute() else project / given
        if not (path / "METADATA.json").is_file():
            raise SystemExit(f"--adapter {given}: {path} is not an adapter the pipeline built (no METADATA.json)")
        return path
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage

    ref = lineage(load_config(root=project)).latest("lora_adapter")
    if ref is None:
        raise SystemExit(
            f"no lora_adapter built under this code and config in {project / 'data'}; run `make run`, or "
            "pass --adapter"
        )
    return ref.path


def scratch_data(
    project: Path, data: Path, day: str, copied: tuple[str, ...], linked: tuple[str, ...] = ("models", "cache")
) -> Path:
    """A fresh data folder `data` (emptied if it exists) beside `project`: its `linked` folders as links (the
    converted models, the caches), a copy of `day` of each `copied` asset, which the benchmark's runs add to."""
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    for name in linked:
        (data / name).symlink_to(project / "data" / name)
    for asset in copied:
        shutil.copytree(project / "data" / asset / day, data / asset / day, symlinks=True)
    return data
