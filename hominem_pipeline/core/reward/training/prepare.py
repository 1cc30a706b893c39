"""Preparing a reward model's training: the network on its backbone, the encoded training set, the
columns beside the backbone's state (the student's guards, the people's score), the frozen backbone's
pooled features, the bootstrap weights of the ensemble and the held-out part.

What the heads' fits share is a `PreparedTraining`: both the closed-form fit (`ridge_heads`) and the
gradient one (`gradient`) read it, and so does the writing of the model (`save`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from hominem_pipeline.core.common.stats import pearson
from hominem_pipeline.core.config import RewardModelConfig
from hominem_pipeline.core.reward.dataset import (
    TrainingSet,
    _bootstrap,
    _pooled_all,
    _rationale_targets,
    pairwise_accuracy,
    pooled_namespace,
)
from hominem_pipeline.core.reward.encoding import (
    frame_prefix,
    judge_frame,
    length_sorted_batches,
    make_encoder,
    pad_id,
)
from hominem_pipeline.core.reward.guards import GuardScorer
from hominem_pipeline.core.reward.network import (
    RewardNet,
    backbone_kind,
    keep_layers,
    load_backbone,
    member_mean_std,
)
from hominem_pipeline.core.reward.people import PeopleScore, fit_people_score

log = logging.getLogger(__name__)

HEAD_OUTPUTS = ("vector", "scalar", "reward_intensity", "safety_score")
MIN_PEOPLE_PAIRS = 10  # people's pairs the heads read, at least, for a people's score (its weight is fitted on them)
EXAMPLE_COLUMNS = ["prompt_id", "prompt", "response", "vector", *HEAD_OUTPUTS[1:], "rationale"]


@dataclass(frozen=True)
class RewardSources:
    """Where a reward model reads from, beside its training data.

    Args:
        backbone: the backbone's folder (or hub id): any HF encoder, or a causal LM such as the student.
        judge_system: the judge's system text, which `backbone.frame: judge` needs (`teacher.rubric_system`).
        judge_question: the question `backbone.frame: judge_question` asks after the exchange
            (`labeling.scalar_question`).
        guard_student: the student folder that measures `cfg.guards` (None: the backbone's own folder, which must
            then be a local causal LM).
        people_encoder: the encoder the people's score reads (`reward.people`; None: no people's score).
        feature_cache: a folder where a frozen backbone's pooled state and the guard columns of each text are kept
            by content (`reward.feature_cache`), so texts read before are not read again.
        shipped_features: the project's shipped rows, read beside that cache (`feature_cache.SHIPPED_FEATURES`).
        device: where the frozen passes run (backbone, guards, the people's score's encoder; `core.lm.device`;
            None: the CPU); the heads are fitted on the CPU.
    """

    backbone: Path | str
    judge_system: str | None = None
    judge_question: str | None = None
    guard_student: Path | None = None
    people_encoder: Path | None = None
    feature_cache: Path | None = None
    shipped_features: Path | None = None
    device: Any = None


@dataclass
class PeopleSplit:
    """The human pairs as the heads read them, and those only the people's score reads."""

    heads: pd.DataFrame | None
    people_only: pd.DataFrame | None
    n_human: int  # pairs the heads read
    n_dimension_only: int  # of those, pairs about one dimension alone (a nudge's), not the scalar
    use_people: bool  # a people's score is fitted


