"""Training the multi-head reward model.

The backbone is any HF encoder (mean pooling) or decoder (last-token pooling), fine-tuned fully, with
LoRA (merged before saving) or frozen. Each head has `members` outputs: a small deep ensemble on the
shared backbone, each member trained on its own bootstrap weights of the prompts, whose spread is the
model's uncertainty (or MC dropout: several stochastic passes at scoring time).

`train_reward_model` runs four parts in turn:

- `prepare`: the network, the training set and what stays fixed while the heads are fitted;
- `ridge_heads` (`head_fit: ridge`): the heads solved in closed form on the frozen backbone's features,
  pulled by people's pairs, with out-of-fold figures; or `gradient` (`head_fit: gradient`): the heads
  (and an unfrozen backbone) trained on the regression and Bradley-Terry losses, with early stopping;
- the pairwise preferences calibrated by temperature scaling on the held-out pairs (`reward.validation`);
- `save`: the weights and METADATA.json.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.config import RewardModelConfig
from hominem_pipeline.core.reward.training.fit import HeadsFit
from hominem_pipeline.core.reward.training.prepare import (
    HEAD_OUTPUTS,
    PreparedTraining,
    RewardSources,
    prepare_training,
)
from hominem_pipeline.core.reward.validation import _pct, calibrate_validation

log = logging.getLogger(__name__)

FEW_VAL_PAIRS = 30  # fewer teacher pairs than this in the validation split: its accuracy is mostly the split's luck

__all__ = ["HEAD_OUTPUTS", "RewardSources", "RewardTraining", "train_reward_model"]


@dataclass(frozen=True)
class RewardTraining:
    """A trained reward model: where it is, its held-out figures (also in its METADATA) and its history."""

    path: Path
    metrics: dict[str, Any]
    history: list[dict[str, Any]]


def train_reward_model(
    examples: pd.DataFrame,
    human_pairs: pd.DataFrame | None = None,
    *,
    sources: RewardSources,
    cfg: RewardModelConfig,
    dimensions: list[str],
    out_dir: Path,
    seed: int,
    data_digest: str,
    date: str,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> RewardTraining:
    """Train a reward model and write it to `out_dir`.

    Args:
        examples: the teacher's labels (columns prompt_id, prompt, response, vector, scalar, reward_intensity,
            safety_score, rationale); may be empty when there are human pairs.
        human_pairs: people's pairs (prompt, chosen, rejected; optional weight, tag, scalar, heads), or None.
            Pairs whose `heads` is False train the people's score only.
        sources: the backbone and the other models and caches it reads (`RewardSources`).
        cfg: the `reward_model` settings.
        dimensions: the reward vector's dimensions, in order.
        out_dir: the folder the model is written to.
        seed: seeds the network's initialisation, the split, the bootstrap and the batches.
        data_digest: the digest of everything it trains on, recorded in its METADATA.
        date: the day it is trained for, recorded in its METADATA.
        on_epoch: called with (step, figures) after each epoch (gradient) or each penalty tried (ridge).
    """
    from hominem_pipeline.core.reward.training.save import write_metadata, write_weights

    prep = prepare_training(examples, human_pairs, sources=sources, cfg=cfg, dimensions=dimensions, seed=seed)
    fit = _fit_heads(prep, on_epoch)
    prep.net.load_state_dict(fit.state)
    final = _final_metrics(prep, fit)
    out_dir.mkdir(parents=True, exist_ok=True)
    calibration, calibration_metrics = calibrate_validation(
        prep.data,
        prep.val_seqs,
        prep.val_pairs,
        fit.full,
        list(prep.examples["prompt_id"]),
        dimensions,
        out_dir,
        date,
        source="out-of-fold" if cfg.head_fit == "ridge" else "validation",
    )
    final.update(calibration_metrics)
    write_weights(prep, out_dir)
    write_metadata(prep, fit, final, calibration, out_dir, data_digest, date)
    return RewardTraining(out_dir, final, fit.history)


def _fit_heads(prep: PreparedTraining, on_epoch: Callable[[int, dict[str, float]], None] | None) -> HeadsFit:
    if prep.cfg.head_fit == "ridge":
        from hominem_pipeline.core.reward.training.ridge_heads import fit_ridge_heads

        return fit_ridge_heads(prep, on_epoch)
    from hominem_pipeline.core.reward.training.gradient import fit_gradient_heads

    return fit_gradient_heads(prep, on_epoch)


def _final_metrics(prep: PreparedTraining, fit: HeadsFit) -> dict[str, Any]:
    """The kept fit's held-out figures with the run's own; warns when too few teacher pairs were held out."""
    data = prep.data
    fitted = len(data.encoded) if prep.cfg.head_fit == "ridge" else sum(len(data.groups[g]) for g in prep.train_groups)
    final = {
        **fit.metrics,
        "best_epoch": fit.best_epoch,
        "epochs_run": len(fit.history),
        "train_sequences": int(fitted),
        "val_sequences": len(prep.val_seqs),
        **prep.cache_hits,
    }
    accuracy, n_val = final["val_pairwise_accuracy"], final["val_pairs"]
    if accuracy is not None and n_val < FEW_VAL_PAIRS:
        p = (accuracy * n_val + 1) / (n_val + 2)  # add-one estimate: 2 of 2 right is not a standard error of 0
        log.warning(
            "only %d held-out teacher pairs: their accuracy %s is +- %.0f points (one standard error); "
            "benchmarks/reward_teacher_agreement.py cross-validates over more (head_fit: ridge scores "
            "every prompt out of fold)",
            n_val,
            _pct(accuracy),
            100 * math.sqrt(p * (1 - p) / n_val),
        )
    return final
