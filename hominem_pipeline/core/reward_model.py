"""The multi-head reward model: an HF encoder with heads for the reward vector, scalar, intensity and safety.

Saved as a folder: `encoder/` (HF `save_pretrained`, with its tokenizer), `heads.safetensors` and
`METADATA.json` (dimensions, ranges, semantics, max length, training data digest, metrics, date).
`RewardModel.load(path).score(prompts, responses)` is the interface every later stage uses.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from hominem_pipeline.core.config import RewardModelConfig
from hominem_pipeline.core.progress import Progress
from hominem_pipeline.core.stats import pearson
from hominem_pipeline.core.schema import INTENSITY_RANGE, SAFETY_RANGE, SCALAR_RANGE, VECTOR_RANGE

log = logging.getLogger(__name__)

METADATA = "METADATA.json"
HEADS = "heads.safetensors"
RELIABILITY_PLOT = "reliability.png"
ENCODER_DIR = "encoder"
PAIR_GAP = 0.1  # teacher scalar gap at which a validation pair counts for pairwise accuracy


@dataclass(frozen=True)
class RewardOutput:
    vector: dict[str, float]
    scalar: float
    reward_intensity: float
    safety_score: float

    def as_dict(self) -> dict[str, Any]:
        return {"vector": self.vector, "scalar": self.scalar, "reward_intensity": self.reward_intensity, "safety_score": self.safety_score}


class RewardNet(nn.Module):
    """Encoder -> mean pooling -> four heads. Bounded outputs match the label ranges."""

    def __init__(self, encoder: nn.Module, n_dims: int, dropout: float = 0.1):
        super().__init__()
        hidden = encoder.config.hidden_size
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.vector_head = nn.Linear(hidden, n_dims)
        self.scalar_head = nn.Linear(hidden, 1)
        self.intensity_head = nn.Linear(hidden, 1)
        self.safety_head = nn.Linear(hidden, 1)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    def heads(self, pooled: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.dropout(pooled)
        return {
            "vector": torch.tanh(self.vector_head(h)),
            "scalar": torch.tanh(self.scalar_head(h)).squeeze(-1),
            "reward_intensity": torch.sigmoid(self.intensity_head(h)).squeeze(-1),
            "safety_score": torch.sigmoid(self.safety_head(h)).squeeze(-1),
        }

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.heads(self.pooled(input_ids, attention_mask))

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if not k.startswith("encoder.")}


def encode_pair(tokenizer: Any, prompt: str, response: str, max_length: int) -> list[int]:
    """[CLS] prompt [SEP] response [SEP] in at most `max_length` tokens: the response keeps its start
    (up to 3/4 of the budget), the prompt keeps its end (the latest turn), which is what is judged."""
    p = tokenizer.encode(prompt, add_special_tokens=False)
    r = tokenizer.encode(response, add_special_tokens=False)
    budget = max_length - 3
    r = r[: max(budget - len(p), (3 * budget) // 4)]
    p = p[max(0, len(p) - (budget - len(r))) :]
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    return [t for t in (start,) if t is not None] + p + [sep] + r + [sep]


def pad_batch(batch: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(x) for x in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    return ids, mask


def _check_inputs(prompts: Sequence[str], responses: Sequence[str]) -> None:
    if isinstance(prompts, str) or isinstance(responses, str):
        raise TypeError("score() takes lists of strings, not a single string; wrap it: score([prompt], [response])")
    if len(prompts) != len(responses):
        raise ValueError(f"score() got {len(prompts)} prompts but {len(responses)} responses; pass one prompt per response")
    for i, (p, r) in enumerate(zip(prompts, responses)):
        if not isinstance(p, str) or not isinstance(r, str):
            raise TypeError(f"item {i}: prompt and response must be str, got {type(p).__name__} and {type(r).__name__}")
        if not r.strip():
            raise ValueError(f"item {i}: the response is empty; there is nothing to score")


class RewardModel:
    """A trained reward model loaded for scoring."""

    def __init__(self, net: RewardNet, tokenizer: Any, metadata: dict[str, Any]):
        self.net = net.eval()
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.dimensions: list[str] = list(metadata["dimensions"])
        self.max_length: int = int(metadata["max_length"])

    @classmethod
    def load(cls, path: str | Path) -> RewardModel:
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer

        from hominem_pipeline.core.models import quiet_hf_progress

        quiet_hf_progress()
        path = Path(path)
        if not (path / METADATA).is_file():
            raise FileNotFoundError(f"{path} is not a reward model folder (no {METADATA}); pass a data/reward_model/<date>/<version> folder")
        metadata = json.loads((path / METADATA).read_text())
        encoder = AutoModel.from_pretrained(path / ENCODER_DIR)
        net = RewardNet(encoder, len(metadata["dimensions"]))
        missing = net.load_state_dict(load_file(str(path / HEADS)), strict=False)
        if missing.unexpected_keys or any(not k.startswith("encoder.") for k in missing.missing_keys):
            raise ValueError(f"{path / HEADS} does not match the model: {missing}")
        return cls(net, AutoTokenizer.from_pretrained(path / ENCODER_DIR), metadata)

    @property
    def temperature(self) -> float:
        """The fitted preference temperature (1.0, uncalibrated, when training had no validation pairs)."""
        return float((self.metadata.get("calibration") or {}).get("temperature", 1.0))

    def prefer(self, prompt: str, a: str, b: str) -> float:
        """The calibrated probability that response `a` is preferred over `b` for `prompt`."""
        from hominem_pipeline.core.calibration import preference_probability

        scalar = self.raw_scores([prompt, prompt], [a, b])["scalar"]
        return float(preference_probability(float(scalar[0]) - float(scalar[1]), self.temperature))

    def encode(self, prompts: Sequence[str], responses: Sequence[str]) -> list[list[int]]:
        return [encode_pair(self.tokenizer, p, r, self.max_length) for p, r in zip(prompts, responses)]

    def batches(self, encoded: list[list[int]], batch_size: int):
        """Index batches sorted by length so each batch pads only to its own longest item."""
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, mask = pad_batch([encoded[i] for i in idx], self.tokenizer.pad_token_id)
            yield idx, ids, mask

    def raw_scores(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32) -> dict[str, np.ndarray]:
        """Head outputs as arrays: vector (n, D), scalar, reward_intensity, safety_score (n,)."""
        _check_inputs(prompts, responses)
        n = len(prompts)
        out = {
            "vector": np.zeros((n, len(self.dimensions)), dtype=np.float32),
            "scalar": np.zeros(n, dtype=np.float32),
            "reward_intensity": np.zeros(n, dtype=np.float32),
            "safety_score": np.zeros(n, dtype=np.float32),
        }
        with torch.inference_mode():
            for idx, ids, mask in self.batches(self.encode(prompts, responses), batch_size):
                heads = self.net(ids, mask)
                for key, value in heads.items():
                    out[key][idx] = value.float().numpy()
        return out

    def score(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32) -> list[RewardOutput]:
        raw = self.raw_scores(prompts, responses, batch_size)
        return [
            RewardOutput(
                vector={d: float(raw["vector"][i, j]) for j, d in enumerate(self.dimensions)},
                scalar=float(raw["scalar"][i]),
                reward_intensity=float(raw["reward_intensity"][i]),
                safety_score=float(raw["safety_score"][i]),
            )
            for i in range(len(prompts))
        ]


# --- training -------------------------------------------------------------------------------------


def _targets(frame: pd.DataFrame, dimensions: list[str]) -> dict[str, torch.Tensor]:
    vec = np.array([[row[d] for d in dimensions] for row in frame["vector"]], dtype=np.float32)
    return {
        "vector": torch.tensor(vec),
        "scalar": torch.tensor(frame["scalar"].to_numpy(np.float32)),
        "reward_intensity": torch.tensor(frame["reward_intensity"].to_numpy(np.float32)),
        "safety_score": torch.tensor(frame["safety_score"].to_numpy(np.float32)),
    }


def split_by_prompt(prompt_ids: Sequence[str], val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, val) with every prompt's candidates on one side (no leakage across the split)."""
    unique = sorted(set(prompt_ids))
    rng = np.random.default_rng(seed)
    rng.shuffle(unique)
    n_val = max(1, round(len(unique) * val_fraction)) if len(unique) > 1 else 0
    val_prompts = set(unique[:n_val])
    ids = np.asarray(prompt_ids)
    val = np.flatnonzero(np.isin(ids, list(val_prompts)))
    train = np.flatnonzero(~np.isin(ids, list(val_prompts)))
    return train, val


