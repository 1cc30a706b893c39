"""What `hominem data ship-features` writes: the rows the frozen networks compute for the texts the project
ships, the base's reference log-probabilities of the people's pairs and the people's start trained on them
(`config/human/features/`), so that a fresh clone's first day reads them instead of computing them. No stage
imports this module: a stage's code version covers what it runs, not the trainer that shipped its inputs."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

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


def ship_features(cfg: HominemConfig) -> list[tuple[Path, int, int]]:
    """Write what the reward model's frozen networks compute for the exchanges the project ships (`shipped_texts`:
    the shipped people's pairs, the contrast fixtures) as its shipped rows (`feature_cache.SHIPPED_FEATURES`), one
    file per text file and kind, so a fresh clone's first reward model reads them instead of computing them: the
    guard columns (`reward_model.guards`, measured by the student) and the frozen backbone's pooled states; for the
    fixtures also the base student's log-probabilities of their replies (the evaluation's `adapter_moves`). Rows are
    read from the project's feature cache or the rows shipped already, the guards measured where neither holds them;
    a pooled row must be in the cache (`hominem run` computes them). And the people's score's projection, fitted on
    every shipped people's pair's replies, with their rows read through it (`people.ship_projection`; their
    encoder's states read from the cache or measured). The base student's log-probabilities of the people's held-out
    pairs' replies (the evaluation's implicit reward), and, when the daily adapter learns from people's pairs, the
    reference log-probabilities of the others (`ship_reference`) and the people's start trained on them
    (`policy.people_start`). Replaces the folder's files and its MANIFEST.json. Returns (file, rows, rows computed
    now) per file written."""
    import json

    from hominem_pipeline.core.evaluation.fixtures import FIXTURE_MAX_LENGTH
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.pipeline.artifacts import (
        folder_digest,
        optional_file_digest,
    )
    from hominem_pipeline.core.reward.feature_cache import (
        FeatureCache,
        ids_key,
        text_key,
    )
    from hominem_pipeline.core.reward.guards import GUARD_MAX_LENGTH, GuardScorer

    folder, rm = cfg.path(SHIPPED_FEATURES), cfg.reward_model
    cache_folder = cfg.data_dir / FEATURE_CACHE
    pooled = _pooled_encoding(cfg)
    written, manifest = [], {}
    for source, texts in shipped_texts(cfg):
        name = source.split(".")[0]
        prompts, replies = [p for p, _ in texts], [r for _, r in texts]
        if rm.guards:
            student = student_path(cfg)
            scorer = GuardScorer(rm.guards, student, cache=cache_folder, shipped=folder)
            scorer(prompts, replies)
            cache = scorer.disk_cache()
            path = cache.ship([text_key(p, r) for p, r in texts], folder, name)
            written.append((path, len(set(texts)), cache.misses))
            manifest[path.name] = {
                "features": "guards",
                "columns": list(rm.guards),
                "file": source,
                "rows": written[-1][1],
                "student": student.name,
                "student_digest": folder_digest(student),
                "window_tokens": GUARD_MAX_LENGTH,
            }
        if pooled is not None:
            namespace, width, encode = pooled
            cache = FeatureCache(cache_folder, namespace, width, shipped=folder)
            keys = list(dict.fromkeys(ids_key(encode(p, r)) for p, r in texts))
            path = cache.ship(keys, folder, name)
            written.append((path, len(keys), 0))
            manifest[path.name] = {
                "features": "pooled",
                "width": width,
                "file": source,
                "rows": len(keys),
                "backbone_digest": namespace[1],
                "settings": namespace[2:],
                "max_length": rm.max_length,
                "frame": rm.backbone.frame,
            }
        if cfg.fixtures.file is not None and source == Path(cfg.fixtures.file).name:
            written.append(_ship_fixture_logps(cfg, cache_folder, folder, name))
            manifest[written[-1][0].name] = {
                "features": "student_logps",
                "columns": ["sum", "tokens"],
                "file": source,
                "rows": written[-1][1],
                "student_digest": folder_digest(student_path(cfg)),
                "max_length": FIXTURE_MAX_LENGTH,
            }
    held = people_pairs(cfg, "held_out")
    if held is not None:
        written.append(
            _ship_student_logps(
                cfg,
                cache_folder,
                folder,
                "people-held-out",
                [(p, r) for p, c, j in zip(held["prompt"], held["chosen"], held["rejected"]) for r in (c, j)],
            )
        )
        manifest[written[-1][0].name] = {
            "features": "student_logps",
            "columns": ["sum", "tokens"],
            "files": [s.file for s in rm.people_pairs if s.held_out],
            "rows": written[-1][1],
            "student_digest": folder_digest(student_path(cfg)),
            "max_length": FIXTURE_MAX_LENGTH,
        }
    train = people_pairs(cfg)
    if (
        train is not None and cfg.policy.mode == "dual" and cfg.policy.dual.people_share > 0
    ):  # what the daily adapter learns from
        written.append(ship_reference(student_path(cfg), cfg.policy, train, folder))
        manifest[written[-1][0].name] = {
            "features": "reference_logps",
            "files": [s.file for s in rm.people_pairs],
            "rows": written[-1][1],
            "student_digest": folder_digest(student_path(cfg)),
            "max_length": cfg.policy.max_length,
        }
    if (
        train is not None and cfg.policy.mode == "dual" and cfg.policy.dual.people_start is not None
    ):  # what it starts from
        from hominem_pipeline.core.builds.memory_files import memory_paths
        from hominem_pipeline.core.evaluation.memory import read_memory_rows
        from hominem_pipeline.core.policy.pairs import people_rows

        written.append(
            ship_people_start(
                student_path(cfg), cfg.policy, people_rows(train), read_memory_rows(memory_paths(cfg)), folder
            )
        )
        manifest[written[-1][0].name] = {
            "features": "people_start",
            "files": [s.file for s in rm.people_pairs],
            "pairs": written[-1][1],
            "steps": cfg.policy.dual.people_start.max_steps,
            "student_digest": folder_digest(student_path(cfg)),
            "max_length": cfg.policy.max_length,
        }
    pairs = people_pairs(
        cfg, "all"
    )  # the projection is fitted on every shipped reply's text (no choice read), the held-out ones too
    encoder = people_encoder(cfg)
    if encoder is not None and pairs is not None:
        from hominem_pipeline.core.reward.people import ship_projection

        every = [(p, r) for p, c, j in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"]) for r in (c, j)]
        projection, rows, n, measured = ship_projection(
            encoder, rm.people_score.max_length, cache_folder, every, folder
        )
        written += [(projection, n, measured), (rows, n, 0)]
        for path in (projection, rows):
            manifest[path.name] = {
                "features": "people_projection" if path == projection else "people_projected",
                "files": [s.file for s in rm.people_pairs],
                "rows": n,
                "encoder_digest": folder_digest(encoder),
                "max_length": rm.people_score.max_length,
            }
    for stale in [*folder.glob("*.npz"), *folder.glob("*.safetensors")]:
        if stale not in [w[0] for w in written]:
            stale.unlink()
    if written:
        digests = {
            **dict(zip([s.file for s in rm.people_pairs], people_pairs_digest(cfg))),
            **({cfg.fixtures.file: optional_file_digest(cfg.path(cfg.fixtures.file))} if cfg.fixtures.file else {}),
        }
        (folder / "MANIFEST.json").write_text(
            json.dumps({"file_digests": digests, "files": manifest}, indent=2) + "\n"
        )
    return written


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
