"""Held-out calibration of the reward model's pairwise preferences (temperature scaling), overall and per
dimension, with the reliability plots."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from hominem_pipeline.core.reward.dataset import PAIR_GAP, TrainingSet

log = logging.getLogger(__name__)

RELIABILITY_PLOT = "reliability.png"
DIMENSION_PLOT = "reliability_dimensions.png"
ECE_NOISE_WARNING = 0.05  # above this noise floor (too few held-out pairs) the stage warns that its ECE says little


def calibrate(pairs: np.ndarray, pair_group: np.ndarray, predicted: np.ndarray) -> dict[str, Any] | None:
    """Temperature scaling of P(first preferred) = sigmoid(predicted gap / T) on (preferred, other) pairs,
    with ECE / MCE / Brier before and after, and a held-out ECE: T fitted on half the prompts and
    applied to the other half (both ways). None when there is no pair."""
    from hominem_pipeline.core.reward.calibration import (
        both_orders,
        calibration_report,
        ece_noise_floor,
        fit_temperature,
        preference_probability,
    )

    if len(pairs) == 0:
        return None
    gaps, outcomes = both_orders(pairs, predicted)
    temperature = fit_temperature(gaps, outcomes)
    fold = np.tile(np.asarray(pair_group) % 2, 2)
    after = calibration_report(preference_probability(gaps, temperature), outcomes)
    held_out = None
    if len(np.unique(fold)) == 2:
        probs = np.zeros(len(gaps))
        for f in (0, 1):
            t = fit_temperature(gaps[fold != f], outcomes[fold != f])
            probs[fold == f] = preference_probability(gaps[fold == f], t)
        held_out = calibration_report(probs, outcomes)
        held_out["noise_floor"] = ece_noise_floor(probs[: len(pairs)])
    else:
        after["noise_floor"] = ece_noise_floor(preference_probability(gaps[: len(pairs)], temperature))
    return {
        "temperature": temperature,
        "before": calibration_report(preference_probability(gaps, 1.0), outcomes),
        "after": after,
        "held_out": held_out,
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _drop_bins(report: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if report is None else {k: v for k, v in report.items() if k != "bins"}


def _scalar_report(overall: dict[str, Any], source: str, out_dir: Path, date: str) -> dict[str, float]:
    """The scalar's calibration: its metrics, its reliability plot, and a warning when the pairs are too few for
    the ECE to mean much."""
    from hominem_pipeline.core.reward.calibration import reliability_diagram

    held = overall["held_out"]
    reported = held or overall["after"]
    n_pairs = overall["after"]["pairs"] // 2
    if reported["noise_floor"] > ECE_NOISE_WARNING:
        log.warning(
            "calibration measured on %d %s pairs: a perfectly calibrated model would read an ECE of "
            "%.3f on them, so the ECE of %.3f says "
            "little about calibration; a wider window (reward_model.window_days) of labeled days gives more pairs",
            n_pairs,
            source,
            reported["noise_floor"],
            reported["ece"],
        )
    title = f"reward model {date}: {n_pairs} {source} pairs, T = {overall['temperature']:.3g}"
    if held is not None:
        title += f"\nheld-out ECE {held['ece']:.3f} (T fitted on the other half of the prompts)"
    title += f"\na perfectly calibrated model would read {reported['noise_floor']:.3f} on these pairs"
    reliability_diagram(overall["before"], overall["after"], out_dir / RELIABILITY_PLOT, title)
    return {
        "temperature": overall["temperature"],
        "val_ece": reported["ece"],
        "val_ece_noise_floor": reported["noise_floor"],
        "val_ece_in_sample": overall["after"]["ece"],
        "val_ece_uncalibrated": overall["before"]["ece"],
        "val_mce": reported["mce"],
        "val_brier": reported["brier"],
    }


def _block(overall: dict[str, Any], source: str) -> dict[str, Any]:
    """The METADATA calibration block of the scalar (each dimension's is added to `dimensions`)."""
    return {
        "method": "temperature scaling: P(a preferred over b) = sigmoid((scalar_a - scalar_b) / temperature)",
        "fitted_on": f"{source} pairs (same prompt with teacher scalar gap >= {PAIR_GAP}, and human pairs), each "
        "counted in both orders; "
        "a dimension: the teacher's pairs with that gap on it and the human pairs tagged with it",
        "held_out_ece": (
            f"val_ece: temperature fitted on half the {source} prompts, applied to the other half (both ways)"
            if overall["held_out"]
            else "in sample (one prompt group only)"
        ),
        "ece_noise_floor": (
            "val_ece_noise_floor: the mean ECE of a perfectly calibrated model on these pairs (outcomes drawn from "
            "the reported probabilities, 400 draws): an ECE near it is what the pair count allows"
        ),
        "temperature": overall["temperature"],
        "before": overall["before"],
        "after": overall["after"],
        "held_out": _drop_bins(overall["held_out"]),
        "dimensions": {},
    }


def _dimensions(data: TrainingSet, val_seqs: np.ndarray, val_pairs: np.ndarray, full: dict, ids: np.ndarray) -> dict:
    """Each dimension's calibration on the teacher pairs with a gap on it and the held-out people's pairs tagged
    with it: {dimension index: its calibration} for those with pairs."""
    from hominem_pipeline.core.reward.calibration import same_prompt_pairs

    lab = val_seqs[val_seqs < data.labeled]
    found = {}
    for j in range(data.targets["vector"].shape[1]):
        teacher_d = data.targets["vector"][:, j].numpy()
        tagged = data.pairs[val_pairs[data.pair_human[val_pairs] & (data.pair_dimension[val_pairs] == j)]]
        pairs_d = np.concatenate([lab[same_prompt_pairs(ids[lab], teacher_d[lab], PAIR_GAP)].reshape(-1, 2), tagged])
        dim = calibrate(pairs_d, data.group_of[pairs_d[:, 0]], full["vector"][:, j])
        if dim is not None:
            found[j] = dim | {"people_pairs": len(tagged)}
    return found


def calibrate_validation(
    data: TrainingSet,
    val_seqs: np.ndarray,
    val_pairs: np.ndarray,
    full: dict[str, np.ndarray],
    prompt_ids: list[str],
    dimensions: list[str],
    out_dir: Path,
    date: str,
    source: str = "validation",
) -> tuple[dict[str, Any] | None, dict[str, float]]:
    """Calibration on the held-out pairs (`source`: the validation split's, or every pair scored out of fold): the
    scalar (teacher and human pairs), then each dimension on the teacher pairs with a gap on it and the held-out
    people's pairs tagged with it. Draws both reliability plots into `out_dir`. Returns the METADATA block (None
    when there is no pair) and the metrics."""
    from hominem_pipeline.core.reward.calibration import reliability_grid

    scalar_pairs = val_pairs[data.pair_scalar[val_pairs]]  # a nudge's pair is about its dimension alone
    overall = calibrate(data.pairs[scalar_pairs], data.pair_group[scalar_pairs], full["scalar"])
    if overall is None:
        log.warning(
            "no validation pair (teacher gap of %.2f or more, or human pair): the reward model's "
            "preferences stay uncalibrated",
            PAIR_GAP,
        )
        return None, {}
    metrics = _scalar_report(overall, source, out_dir, date)
    calibration = _block(overall, source)
    panels = {}
    for j, dim in _dimensions(data, val_seqs, val_pairs, full, np.asarray(prompt_ids)).items():
        d, report = dimensions[j], dim["held_out"] or dim["after"]
        calibration["dimensions"][d] = {
            "temperature": dim["temperature"],
            "ece": report["ece"],
            "ece_noise_floor": report["noise_floor"],
            "ece_in_sample": dim["after"]["ece"],
            "pairs": dim["after"]["pairs"] // 2,
            "people_pairs": dim["people_pairs"],
        }
        metrics[f"val_ece_dim_{d}"] = report["ece"]
        panels[d] = (dim["after"], dim["temperature"], None if dim["held_out"] is None else dim["held_out"]["ece"])
    if panels:
        reliability_grid(panels, out_dir / DIMENSION_PLOT, f"reward model {date}: per-dimension pair calibration")
    return calibration, metrics