def pairwise_accuracy(prompt_ids: Sequence[str], teacher: np.ndarray, predicted: np.ndarray, min_gap: float = PAIR_GAP) -> tuple[float | None, int]:
    """Share of same-prompt pairs (teacher gap >= min_gap) that the prediction orders the same way."""
    from hominem_pipeline.core.calibration import both_orders

    gaps, outcomes = both_orders(prompt_ids, teacher, predicted, min_gap)
    if len(gaps) == 0:
        return None, 0
    return float((np.sign(gaps) == 2 * outcomes - 1).mean()), len(gaps) // 2


def calibrate_pairs(prompt_ids: Sequence[str], teacher: np.ndarray, predicted: np.ndarray, plot: Path, date: str) -> dict[str, Any] | None:
    """Temperature scaling of P(a over b) = sigmoid(scalar gap / T) on the validation pairs (teacher gap
    at least PAIR_GAP), with ECE / MCE / Brier before and after and a reliability diagram. None (and a
    warning) when there is no such pair: `prefer` then reports uncalibrated probabilities (T = 1)."""
    from hominem_pipeline.core.calibration import both_orders, calibration_report, fit_temperature, preference_probability, reliability_diagram

    gaps, outcomes = both_orders(prompt_ids, teacher, predicted, PAIR_GAP)
    if len(gaps) == 0:
        log.warning("no validation pair has a teacher gap of %.2f or more: the reward model's preferences stay uncalibrated", PAIR_GAP)
        return None
    temperature = fit_temperature(gaps, outcomes)
    before = calibration_report(preference_probability(gaps, 1.0), outcomes)
    after = calibration_report(preference_probability(gaps, temperature), outcomes)
    reliability_diagram(before, after, plot, f"reward model {date}: {after['pairs'] // 2} validation pairs, T = {temperature:.3f}")
    return {
        "method": "temperature scaling: P(a preferred over b) = sigmoid((scalar_a - scalar_b) / temperature)",
        "temperature": temperature,
        "fitted_on": "validation pairs (same prompt, teacher scalar gap >= 0.1), each counted in both orders",
        "before": before,
        "after": after,
    }