@dataclass
class PreparedTraining:
    """Everything the heads' fits read; see the module's docstring."""

    cfg: RewardModelConfig
    sources: RewardSources
    dimensions: list[str]
    seed: int
    examples: pd.DataFrame
    people: PeopleSplit
    net: RewardNet
    tokenizer: Any
    kind: str  # encoder | decoder
    pooling: str
    frame: str | None  # the judge's frame the exchange is read in (None: prompt and reply as a pair)
    members: int
    data: TrainingSet
    train_groups: np.ndarray
    val_groups: np.ndarray
    rng: np.random.Generator  # drew the bootstrap; the gradient fit draws its batches from it next
    seq_boot: torch.Tensor  # (sequence, member) bootstrap weights
    guard_student: Path | None
    guards: torch.Tensor | None = None  # the columns beside the backbone's state: the guards, then the people's score
    people_score: PeopleScore | None = None
    people_column: np.ndarray | None = None
    frozen: torch.Tensor | None = None  # a frozen backbone's pooled features of every sequence
    cache_hits: dict[str, int] = field(default_factory=dict)
    rationale_head: nn.Linear | None = None
    rationale_targets: torch.Tensor | None = None
    has_rationale: torch.Tensor | None = None

    @property
    def val_seqs(self) -> np.ndarray:
        return np.concatenate([self.data.groups[g] for g in self.val_groups])

    @property
    def val_pairs(self) -> np.ndarray:
        return self.data.pairs_within(self.val_seqs)

    @property
    def loss_weights(self) -> dict[str, float]:
        w = self.cfg.loss_weights
        return {"vector": w.vector, "scalar": w.scalar, "reward_intensity": w.intensity, "safety_score": w.safety}

    @property
    def pad(self) -> int:
        return pad_id(self.tokenizer)

    def predict(self, seqs: np.ndarray) -> dict[str, np.ndarray]:
        """Member-mean predictions for `seqs`, keyed like the heads."""
        net = self.net
        net.eval()
        out = {
            "vector": np.zeros((len(seqs), len(self.dimensions)), np.float32),
            **{k: np.zeros(len(seqs), np.float32) for k in HEAD_OUTPUTS[1:]},
        }
        with torch.inference_mode():
            if self.frozen is not None:
                mean, _ = member_mean_std(net.heads(self.frozen[torch.as_tensor(seqs)]))
                return {k: mean[k].numpy() for k in out}
            encoded = [self.data.encoded[i] for i in seqs]
            for pos, ids, mask in length_sorted_batches(encoded, self.cfg.batch_size, self.pad):
                columns = None if self.guards is None else self.guards[torch.as_tensor(seqs[pos])]
                mean, _ = member_mean_std(net(ids, mask, columns))
                for k in out:
                    out[k][pos] = mean[k].numpy()
        return out

    def predict_held_out(self) -> dict[str, np.ndarray]:
        """Member-mean predictions of the held-out sequences, indexed by sequence (zero elsewhere)."""
        val_seqs = self.val_seqs
        preds = self.predict(val_seqs)
        full = {k: np.zeros((len(self.data.encoded),) + v.shape[1:], np.float32) for k, v in preds.items()}
        for k in preds:
            full[k][val_seqs] = preds[k]
        return full

    def evaluate(self, full: dict[str, np.ndarray]) -> dict[str, Any]:
        """The held-out figures of predictions `full` (indexed by sequence): each head's error, each dimension's
        correlation with the labels, the order of the teacher's and people's pairs, and the validation loss."""
        data, weights = self.data, self.loss_weights
        val_seqs, val_pairs = self.val_seqs, self.val_pairs
        metrics: dict[str, Any] = {}
        lab = val_seqs[val_seqs < data.labeled]
        val_loss = 0.0
        if len(lab):
            rows = torch.as_tensor(lab)
            for k in weights:
                metrics[f"val_mse_{k}"] = float(((full[k][lab] - data.targets[k][rows].numpy()) ** 2).mean())
                val_loss += weights[k] * metrics[f"val_mse_{k}"]
            tv = data.targets["vector"][rows].numpy()
            for j, d in enumerate(self.dimensions):
                metrics[f"val_mse_dim_{d}"] = float(((full["vector"][lab, j] - tv[:, j]) ** 2).mean())
                metrics[f"val_pearson_{d}"] = pearson(full["vector"][lab, j], tv[:, j])
            metrics["val_pearson_scalar"] = pearson(full["scalar"][lab], data.targets["scalar"][rows].numpy())
        scalar_pairs = val_pairs[data.pair_scalar[val_pairs]]
        teacher, human = scalar_pairs[~data.pair_human[scalar_pairs]], scalar_pairs[data.pair_human[scalar_pairs]]
        metrics["val_pairwise_accuracy"] = pairwise_accuracy(data.pairs[teacher], full["scalar"])
        metrics["val_pairs"] = len(teacher)
        if self.people.n_human > self.people.n_dimension_only:
            metrics["val_human_accuracy"] = pairwise_accuracy(data.pairs[human], full["scalar"])
            metrics["val_human_pairs"] = len(human)
        if len(scalar_pairs):
            gap = full["scalar"][data.pairs[scalar_pairs, 0]] - full["scalar"][data.pairs[scalar_pairs, 1]]
            metrics["val_pair_nll"] = float(np.logaddexp(0.0, -self.cfg.pair_loss.scale * gap).mean())
            val_loss += self.cfg.pair_loss.weight * metrics["val_pair_nll"]
        metrics["val_loss"] = val_loss
        return metrics


