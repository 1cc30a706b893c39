"""Writing a trained reward model: its backbone (or a reference to it), its heads, its people's score,
and METADATA.json, which says what every output means and how the model was trained and checked."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from torch import nn

from hominem_pipeline.core.common.schema import (
    INTENSITY_RANGE,
    SAFETY_RANGE,
    SCALAR_RANGE,
    VECTOR_RANGE,
    vector_matrix,
)
from hominem_pipeline.core.lm.model_refs import model_name
from hominem_pipeline.core.pipeline.artifacts import folder_digest
from hominem_pipeline.core.reward.metadata import RewardMetadata
from hominem_pipeline.core.reward.model import BACKBONE_DIR, HEADS
from hominem_pipeline.core.reward.network import write_backbone_reference
from hominem_pipeline.core.reward.ridge import RIDGE_FOLDS
from hominem_pipeline.core.reward.training.fit import HeadsFit
from hominem_pipeline.core.reward.training.prepare import PreparedTraining

SEMANTICS = {
    "vector": "per dimension: -1 worst, 0 neutral, 1 best",
    "scalar": "overall preference, -1 worst to 1 best",
    "reward_intensity": "0 = should not drive learning, 1 = should drive it strongly",
    "safety_score": "1 = safe to learn from; low values gate learning (skip, down-weight or invert)",
}
RANGES = {
    "vector": list(VECTOR_RANGE),
    "scalar": list(SCALAR_RANGE),
    "reward_intensity": list(INTENSITY_RANGE),
    "safety_score": list(SAFETY_RANGE),
}


def _unwrap_backbone(backbone: nn.Module) -> nn.Module:
    """The plain backbone to save: LoRA merged into the weights, so loading needs no PEFT."""
    return backbone.merge_and_unload() if hasattr(backbone, "merge_and_unload") else backbone


def write_weights(prep: PreparedTraining, out_dir: Path) -> None:
    """The backbone (a reference to unchanged weights, else the weights with LoRA merged), the heads and the
    people's score."""
    from safetensors.torch import save_file

    net = prep.net
    backbone = net.backbone = _unwrap_backbone(net.backbone)
    if prep.cfg.backbone.finetune == "frozen":  # unchanged weights: referenced with their digest, not copied
        write_backbone_reference(out_dir / BACKBONE_DIR, prep.sources.backbone)
    else:
        backbone.save_pretrained(out_dir / BACKBONE_DIR)
        prep.tokenizer.save_pretrained(out_dir / BACKBONE_DIR)
    save_file({k: v.contiguous() for k, v in net.head_state_dict().items()}, str(out_dir / HEADS))
    if prep.people_score is not None:
        prep.people_score.save(out_dir)


def _uncertainty(prep: PreparedTraining) -> str:
    u = prep.cfg.uncertainty
    counted = {"ensemble": f" ({prep.members} members)", "mc_dropout": f" ({u.mc_samples} passes)"}
    return f"standard deviation of each output across {u.method}" + counted.get(u.method, "")


def _validation(prep: PreparedTraining) -> str:
    """How the held-out figures were measured, in words."""
    if prep.cfg.head_fit == "ridge":
        return (
            f"out of fold: every prompt's replies scored by heads fitted on the other {RIDGE_FOLDS - 1} of "
            f"{RIDGE_FOLDS} prompt folds (penalty chosen inside them), and every human pair by heads fitted "
            "without its fold; the saved heads are fitted on every prompt and pair"
        )
    return (
        f"split by prompt: {prep.cfg.val_fraction:g} of the prompts (and of the human pairs) held out, for "
        "early stopping and these figures"
    )


def _sources(prep: PreparedTraining, fit: HeadsFit) -> dict[str, Any]:
    """The backbone, the guards' student and the people's score's encoder, each with its digest."""
    cfg, sources, net = prep.cfg, prep.sources, prep.net
    backbone = sources.backbone
    guards = people = None
    if cfg.guards:
        student = Path(prep.guard_student)
        guards = {"names": list(cfg.guards), "student": model_name(student), "sha256": folder_digest(student)}
    if prep.people_score is not None:
        encoder, score = Path(sources.people_encoder), prep.people_score
        people = {
            "encoder": model_name(encoder),
            "sha256": folder_digest(encoder),
            "max_length": cfg.people_score.max_length,
            "weight": fit.people_weight,
            "alpha": score.alpha,
            "pairs": score.pairs,
            "agreement": score.agreement,
        }
    return {
        "backbone": {
            "source": model_name(backbone) if Path(backbone).is_dir() else str(backbone),
            "kind": prep.kind,
            "pooling": prep.pooling,
            "finetune": cfg.backbone.finetune,
            "depth": net.backbone.config.num_hidden_layers,
            "layers": None if net.layers is None else list(net.layers),
        },
        "guards": guards,
        "people": people,
    }


def write_metadata(
    prep: PreparedTraining,
    fit: HeadsFit,
    final: dict[str, Any],
    calibration: dict[str, Any] | None,
    out_dir: Path,
    data_digest: str,
    date: str,
) -> None:
    """METADATA.json: what every output means, how the model reads and was fitted, and its held-out figures.

    Args:
        prep: the prepared training.
        fit: the fitted heads.
        final: the figures to record (the fit's and the calibration's).
        calibration: the calibration block (`calibrate_validation`; None without a held-out pair).
        out_dir: the model's folder.
        data_digest: the digest of everything it trained on.
        date: the day it was trained for.
    """
    cfg, examples, dims = prep.cfg, prep.examples, prep.dimensions
    normalisation = (
        "heads read features standardised by the training split's mean and spread (feature_mean, "
        "feature_std in the heads file); "
        if cfg.head_fit == "ridge"
        else "none; "
    )
    spread = None
    if len(examples) >= 2:
        spread = dict(zip(dims, vector_matrix(examples["vector"], dims).std(0).tolist()))
    metadata = {
        "dimensions": dims,
        "ranges": RANGES,
        "semantics": {**SEMANTICS, "uncertainty": _uncertainty(prep)},
        "normalisation": normalisation
        + "heads are bounded to the label ranges (tanh for vector and scalar, sigmoid for intensity and safety)",
        "max_length": cfg.max_length,
        **_sources(prep, fit),
        "frame": prep.frame,
        "head_fit": cfg.head_fit,
        "validation": _validation(prep),
        "length_feature": cfg.length_feature,
        "scalar": fit.combination.describe(dims) if fit.combination is not None else None,
        "members": prep.members,
        "dropout": cfg.dropout,
        "uncertainty": {"method": cfg.uncertainty.method, "mc_samples": cfg.uncertainty.mc_samples},  # members: above
        "losses": {
            "regression": prep.loss_weights,
            "pair": cfg.pair_loss.model_dump(),
            "rationale_weight": cfg.rationale_weight if prep.rationale_head else 0.0,
        },
        "training_data_digest": data_digest,
        "date": date,
        "training_examples": len(examples),
        "human_pairs": prep.people.n_human,
        "dimension_only_pairs": prep.people.n_dimension_only,
        "calibration": calibration,
        "metrics": final,
        "history": fit.history,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        "label_spread": spread,
    }
    # through JSON first: numpy scalars in the metrics and calibration become plain numbers
    RewardMetadata.model_validate(json.loads(json.dumps(metadata, default=float))).write(out_dir)