def train_reward_model(
    examples: pd.DataFrame,
    *,
    dimensions: list[str],
    encoder_path: Path,
    cfg: RewardModelConfig,
    out_dir: Path,
    seed: int,
    data_digest: str,
    date: str,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Train on labeled examples (columns prompt_id, prompt, response, vector, scalar, reward_intensity,
    safety_score) and save the model to `out_dir`. Returns the final metrics."""
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer

    from hominem_pipeline.core.models import quiet_hf_progress

    quiet_hf_progress()

    if len(examples) < 4:
        raise ValueError(f"reward model training needs at least 4 labeled examples, got {len(examples)}; label more trajectories")
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(encoder_path)
    net = RewardNet(AutoModel.from_pretrained(encoder_path), len(dimensions))
    encoded = [encode_pair(tokenizer, p, r, cfg.max_length) for p, r in zip(examples["prompt"], examples["response"])]
    targets = _targets(examples, dimensions)
    train_idx, val_idx = split_by_prompt(list(examples["prompt_id"]), cfg.val_fraction, seed)
    if len(val_idx) == 0:
        raise ValueError("reward model validation split is empty: the labels cover a single prompt; label more prompts")

    optimizer = torch.optim.AdamW(
        [
            {"params": net.encoder.parameters(), "lr": cfg.learning_rate},
            {"params": [p for n, p in net.named_parameters() if not n.startswith("encoder.")], "lr": cfg.head_learning_rate},
        ],
        weight_decay=cfg.weight_decay,
    )
    w = cfg.loss_weights
    weights = {"vector": w.vector, "scalar": w.scalar, "reward_intensity": w.intensity, "safety_score": w.safety}
    scorer = RewardModel(net, tokenizer, {"dimensions": dimensions, "max_length": cfg.max_length})

    def losses(idx: np.ndarray, heads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        t = torch.as_tensor(idx)
        return {k: nn.functional.mse_loss(heads[k], targets[k][t]) for k in weights}

    def predict(idx: np.ndarray) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        net.eval()
        preds = {k: torch.zeros_like(v[torch.as_tensor(idx)]) for k, v in targets.items()}
        with torch.inference_mode():
            for pos, ids, mask in scorer.batches([encoded[i] for i in idx], cfg.batch_size):
                heads = net(ids, mask)
                for k in preds:
                    preds[k][torch.as_tensor(pos)] = heads[k]
        return preds, {k: v[torch.as_tensor(idx)] for k, v in targets.items()}

    def evaluate(idx: np.ndarray, predicted: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None = None) -> dict[str, Any]:
        preds, tgt = predicted or predict(idx)
        mse = {k: float(nn.functional.mse_loss(preds[k], tgt[k])) for k in weights}
        metrics: dict[str, Any] = {f"val_mse_{k}": v for k, v in mse.items()}
        metrics["val_loss"] = sum(weights[k] * mse[k] for k in weights)
        for j, d in enumerate(dimensions):
            metrics[f"val_mse_dim_{d}"] = float(nn.functional.mse_loss(preds["vector"][:, j], tgt["vector"][:, j]))
            metrics[f"val_pearson_{d}"] = pearson(preds["vector"][:, j].numpy(), tgt["vector"][:, j].numpy())
        metrics["val_pearson_scalar"] = pearson(preds["scalar"].numpy(), tgt["scalar"].numpy())
        acc, n_pairs = pairwise_accuracy([examples["prompt_id"].iloc[i] for i in idx], tgt["scalar"].numpy(), preds["scalar"].numpy())
        metrics["val_pairwise_accuracy"] = acc
        metrics["val_pairs"] = n_pairs
        return metrics

    rng = np.random.default_rng(seed)
    best_loss, best_state, best_epoch, stale = math.inf, None, 0, 0
    history = []
    steps_per_epoch = math.ceil(len(train_idx) / cfg.batch_size)
    progress = Progress("reward model training", cfg.epochs * steps_per_epoch, log, unit="steps")
    for epoch in range(1, cfg.epochs + 1):
        net.train()
        order = rng.permutation(train_idx)
        running = {k: 0.0 for k in weights}
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start : start + cfg.batch_size]
            ids, mask = pad_batch([encoded[i] for i in idx], tokenizer.pad_token_id)
            parts = losses(idx, net(ids, mask))
            loss = sum(weights[k] * parts[k] for k in weights)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            for k in weights:
                running[k] += parts[k].item() * len(idx)
            progress.advance(1, epoch=epoch, loss=f"{loss.item():.4f}")
        metrics = {f"train_mse_{k}": v / len(train_idx) for k, v in running.items()}
        metrics.update(evaluate(val_idx))
        history.append({"epoch": epoch, **metrics})
        if on_epoch:
            on_epoch(epoch, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if metrics["val_loss"] < best_loss - 1e-6:
            best_loss, best_epoch, stale = metrics["val_loss"], epoch, 0
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        else:
            stale += 1
            if stale >= cfg.early_stopping_patience:
                log.info("early stopping after epoch %d (best epoch %d)", epoch, best_epoch)
                break
    assert best_state is not None  # epoch 1 always improves on inf
    net.load_state_dict(best_state)
    preds, tgt = predict(val_idx)
    final = evaluate(val_idx, (preds, tgt))
    final.update({"best_epoch": best_epoch, "epochs_run": len(history), "train_examples": len(train_idx), "val_examples": len(val_idx)})

    out_dir.mkdir(parents=True, exist_ok=True)
    calibration = calibrate_pairs(
        [examples["prompt_id"].iloc[i] for i in val_idx], tgt["scalar"].numpy(), preds["scalar"].numpy(), out_dir / RELIABILITY_PLOT, date
    )
    if calibration is not None:
        final.update({"temperature": calibration["temperature"], **{f"val_{k}": v for k, v in calibration["after"].items() if k in ("ece", "mce", "brier")}})
        final["val_ece_uncalibrated"] = calibration["before"]["ece"]
    net.encoder.save_pretrained(out_dir / ENCODER_DIR)
    tokenizer.save_pretrained(out_dir / ENCODER_DIR)
    save_file({k: v.contiguous() for k, v in net.head_state_dict().items()}, str(out_dir / HEADS))
    metadata = {
        "dimensions": dimensions,
        "ranges": {
            "vector": list(VECTOR_RANGE),
            "scalar": list(SCALAR_RANGE),
            "reward_intensity": list(INTENSITY_RANGE),
            "safety_score": list(SAFETY_RANGE),
        },
        "semantics": {
            "vector": "per dimension: -1 worst, 0 neutral, 1 best",
            "scalar": "overall preference, -1 worst to 1 best",
            "reward_intensity": "0 = should not drive learning, 1 = should drive it strongly",
            "safety_score": "1 = safe to learn from; low values gate learning (skip, down-weight or invert)",
        },
        "max_length": cfg.max_length,
        "pooling": "mean",
        "encoder_source": str(encoder_path),
        "training_data_digest": data_digest,
        "date": date,
        "training_examples": len(examples),
        "calibration": calibration,
        "metrics": final,
        "history": history,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
    }
    (out_dir / METADATA).write_text(json.dumps(metadata, indent=2, default=float) + "\n")
    return final
