"""What `hominem data ship-features` writes: the rows the frozen networks compute for the texts the project
ships, the base's reference log-probabilities of the people's pairs and the people's start trained on them
(`config/human/features/`), so that a fresh clone's first day reads them instead of computing them. No stage
imports this module: a stage's code version covers what it runs, not the trainer that shipped its inputs."""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.builds.reward_model import (
    people_encoder,
    people_pairs,
    people_pairs_digest,
)
from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.config import HominemConfig, PolicyConfig
from hominem_pipeline.core.pipeline.artifacts import fingerprint
from hominem_pipeline.core.policy.dual import (
    DualStart,
    load_shipped_reference,
    sequence_key,
    shipped_reference_file,
    train_dual_adapter,
)
from hominem_pipeline.core.policy.sequences import pair_sequences
from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES

log = logging.getLogger(__name__)


def shipped_texts(cfg: HominemConfig) -> list[tuple[str, list[tuple[str, str]]]]:
    """The (prompt, reply) exchanges the project ships that every reward model reads, per file: each
    shipped people's pairs file's pairs the heads read (`reward_model.people_pairs`), then the contrast
    fixtures the model is scored on (`fixtures.file`); (file name, exchanges) in that order."""
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures

    parts = []
    pairs = people_pairs(cfg)
    if pairs is not None:
        for source, part in pairs[pairs["heads"]].groupby("source", sort=False):
            parts.append(
                (
                    source.removeprefix("shipped:"),
                    [(p, r) for p, c, j in zip(part["prompt"], part["chosen"], part["rejected"]) for r in (c, j)],
                )
            )
    if cfg.fixtures.file is not None:
        fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
        parts.append((Path(cfg.fixtures.file).name, [(f.prompt, r) for f in fixtures for r in (f.better, f.worse)]))
    return parts


@dataclass
class _Shipment:
    """What `ship_features` has written so far: (file, rows, rows computed now) each, and its MANIFEST entries."""

    cfg: HominemConfig
    folder: Path  # the shipped features folder
    cache_folder: Path  # the project's feature cache
    written: list[tuple[Path, int, int]] = field(default_factory=list)
    manifest: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, shipped: tuple[Path, int, int], **entry: Any) -> None:
        self.written.append(shipped)
        self.manifest[shipped[0].name] = entry

    @property
    def student_digest(self) -> str:
        from hominem_pipeline.core.lm.models import student_path
        from hominem_pipeline.core.pipeline.artifacts import folder_digest

        return folder_digest(student_path(self.cfg))

    @property
    def people_files(self) -> list[str]:
        return [s.file for s in self.cfg.reward_model.people_pairs]


def _ship_guards(ship: _Shipment, source: str, name: str, texts: list[tuple[str, str]]) -> None:
    """The guard columns (`reward_model.guards`, measured by the student) of a text file's exchanges."""
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.reward.feature_cache import text_key
    from hominem_pipeline.core.reward.guards import GUARD_MAX_LENGTH, GuardScorer

    guards, student = ship.cfg.reward_model.guards, student_path(ship.cfg)
    scorer = GuardScorer(guards, student, cache=ship.cache_folder, shipped=ship.folder)
    scorer([p for p, _ in texts], [r for _, r in texts])
    cache = scorer.disk_cache()
    path = cache.ship([text_key(p, r) for p, r in texts], ship.folder, name)
    rows = len(set(texts))
    ship.add(
        (path, rows, cache.misses),
        features="guards",
        columns=list(guards),
        file=source,
        rows=rows,
        student=student.name,
        student_digest=ship.student_digest,
        window_tokens=GUARD_MAX_LENGTH,
    )