def split_human_pairs(human_pairs: pd.DataFrame | None, cfg: RewardModelConfig, encoder: Path | None) -> PeopleSplit:
    """Human pairs whose `heads` column is False train the people's score only (and are dropped when there is no
    people's score); whether a people's score is fitted at all."""
    people_only = None
    if human_pairs is not None and "heads" in human_pairs and not human_pairs["heads"].all():
        people_only = human_pairs[~human_pairs["heads"].astype(bool)].reset_index(drop=True)
        human_pairs = human_pairs[human_pairs["heads"].astype(bool)].reset_index(drop=True)
        if encoder is None:
            log.info(
                "reward model: %d people's pairs are for the people's score only, which is off "
                "(reward_model.people_score.encoder: null); not read",
                len(people_only),
            )
            people_only = None
    n_human = 0 if human_pairs is None else len(human_pairs)
    n_dimension_only = (
        0
        if human_pairs is None or "scalar" not in human_pairs
        else int((~human_pairs["scalar"].fillna(True).astype(bool)).sum())
    )
    use_people = encoder is not None and cfg.head_fit == "ridge" and n_human - n_dimension_only >= MIN_PEOPLE_PAIRS
    if encoder is not None and not use_people:
        log.info(
            "reward model: no people's score (it needs head_fit ridge and at least %d people's pairs "
            "the heads read, got %d)",
            MIN_PEOPLE_PAIRS,
            n_human - n_dimension_only,
        )
    return PeopleSplit(human_pairs, people_only, n_human, n_dimension_only, use_people)


def _wrap_backbone(backbone: nn.Module, cfg: RewardModelConfig) -> nn.Module:
    """The backbone as it trains: frozen, or with LoRA on its projections (`backbone.finetune`)."""
    mode = cfg.backbone.finetune
    if mode == "frozen":
        backbone.requires_grad_(False)
    elif mode == "lora":
        from peft import LoraConfig, get_peft_model

        lc = cfg.backbone.lora
        try:
            backbone = get_peft_model(
                backbone,
                LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=lc.target_modules),
            )
        except ValueError as exc:
            raise ValueError(
                f"LoRA on the reward backbone failed ({exc}); set "
                "reward_model.backbone.lora.target_modules to its projection layers"
            ) from exc
    return backbone


def _judge_frame(cfg: RewardModelConfig, sources: RewardSources, tokenizer: Any) -> str | None:
    """The judge's frame the backbone reads each exchange in, or None (`backbone.frame: pair`)."""
    if cfg.backbone.frame not in ("judge", "judge_question"):
        return None
    asks = cfg.backbone.frame == "judge_question"
    if not sources.judge_system or (asks and not sources.judge_question):
        raise ValueError(
            f"reward_model.backbone.frame {cfg.backbone.frame} needs the judge's system text"
            + (" and its overall question" if asks else "")
            + " (RewardSources(judge_system=..., judge_question=...))"
        )
    return judge_frame(tokenizer, sources.judge_system, sources.judge_question if asks else None)


