"""The reward model's training set: every sequence with its targets, grouped by prompt (or human pair),
the preference pairs between them, and the batches they are drawn in."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.common.schema import vector_matrix
from hominem_pipeline.core.common.tags import own_dimension
from hominem_pipeline.core.config import RewardModelConfig
from hominem_pipeline.core.reward.encoding import length_sorted_batches, pad_id
from hominem_pipeline.core.reward.network import RewardNet

log = logging.getLogger(__name__)

PAIR_GAP = 0.1  # teacher gap at which two candidates of a prompt form a pair (training, accuracy, calibration)
BUCKET_GROUPS = 64  # training batches are drawn from windows of this many groups sorted by length


def pairwise_accuracy(pairs: np.ndarray, predicted: np.ndarray) -> float | None:
    """Share of (preferred, other) pairs that the prediction orders the same way (a tie counts as wrong)."""
    if len(pairs) == 0:
        return None
    predicted = np.asarray(predicted, dtype=np.float64)
    return float((predicted[pairs[:, 0]] > predicted[pairs[:, 1]]).mean())


@dataclass
class TrainingSet:
    """Every sequence the model sees, with its targets, grouped for batching.

    Sequences 0..labeled-1 are the labeled examples (in frame order); the rest are the chosen and
    rejected replies of human pairs. A group is one prompt's candidates, or one human pair: batches are
    made of whole groups, so a batch holds both sides of every pair it trains on."""

    encoded: list[list[int]]
    texts: list[tuple[str, str]]  # (prompt, reply) of each sequence
    labeled: int
    targets: dict[str, torch.Tensor]
    group_of: np.ndarray  # sequence -> group
    groups: list[np.ndarray]  # group -> sequences
    pairs: np.ndarray  # (k, 2) preferred, other (sequence indices)
    pair_weight: np.ndarray  # (k,)
    pair_group: np.ndarray  # (k,) group of each pair
    pair_human: np.ndarray  # (k,) bool
    pair_dimension: (
        np.ndarray
    )  # (k,) the dimension a people's pair is tagged with (`tags.own_dimension`): its index, -1 for none
    pair_scalar: (
        np.ndarray
    )  # (k,) bool: the pair also says which reply is better overall (False: a nudge's pair, about its dimension alone)
    pair_harm: np.ndarray  # (k,) bool: a people's pair chosen by harm (its file's `harm`, or tagged harm_avoidance)

    @classmethod
    def build(
        cls,
        encode: Callable[[str, str], list[int]],
        labels: pd.DataFrame,
        human: pd.DataFrame | None,
        dimensions: list[str],
        cfg: RewardModelConfig,
    ) -> TrainingSet:
        from hominem_pipeline.core.reward.calibration import same_prompt_pairs

        texts = list(zip(labels["prompt"], labels["response"]))
        encoded = [encode(p, r) for p, r in texts]
        n = len(labels)
        vec = vector_matrix(labels["vector"], dimensions, np.float32)
        targets = {
            "vector": torch.tensor(vec),
            **{
                k: torch.tensor(labels[k].to_numpy(np.float32)) for k in ("scalar", "reward_intensity", "safety_score")
            },
        }
        prompt_ids = np.asarray(labels["prompt_id"]) if n else np.array([], dtype=object)
        names = {p: i for i, p in enumerate(sorted(set(prompt_ids)))}
        group_of = np.array([names[p] for p in prompt_ids], dtype=np.int64)
        pairs = (
            same_prompt_pairs(prompt_ids, labels["scalar"].to_numpy(np.float64), PAIR_GAP)
            if n
            else np.zeros((0, 2), np.int64)
        )
        weights = np.full(len(pairs), cfg.pair_loss.teacher_weight)
        human_flags = np.zeros(len(pairs), bool)
        pair_dims = np.full(len(pairs), -1, np.int64)
        scalar_flags = np.ones(len(pairs), bool)
        harm_flags = np.zeros(len(pairs), bool)
        if human is not None and len(human):
            start, g0 = len(encoded), len(names)
            for prompt, chosen, rejected in zip(human["prompt"], human["chosen"], human["rejected"]):
                encoded += [encode(prompt, chosen), encode(prompt, rejected)]
                texts += [(prompt, chosen), (prompt, rejected)]
            h = len(human)
            group_of = np.concatenate([group_of, np.repeat(np.arange(g0, g0 + h), 2)])
            chosen_idx = start + 2 * np.arange(h)
            pairs = np.concatenate([pairs, np.stack([chosen_idx, chosen_idx + 1], 1)])
            per_pair = (
                human["weight"].to_numpy(float) if "weight" in human else np.ones(h)
            )  # a feedback choice's strength
            weights = np.concatenate([weights, cfg.pair_loss.human_weight * per_pair])
            human_flags = np.concatenate([human_flags, np.ones(h, bool)])
            dims, overall, by_harm = _human_pair_flags(human, dimensions)
            pair_dims = np.concatenate([pair_dims, dims])
            scalar_flags = np.concatenate([scalar_flags, overall])
            harm_flags = np.concatenate([harm_flags, by_harm])
        n_groups = int(group_of.max()) + 1 if len(group_of) else 0
        order = np.argsort(group_of, kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(group_of, minlength=n_groups))[:-1]) if n_groups else []
        return cls(
            encoded,
            texts,
            n,
            targets,
            group_of,
            groups,
            pairs,
            weights,
            group_of[pairs[:, 0]] if len(pairs) else np.zeros(0, np.int64),
            human_flags,
            pair_dims,
            scalar_flags,
            harm_flags,
        )

    def split(self, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Group ids (train, val): labeled prompts and human pairs each split by `val_fraction`, so a
        prompt's candidates (or a pair's two replies) are never on both sides."""
        rng = np.random.default_rng(seed)
        labeled_groups = np.unique(self.group_of[: self.labeled])
        human_groups = np.unique(self.group_of[self.labeled :])
        train, val = [], []
        for groups in (labeled_groups, human_groups):
            groups = rng.permutation(groups)
            n_val = max(1, round(len(groups) * val_fraction)) if len(groups) > 1 else 0
            val.append(groups[:n_val])
            train.append(groups[n_val:])
        return np.concatenate(train).astype(np.int64), np.concatenate(val).astype(np.int64)

    def batches(self, groups: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Groups packed into batches of at most `batch_size` sequences (a bigger group alone). The groups
        are shuffled, then sorted by length within windows of BUCKET_GROUPS, so that a batch holds texts of
        similar length and pads little; the batches are shuffled again."""
        shuffled = rng.permutation(groups)
        out: list[np.ndarray] = []
        for start in range(0, len(shuffled), BUCKET_GROUPS):
            window = sorted(
                shuffled[start : start + BUCKET_GROUPS].tolist(),
                key=lambda g: max(len(self.encoded[s]) for s in self.groups[g]),
            )
            current: list[int] = []
            for g in window:
                members = self.groups[g]
                if current and len(current) + len(members) > batch_size:
                    out.append(np.asarray(current))
                    current = []
                current.extend(members.tolist())
            if current:
                out.append(np.asarray(current))
        return [out[i] for i in rng.permutation(len(out))]

    def pairs_within(self, seqs: np.ndarray) -> np.ndarray:
        """Indices of the pairs both of whose sequences are in `seqs`."""
        inside = np.zeros(len(self.encoded), bool)
        inside[seqs] = True
        return (
            np.flatnonzero(inside[self.pairs[:, 0]] & inside[self.pairs[:, 1]])
            if len(self.pairs)
            else np.zeros(0, np.int64)
        )


def _human_pair_flags(human: pd.DataFrame, dimensions: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per people's pair: the index of the dimension its tag names (-1: none; `tags.own_dimension`), whether it
    says which reply is better overall (`scalar`, true unless a nudge's), and whether people chose by harm there
    (its file's `harm`, or tagged harm_avoidance)."""
    h = len(human)
    tags = human["tag"] if "tag" in human else [None] * h
    own = [own_dimension(t if isinstance(t, str) else None, dimensions) for t in tags]  # feedback pairs: NaN tags
    dims = np.array([-1 if d is None else dimensions.index(d) for d in own], dtype=np.int64)
    overall = human["scalar"].fillna(True).astype(bool).to_numpy() if "scalar" in human else np.ones(h, bool)
    lost = np.flatnonzero(~overall & (dims < 0))
    if len(lost):
        raise ValueError(
            f"{len(lost)} people's pairs are about a dimension alone (scalar false) but name no "
            "configured dimension in `tag` "
            f"(first: {tags.iloc[lost[0]] if hasattr(tags, 'iloc') else tags[lost[0]]!r}); tag "
            f"them with one of {dimensions}, or drop them"
        )
    harm = human["harm"].fillna(False).astype(bool).to_numpy() if "harm" in human else np.zeros(h, bool)
    return dims, overall, harm | np.array([d == "harm_avoidance" for d in own], dtype=bool)


def _bootstrap(n_groups: int, members: int, rng: np.random.Generator) -> np.ndarray:
    """Weights (group, member): Poisson(1) per group and member (the online bootstrap), so each member
    trains on its own resample; all ones for a single member."""
    if members == 1:
        return np.ones((n_groups, 1), np.float32)
    w = rng.poisson(1.0, size=(n_groups, members)).astype(np.float32)
    empty = w.sum(0) == 0
    w[:, empty] = 1.0  # a member that drew nothing at all trains on everything
    return w


def pooled_namespace(
    backbone: Any, kind: str, pooling: str, depth: int, layers: Sequence[int] | None, length_feature: bool
) -> list:
    """What decides a frozen backbone's pooled rows besides the tokens (`feature_cache` namespace): its
    folder's digest, kind, the layers kept (`depth`) and read (`layers`), pooling and the length column.
    Training and a saved model's scoring name them alike, so each reads what the other computed."""
    from hominem_pipeline.core.pipeline.artifacts import folder_digest

    return [
        "pooled",
        folder_digest(backbone),
        kind,
        depth,
        None if layers is None else list(layers),
        pooling,
        length_feature,
    ]


def _pooled_all(
    net: RewardNet,
    encoded: list[list[int]],
    batch_size: int,
    pad: int,
    guards: torch.Tensor | None = None,
    cache: Any = None,
) -> torch.Tensor:
    """What the heads read for every encoded sequence, as the net is now (eval mode): the backbone's
    pooled vector, then the sequence's row of `guards` (None: the pooled vector alone). `cache`: a
    `FeatureCache` of pooled vectors by token ids (a frozen backbone's), read first and added to."""
    from hominem_pipeline.core.reward.feature_cache import cached_rows, ids_key

    width = net.feature_size - net.guards

    def compute(todo: list[int]) -> torch.Tensor:
        out = torch.zeros(len(todo), width)
        net.eval()
        device = next(net.parameters()).device  # the inputs go where the net is; the rows come back to the CPU
        progress = (
            Progress("reward model backbone pass", len(todo), log, unit="sequences") if len(todo) > 256 else None
        )
        with torch.inference_mode():
            for idx, ids, mask in length_sorted_batches([encoded[i] for i in todo], batch_size, pad):
                out[idx] = net.pooled(ids.to(device), mask.to(device)).cpu()
                if progress:
                    progress.advance(len(idx))
        return out

    pooled = (
        cached_rows(cache, [ids_key(e) for e in encoded], compute, width)
        if cache is not None
        else compute(list(range(len(encoded))))
    )
    if guards is None:
        return pooled
    if guards.shape != (len(encoded), net.guards):
        raise ValueError(f"this reward net reads {net.guards} guard columns per row; got {tuple(guards.shape)}")
    return torch.cat([pooled, guards.to(pooled.dtype)], dim=-1)


def _rationale_targets(
    net: RewardNet, tokenizer: Any, rationales: Sequence[str], max_length: int, batch_size: int
) -> torch.Tensor:
    """The untrained backbone's pooled embedding of each rationale: what the auxiliary head predicts."""
    encoded = [
        tokenizer.encode(r or "", add_special_tokens=True, truncation=True, max_length=max_length)
        or [pad_id(tokenizer)]
        for r in rationales
    ]
    return _pooled_all(net, encoded, batch_size, pad_id(tokenizer))