def _ship_pooled(ship: _Shipment, pooled: tuple, source: str, name: str, texts: list[tuple[str, str]]) -> None:
    """The frozen backbone's pooled states of a text file's exchanges (they must be in the cache)."""
    from hominem_pipeline.core.reward.feature_cache import FeatureCache, ids_key

    namespace, width, encode = pooled
    rm = ship.cfg.reward_model
    cache = FeatureCache(ship.cache_folder, namespace, width, shipped=ship.folder)
    keys = list(dict.fromkeys(ids_key(encode(p, r)) for p, r in texts))
    path = cache.ship(keys, ship.folder, name)
    ship.add(
        (path, len(keys), 0),
        features="pooled",
        width=width,
        file=source,
        rows=len(keys),
        backbone_digest=namespace[1],
        settings=namespace[2:],
        max_length=rm.max_length,
        frame=rm.backbone.frame,
    )


def _ship_people(ship: _Shipment) -> None:
    """The base's log-probabilities of the people's held-out pairs' replies; and where the daily adapter learns from
    people's pairs, the reference log-probabilities of the others and the people's start trained on them."""
    from hominem_pipeline.core.evaluation.fixtures import FIXTURE_MAX_LENGTH
    from hominem_pipeline.core.lm.models import student_path

    cfg, folder = ship.cfg, ship.folder
    held = people_pairs(cfg, "held_out")
    if held is not None:
        exchanges = [(p, r) for p, c, j in zip(held["prompt"], held["chosen"], held["rejected"]) for r in (c, j)]
        shipped = _ship_student_logps(cfg, ship.cache_folder, folder, "people-held-out", exchanges)
        files = [s.file for s in cfg.reward_model.people_pairs if s.held_out]
        digest = ship.student_digest
        ship.add(shipped, features="student_logps", columns=["sum", "tokens"], files=files, rows=shipped[1])
        ship.manifest[shipped[0].name] |= {"student_digest": digest, "max_length": FIXTURE_MAX_LENGTH}
    train = people_pairs(cfg)
    if train is None or cfg.policy.mode != "dual":
        return
    common = {"files": ship.people_files, "student_digest": ship.student_digest, "max_length": cfg.policy.max_length}
    if cfg.policy.dual.people_share > 0:  # what the daily adapter learns from
        shipped = ship_reference(student_path(cfg), cfg.policy, train, folder)
        ship.add(shipped, features="reference_logps", files=common["files"], rows=shipped[1])
        ship.manifest[shipped[0].name] |= {k: common[k] for k in ("student_digest", "max_length")}
    if cfg.policy.dual.people_start is not None:  # what it starts from
        from hominem_pipeline.core.builds.memory_files import memory_paths
        from hominem_pipeline.core.evaluation.memory import read_memory_rows
        from hominem_pipeline.core.policy.pairs import people_rows

        memory = read_memory_rows(memory_paths(cfg))
        shipped = ship_people_start(student_path(cfg), cfg.policy, people_rows(train), memory, folder)
        steps = cfg.policy.dual.people_start.max_steps
        ship.add(shipped, features="people_start", files=common["files"], pairs=shipped[1], steps=steps)
        ship.manifest[shipped[0].name] |= {k: common[k] for k in ("student_digest", "max_length")}