def _network(
    cfg: RewardModelConfig, sources: RewardSources, dimensions: list[str], use_people: bool
) -> tuple[RewardNet, Any, str, str, Path | None]:
    """(the network on its backbone, the tokenizer, the backbone's kind, its pooling, the guards' student)."""
    backbone, tokenizer = load_backbone(sources.backbone)
    kind = backbone_kind(backbone.config) if cfg.backbone.kind == "auto" else cfg.backbone.kind
    backbone = keep_layers(backbone, cfg.backbone.depth)
    pooling = cfg.backbone.pooling if cfg.backbone.pooling != "auto" else ("last" if kind == "decoder" else "mean")
    guard_student = sources.guard_student
    if cfg.guards and guard_student is None:
        if kind != "decoder" or not isinstance(sources.backbone, Path):
            raise ValueError(
                f"reward_model.guards {cfg.guards} are measured by a causal LM (the student) and the "
                f"backbone {sources.backbone} is not a local one: "
                "pass RewardSources(guard_student=...), or set reward_model.guards: []"
            )
        guard_student = sources.backbone
    net = RewardNet(
        _wrap_backbone(backbone, cfg),
        len(dimensions),
        members=cfg.uncertainty.members if cfg.uncertainty.method == "ensemble" else 1,
        pooling=pooling,
        dropout=cfg.dropout,
        length_feature=cfg.length_feature,
        layers=cfg.backbone.layers,
        guards=len(cfg.guards) + int(use_people),
        combined=cfg.head_fit == "ridge" and cfg.scalar == "combined",
    )
    return net, tokenizer, kind, pooling, guard_student


def _groups(cfg: RewardModelConfig, data: TrainingSet, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training prompt groups, held-out ones)."""
    if cfg.head_fit == "ridge":
        # Closed-form heads need no early stopping: they are fitted on every prompt, and their held-out
        # figures come from cross-validation over every prompt (ridge_out_of_fold), not from one split.
        prompts = len(np.unique(data.group_of[: data.labeled]))
        if prompts < 2:
            raise ValueError(
                "head_fit ridge needs labeled replies of at least 2 prompts to cross-validate, got "
                f"{data.labeled} replies of {prompts}; label more prompts"
            )
        train_groups = val_groups = np.arange(len(data.groups), dtype=np.int64)
    else:
        train_groups, val_groups = data.split(cfg.val_fraction, seed)
    if len(val_groups) == 0:
        raise ValueError("reward model validation split is empty: the data covers a single prompt; label more prompts")
    return train_groups, val_groups


def _rationale(prep: PreparedTraining) -> None:
    """The auxiliary head that predicts the embedding of the teacher's rationale (gradient fits only)."""
    cfg, data, examples = prep.cfg, prep.data, prep.examples
    if cfg.head_fit == "ridge" and cfg.rationale_weight > 0:
        log.warning(
            "head_fit ridge fits the heads to the teacher's labels and people's pairs: the rationale "
            "target is not used"
        )
    if cfg.rationale_weight > 0 and cfg.head_fit == "gradient" and data.labeled and "rationale" in examples:
        texts = list(examples["rationale"].fillna(""))
        prep.rationale_targets = _rationale_targets(prep.net, prep.tokenizer, texts, cfg.max_length, cfg.batch_size)
        has_rationale = torch.zeros(len(data.encoded), dtype=torch.bool)  # per sequence: human replies have none
        has_rationale[: data.labeled] = torch.tensor(
            examples["rationale"].fillna("").str.strip().astype(bool).to_numpy()
        )
        prep.has_rationale = has_rationale
        prep.rationale_head = nn.Linear(prep.net.feature_size, prep.rationale_targets.shape[1])


def _columns_and_features(prep: PreparedTraining, seed: int) -> None:
    """The guard columns and the people's score beside the backbone's state, and a frozen backbone's pooled
    features: none changes during training (the student is not trained here), so each is computed once."""
    cfg, sources, data = prep.cfg, prep.sources, prep.data
    scorer = None
    if cfg.guards:
        scorer = GuardScorer(
            cfg.guards,
            prep.guard_student,
            cache=sources.feature_cache,
            shipped=sources.shipped_features,
            device=sources.device,
        )
    guards = scorer(*zip(*data.texts)) if scorer is not None else None
    if prep.people.use_people:
        prep.people_score, prep.people_column = fit_people_score(
            sources.people_encoder,
            cfg,
            sources.feature_cache,
            data,
            prep.people.people_only,
            seed,
            sources.device,
            shipped=sources.shipped_features,
        )
        column = torch.from_numpy(prep.people_column[: len(data.texts)]).float().unsqueeze(1)
        guards = column if guards is None else torch.cat([guards, column], 1)
    prep.guards = guards
    pooled_cache = _pooled_cache(prep)
    if cfg.backbone.finetune == "frozen":
        net = prep.net.to(sources.device or "cpu")
        prep.frozen = _pooled_all(net, data.encoded, cfg.batch_size, prep.pad, guards, cache=pooled_cache)
    prep.net.cpu()  # the backbone's one pass on `device`; the heads are fitted on the CPU
    guard_cache = scorer.disk_cache() if scorer is not None else None
    if guard_cache is not None and guard_cache.shipped:
        log.info(
            "reward model guards: %d of %d replies read from the cache or the %d rows shipped with the project",
            guard_cache.hits,
            len(data.texts),
            guard_cache.shipped,
        )
    prep.cache_hits = {
        f"feature_cache_{name}_hits": c.hits
        for name, c in (("pooled", pooled_cache), ("guards", guard_cache))
        if c is not None
    }


def _pooled_cache(prep: PreparedTraining) -> Any:
    """The on-disk cache of a frozen local backbone's pooled states, or None."""
    cfg, sources, net = prep.cfg, prep.sources, prep.net
    folder, backbone = sources.feature_cache, sources.backbone
    if folder is None or cfg.backbone.finetune != "frozen" or not isinstance(backbone, Path) or not backbone.is_dir():
        return None
    from hominem_pipeline.core.reward.feature_cache import FeatureCache

    namespace = pooled_namespace(
        backbone, prep.kind, prep.pooling, net.backbone.config.num_hidden_layers, net.layers, cfg.length_feature
    )
    return FeatureCache(folder, namespace, net.feature_size - net.guards, shipped=sources.shipped_features)


def prepare_training(
    examples: pd.DataFrame,
    human_pairs: pd.DataFrame | None,
    *,
    sources: RewardSources,
    cfg: RewardModelConfig,
    dimensions: list[str],
    seed: int,
) -> PreparedTraining:
    """Load the backbone, build the network and the training set, and compute what stays fixed while the heads
    are fitted (see the module's docstring)."""
    people = split_human_pairs(human_pairs, cfg, sources.people_encoder)
    if len(examples) < 4 and people.n_human < 4:
        raise ValueError(
            "reward model training needs at least 4 labeled examples or 4 human pairs, got "
            f"{len(examples)} and {people.n_human}; label more trajectories"
        )
    if len(examples) == 0:
        examples = pd.DataFrame(columns=EXAMPLE_COLUMNS)
    torch.manual_seed(seed)
    net, tokenizer, kind, pooling, guard_student = _network(cfg, sources, dimensions, people.use_people)
    frame = _judge_frame(cfg, sources, tokenizer)
    net.shared_prefix = frame_prefix(tokenizer, frame, kind)
    encoder = make_encoder(tokenizer, frame, cfg.max_length)
    data = TrainingSet.build(encoder, examples, people.heads, dimensions, cfg)
    train_groups, val_groups = _groups(cfg, data, seed)
    rng = np.random.default_rng(seed)
    boot = torch.tensor(_bootstrap(len(data.groups), net.members, rng))
    prep = PreparedTraining(
        cfg=cfg,
        sources=sources,
        dimensions=dimensions,
        seed=seed,
        examples=examples,
        people=people,
        net=net,
        tokenizer=tokenizer,
        kind=kind,
        pooling=pooling,
        frame=frame,
        members=net.members,
        data=data,
        train_groups=train_groups,
        val_groups=val_groups,
        rng=rng,
        seq_boot=boot[torch.as_tensor(data.group_of)],
        guard_student=guard_student,
    )
    _rationale(prep)
    _columns_and_features(prep, seed)
    return prep