def _ship_projection(ship: _Shipment) -> None:
    """The people's score's projection, fitted on every shipped reply's text (no choice read, the held-out ones
    too), and their rows read through it."""
    from hominem_pipeline.core.pipeline.artifacts import folder_digest
    from hominem_pipeline.core.reward.people import ship_projection

    cfg, rm = ship.cfg, ship.cfg.reward_model
    pairs, encoder = people_pairs(cfg, "all"), people_encoder(cfg)
    if encoder is None or pairs is None:
        return
    every = [(p, r) for p, c, j in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"]) for r in (c, j)]
    projection, rows, n, measured = ship_projection(
        encoder, rm.people_score.max_length, ship.cache_folder, every, ship.folder
    )
    for path, computed in ((projection, measured), (rows, 0)):
        ship.add(
            (path, n, computed),
            features="people_projection" if path == projection else "people_projected",
            files=ship.people_files,
            rows=n,
            encoder_digest=folder_digest(encoder),
            max_length=rm.people_score.max_length,
        )
    if rm.people_score.invariance.sources:  # the texts the invariance pairs make from the pairs the model reads
        from hominem_pipeline.core.reward.people import ship_invariance_rows

        train = people_pairs(cfg)
        shipped = ship_invariance_rows(
            encoder,
            rm.people_score.max_length,
            ship.cache_folder,
            projection,
            list(zip(train["prompt"], train["chosen"])),
            rm.people_score.invariance.sources,
            ship.folder,
        )
        ship.add(
            shipped,
            features="people_invariance",
            files=ship.people_files,
            rows=shipped[1],
            sources=rm.people_score.invariance.sources,
            encoder_digest=folder_digest(encoder),
            max_length=rm.people_score.max_length,
        )


def _finish(ship: _Shipment) -> None:
    """Remove the files no longer shipped; write MANIFEST.json with the digests of the files they were read from."""
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest

    cfg, folder = ship.cfg, ship.folder
    kept = [w[0] for w in ship.written]
    for stale in [*folder.glob("*.npz"), *folder.glob("*.safetensors")]:
        if stale not in kept:
            stale.unlink()
    if not ship.written:
        return
    digests = dict(zip(ship.people_files, people_pairs_digest(cfg)))
    if cfg.fixtures.file:
        digests[cfg.fixtures.file] = optional_file_digest(cfg.path(cfg.fixtures.file))
    (folder / "MANIFEST.json").write_text(
        json.dumps({"file_digests": digests, "files": ship.manifest}, indent=2) + "\n"
    )


def ship_features(cfg: HominemConfig) -> list[tuple[Path, int, int]]:
    """Write what the project's frozen networks compute for the texts it ships, so that a fresh clone's first day
    reads them instead of computing them (`feature_cache.SHIPPED_FEATURES`, one file per text file and kind):

    - per shipped text file (`shipped_texts`: the people's pairs, the contrast fixtures): the guard columns
      (`reward_model.guards`, measured by the student) and the frozen backbone's pooled states (read from the
      project's feature cache, which `hominem run` fills, or the rows shipped already); for the fixtures also the
      base student's log-probabilities of their replies (the evaluation's `adapter_moves`);
    - the base student's log-probabilities of the people's held-out pairs' replies (the evaluation's implicit
      reward), and, when the daily adapter learns from people's pairs, the reference log-probabilities of the others
      (`ship_reference`) and the people's start trained on them (`policy.people_start`);
    - the people's score's projection, fitted on every shipped people's pair's replies, with their rows read
      through it (`people.ship_projection`).

    Replaces the folder's files and its MANIFEST.json. Returns (file, rows, rows computed now) per file written."""
    from hominem_pipeline.core.evaluation.fixtures import FIXTURE_MAX_LENGTH

    ship = _Shipment(cfg, cfg.path(SHIPPED_FEATURES), cfg.data_dir / FEATURE_CACHE)
    pooled = _pooled_encoding(cfg)
    fixtures = Path(cfg.fixtures.file).name if cfg.fixtures.file is not None else None
    for source, texts in shipped_texts(cfg):
        name = source.split(".")[0]
        if cfg.reward_model.guards:
            _ship_guards(ship, source, name, texts)
        if pooled is not None:
            _ship_pooled(ship, pooled, source, name, texts)
        if source == fixtures:
            shipped = _ship_fixture_logps(cfg, ship.cache_folder, ship.folder, name)
            ship.add(shipped, features="student_logps", columns=["sum", "tokens"], file=source, rows=shipped[1])
            ship.manifest[shipped[0].name] |= {"student_digest": ship.student_digest, "max_length": FIXTURE_MAX_LENGTH}
    _ship_people(ship)
    _ship_projection(ship)
    _finish(ship)
    return ship.written


def _ship_fixture_logps(cfg: HominemConfig, cache_folder: Path, folder: Path, name: str) -> tuple[Path, int, int]:
    """The base student's (summed log-probability, tokens) of every fixture reply (`fixtures.base_logp_cache`),
    which the evaluation's `adapter_moves` reads for the base side, as shipped rows."""
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures

    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
    return _ship_student_logps(
        cfg, cache_folder, folder, name, [(f.prompt, r) for f in fixtures for r in (f.better, f.worse)]
    )


def _ship_student_logps(
    cfg: HominemConfig, cache_folder: Path, folder: Path, name: str, exchanges: list[tuple[str, str]]
) -> tuple[Path, int, int]:
    """The base student's (summed log-probability, tokens) of each exchange's reply (`fixtures.base_logp_cache`:
    what the evaluation's implicit reward reads for the base side), as shipped rows; measured where
    neither the cache nor the shipped rows hold them."""
    from hominem_pipeline.core.evaluation.fixtures import base_logp_cache
    from hominem_pipeline.core.evaluation.people_pairs import exchange_logps
    from hominem_pipeline.core.lm.models import load_student, student_path
    from hominem_pipeline.core.reward.feature_cache import text_key

    cache = base_logp_cache(student_path(cfg), cache_folder, folder)
    keys = [text_key(p, r) for p, r in exchanges]
    missing = len(set(keys) - set(cache.get(keys)))
    if missing:
        model, tokenizer = load_student(student_path(cfg))
        exchange_logps(model, tokenizer, exchanges, cfg.evaluation.batch_size, cache=cache)
    return cache.ship(keys, folder, name), len(set(keys)), missing


def _pooled_encoding(cfg: HominemConfig):
    """(feature cache namespace, row width, (prompt, reply) -> token ids) of the reward model's frozen
    backbone under `cfg`, as `train_reward_model` reads it; None when it is not a frozen local folder."""
    from transformers import AutoConfig, AutoTokenizer

    from hominem_pipeline.core.lm.models import reward_backbone
    from hominem_pipeline.core.reward.dataset import pooled_namespace
    from hominem_pipeline.core.reward.encoding import judge_frame, make_encoder
    from hominem_pipeline.core.reward.network import backbone_kind, check_layers
    from hominem_pipeline.core.teacher.base import rubric_system

    rm, backbone = cfg.reward_model, reward_backbone(cfg)
    if rm.backbone.finetune != "frozen" or not isinstance(backbone, Path):
        return None
    config, tokenizer = AutoConfig.from_pretrained(backbone), AutoTokenizer.from_pretrained(backbone)
    kind = backbone_kind(config) if rm.backbone.kind == "auto" else rm.backbone.kind
    pooling = rm.backbone.pooling if rm.backbone.pooling != "auto" else ("last" if kind == "decoder" else "mean")
    layers = (
        None
        if rm.backbone.layers is None
        else check_layers(rm.backbone.layers, rm.backbone.depth or config.num_hidden_layers)
    )
    width = config.hidden_size * (2 if pooling == "last_mean" else 1) * (1 if layers is None else len(layers)) + int(
        rm.length_feature
    )
    frame = None
    if rm.backbone.frame in ("judge", "judge_question"):
        frame = judge_frame(
            tokenizer,
            rubric_system(cfg.labeling),
            cfg.labeling.scalar_question if rm.backbone.frame == "judge_question" else None,
        )
    depth = config.num_hidden_layers if rm.backbone.depth is None else rm.backbone.depth
    return (
        pooled_namespace(backbone, kind, pooling, depth, layers, rm.length_feature),
        width,
        make_encoder(tokenizer, frame, rm.max_length),
    )


def ship_reference(
    student_path: Path, cfg: PolicyConfig, pairs: pd.DataFrame, folder: Path, batch_size: int = 16
) -> tuple[Path, int, int]:
    """Write the base's (the reference's) summed reply log-probability of each pair's chosen and rejected
    sequence, as the dual trainer encodes them (`policy.max_length`), to `folder`
    (`shipped_reference_file`), so a fresh clone's first training reads them instead of a pass of the
    student over every shipped pair. Returns (file, sequences, sequences measured now)."""
    from hominem_pipeline.core.policy.lora import lora_student
    from hominem_pipeline.core.reward.guards import reply_token_logps

    model, tokenizer, base = lora_student(student_path, cfg)
    model.eval()
    by_key = {sequence_key(s): s for pair in pair_sequences(tokenizer, pairs, cfg.max_length) for s in pair}
    cache = load_shipped_reference(folder, base)
    known = len(cache)
    progress = Progress("reference log-probabilities of the shipped pairs", len(by_key), log, unit="sequences")
    todo = sorted(((k, s) for k, s in by_key.items() if k not in cache), key=lambda kv: len(kv[1][0]))
    progress.advance(len(by_key) - len(todo))
    with (
        model.disable_adapter()
    ):  # inference only: the LM head on the reply positions alone (the same values as the fused head's, to ~1e-5)
        for start in range(0, len(todo), 8 * batch_size):
            chunk = todo[start : start + 8 * batch_size]
            values, _ = reply_token_logps(model, [s for _, s in chunk], tokenizer.pad_token_id, batch_size)
            cache.update({key: float(v) for (key, _), v in zip(chunk, values.tolist())})
            progress.advance(len(chunk))
    keys = list(by_key)
    path = shipped_reference_file(folder, base)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(path, keys=np.array(keys), logps=np.array([cache[k] for k in keys], dtype=np.float64))
    return path, len(keys), max(0, len(cache) - known)


def ship_people_start(
    student_path: Path, cfg: PolicyConfig, pairs: pd.DataFrame, memory: pd.DataFrame, folder: Path
) -> tuple[Path, int, int]:
    """Train the people's start on `pairs` (the people's training pairs as the dual trainer's rows,
    `policy.pairs.people_rows`) and `memory` with `policy.dual.people_start`'s steps and learning rate (seed 0, the
    reference read from `folder`'s shipped log-probabilities), and write it to `folder`
    (`people_start.people_start_file`); one shipped there already with the same settings, pairs and memory rows is
    kept. Returns (file, pairs, pairs trained on now: 0 when kept)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from hominem_pipeline.core.policy.lora import lora_student
    from hominem_pipeline.core.policy.people_start import (
        lora_shape,
        pairs_key,
        people_start_file,
    )

    start = cfg.dual.people_start
    if start is None:
        raise ValueError("policy.dual.people_start is null: there is no people's start to train")
    settings = {
        "max_steps": start.max_steps,
        "learning_rate": start.learning_rate,
        "batch_size": cfg.batch_size,
        "max_length": cfg.max_length,
        "beta": cfg.beta,
        "dual": cfg.dual.model_dump(exclude={"people_start", "people_share", "sampler", "channels"}),
        "lora": lora_shape(cfg.lora),
        **({"channels": cfg.dual.channels.model_dump()} if cfg.dual.channels.trains_differently() else {}),
        "pairs": len(pairs),
        "pairs_key": pairs_key(pairs),
        "memory_key": fingerprint(list(zip(memory["prompt"], memory["response"])), 16),
        "seed": 0,
    }
    _, _, base = lora_student(student_path, cfg, device="cpu")
    path = people_start_file(folder, base)
    if path.is_file():
        with safe_open(str(path), "pt") as fh:
            shipped = json.loads(fh.metadata()["settings"])
        if {k: v for k, v in shipped.items() if k != "final_reward_accuracy"} == settings:
            return path, len(pairs), 0
    tuned = cfg.model_copy(update={"max_steps": start.max_steps, "learning_rate": start.learning_rate})
    with tempfile.TemporaryDirectory() as tmp:
        result = train_dual_adapter(
            pairs,
            memory,
            start=DualStart(student_path, shipped_reference=folder),
            cfg=tuned,
            out_dir=Path(tmp),
            seed=0,
        )
        state = load_file(str(Path(tmp) / "adapter_model.safetensors"))
    settings["final_reward_accuracy"] = result.metrics["final_reward_accuracy"]
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata={"settings": json.dumps(settings)})
    return path, len(pairs), len(pairs)
