"""Training the multi-head reward model.

The backbone is any HF encoder (mean pooling) or decoder (last-token pooling), fine-tuned fully, with
LoRA (merged before saving) or frozen. Each head has `members` outputs: a small deep ensemble on the
shared backbone, each member trained on its own bootstrap weights of the prompts, whose spread is the
model's uncertainty (or MC dropout: several stochastic passes at scoring time).

Training minimises, per member, the regression losses on the teacher's labels plus a Bradley-Terry
loss on the scalar over same-prompt teacher pairs and human pairs (and, optionally, an auxiliary loss
predicting the embedding of the teacher's rationale), with early stopping on a validation split held
out by prompt; or, with `head_fit: ridge`, solves the heads in closed form on the frozen backbone's
features. Pairwise preferences are then calibrated by temperature scaling.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.common.schema import (
    INTENSITY_RANGE,
    SAFETY_RANGE,
    SCALAR_RANGE,
    VECTOR_RANGE,
    vector_matrix,
)
from hominem_pipeline.core.common.stats import pearson
from hominem_pipeline.core.config import RewardModelConfig
from hominem_pipeline.core.lm.model_refs import model_name
from hominem_pipeline.core.pipeline.artifacts import folder_digest
from hominem_pipeline.core.reward.combination import (
    ScalarCombination,
    fit_scalar_combination,
)
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
    pad_batch,
    pad_id,
)
from hominem_pipeline.core.reward.guards import GuardScorer
from hominem_pipeline.core.reward.metadata import RewardMetadata
from hominem_pipeline.core.reward.model import BACKBONE_DIR, HEADS
from hominem_pipeline.core.reward.network import (
    RewardNet,
    backbone_kind,
    keep_layers,
    load_backbone,
    member_mean_std,
    write_backbone_reference,
)
from hominem_pipeline.core.reward.people import (
    fit_people_score,
    people_scalar_weight,
    with_people,
)
from hominem_pipeline.core.reward.ridge import (
    PAIR_PULLS,
    RIDGE_FOLDS,
    choose_dimension_pull,
    choose_ridge_alpha,
    label_folds,
    pair_rows,
    pull_dimensions,
    ridge_design,
    ridge_out_of_fold_pulls,
    ridge_solve,
    ridge_targets,
    set_ridge_heads,
    standardise,
    vectors_out_of_fold,
    with_column,
)
from hominem_pipeline.core.reward.validation import _pct, calibrate_validation

log = logging.getLogger(__name__)

HEAD_OUTPUTS = ("vector", "scalar", "reward_intensity", "safety_score")
MIN_PEOPLE_PAIRS = 10  # people's pairs the heads read, at least, for a people's score (its weight is fitted on them)
FEW_VAL_PAIRS = 30  # fewer teacher pairs than this in the validation split: its accuracy is mostly the split's luck


def _wrap_backbone(backbone: nn.Module, cfg: RewardModelConfig) -> nn.Module:
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


def _unwrap_backbone(backbone: nn.Module) -> nn.Module:
    """The plain backbone to save: LoRA merged into the weights, so loading needs no PEFT."""
    return backbone.merge_and_unload() if hasattr(backbone, "merge_and_unload") else backbone


def _combine(
    net: RewardNet,
    full: dict[str, np.ndarray],
    data: TrainingSet,
    labeled: np.ndarray,
    people_column: np.ndarray | None,
    dimensions: list[str],
) -> tuple[ScalarCombination, dict[str, float]]:
    """The combined scalar (`reward.combination`) fitted on every pair's replies read out of fold (`full`'s
    vector, the people's score without the pair's fold), set in `net`; `full`'s scalar becomes its
    out-of-fold value. Also its weights as metrics."""
    n = len(data.encoded)
    people = None if people_column is None else people_column[:n]
    combination = fit_scalar_combination(
        full["vector"].astype(np.float64),
        people,
        data.pairs,
        data.pair_weight * data.pair_scalar,
        data.pair_human,
        labeled,
        data.targets["scalar"][torch.as_tensor(labeled)].numpy().astype(np.float64),
    )
    with torch.no_grad():
        net.scalar_weights.copy_(combination.as_tensor())
    full["scalar"] = combination(full["vector"], people).astype(np.float32)
    log.info(
        "reward model: the scalar is tanh(%s + %.3g people's score %+.3g) (fitted out of fold on %d "
        "people's pairs and %d of the judge's)",
        " + ".join(f"{c:.3g} {d}" for d, c in zip(dimensions, combination.weights)),
        combination.people,
        combination.intercept,
        int((data.pair_human & data.pair_scalar).sum()),
        int((~data.pair_human).sum()),
    )
    return combination, {
        **{f"scalar_weight_{d}": float(c) for d, c in zip(dimensions, combination.weights)},
        "scalar_weight_people": combination.people,
    }


def train_reward_model(
    examples: pd.DataFrame,
    *,
    dimensions: list[str],
    backbone_path: Path | str,
    cfg: RewardModelConfig,
    out_dir: Path,
    seed: int,
    data_digest: str,
    date: str,
    human_pairs: pd.DataFrame | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    judge_system: str | None = None,
    judge_question: str | None = None,
    guard_student: Path | None = None,
    feature_cache: Path | None = None,
    shipped_features: Path | None = None,
    device: Any = None,
    people_encoder: Path | None = None,
) -> dict[str, Any]:
    """Train on labeled examples (columns prompt_id, prompt, response, vector, scalar, reward_intensity,
    safety_score, rationale) and optional human pairs (prompt, chosen, rejected); save the model to
    `out_dir`. Returns the final metrics. `judge_system`: the judge's system text, which `frame: judge`
    needs (`teacher.rubric_system`); `judge_question`: the question `frame: judge_question` asks after
    the exchange (`labeling.scalar_question`); `guard_student`: the student folder that measures
    `cfg.guards` (`reward.guards`; None: the backbone's own folder, a causal LM); `feature_cache`: a folder
    where a frozen backbone's pooled state and the guard columns of each text are kept by content
    (`reward.feature_cache`), so texts read before (the shipped people's pairs, every day) are not read again;
    `shipped_features`: the project's shipped rows, read beside that cache (`feature_cache.SHIPPED_FEATURES`);
    `device`: where the frozen passes run (backbone, guards, the people's score's encoder; `core.lm.device`;
    None: the CPU), the heads' fit staying on the CPU;
    `people_encoder`: the encoder the people's score reads (`reward.people`; None: no people's score). Human
    pairs whose `heads` column is False train the people's score only."""
    from safetensors.torch import save_file

    people_only = None
    if human_pairs is not None and "heads" in human_pairs and not human_pairs["heads"].all():
        people_only = human_pairs[~human_pairs["heads"].astype(bool)].reset_index(drop=True)
        human_pairs = human_pairs[human_pairs["heads"].astype(bool)].reset_index(drop=True)
        if people_encoder is None:
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
    use_people = (
        people_encoder is not None and cfg.head_fit == "ridge" and n_human - n_dimension_only >= MIN_PEOPLE_PAIRS
    )
    if people_encoder is not None and not use_people:
        log.info(
            "reward model: no people's score (it needs head_fit ridge and at least %d people's pairs "
            "the heads read, got %d)",
            MIN_PEOPLE_PAIRS,
            n_human - n_dimension_only,
        )
    if len(examples) < 4 and n_human < 4:
        raise ValueError(
            "reward model training needs at least 4 labeled examples or 4 human pairs, got "
            f"{len(examples)} and {n_human}; label more trajectories"
        )
    if len(examples) == 0:
        examples = pd.DataFrame(columns=["prompt_id", "prompt", "response", "vector", *HEAD_OUTPUTS[1:], "rationale"])
    torch.manual_seed(seed)
    backbone, tokenizer = load_backbone(backbone_path)
    kind = backbone_kind(backbone.config) if cfg.backbone.kind == "auto" else cfg.backbone.kind
    backbone = keep_layers(backbone, cfg.backbone.depth)
    pooling = cfg.backbone.pooling if cfg.backbone.pooling != "auto" else ("last" if kind == "decoder" else "mean")
    members = cfg.uncertainty.members if cfg.uncertainty.method == "ensemble" else 1
    if cfg.guards and guard_student is None:
        if kind != "decoder" or not isinstance(backbone_path, Path):
            raise ValueError(
                f"reward_model.guards {cfg.guards} are measured by a causal LM (the student) and the "
                f"backbone {backbone_path} is not a local one: "
                "pass train_reward_model(guard_student=...), or set reward_model.guards: []"
            )
        guard_student = backbone_path
    combined = cfg.head_fit == "ridge" and cfg.scalar == "combined"
    net = RewardNet(
        _wrap_backbone(backbone, cfg),
        len(dimensions),
        members=members,
        pooling=pooling,
        dropout=cfg.dropout,
        length_feature=cfg.length_feature,
        layers=cfg.backbone.layers,
        guards=len(cfg.guards) + int(use_people),
        combined=combined,
    )
    frame = None
    if cfg.backbone.frame in ("judge", "judge_question"):
        if not judge_system or (cfg.backbone.frame == "judge_question" and not judge_question):
            raise ValueError(
                f"reward_model.backbone.frame {cfg.backbone.frame} needs the judge's system text"
                + (" and its overall question" if cfg.backbone.frame == "judge_question" else "")
                + " (train_reward_model(judge_system=..., judge_question=...))"
            )
        frame = judge_frame(
            tokenizer, judge_system, judge_question if cfg.backbone.frame == "judge_question" else None
        )
    net.shared_prefix = frame_prefix(tokenizer, frame, kind)
    data = TrainingSet.build(make_encoder(tokenizer, frame, cfg.max_length), examples, human_pairs, dimensions, cfg)
    if cfg.head_fit == "ridge":
        # Closed-form heads need no early stopping: they are fitted on every prompt, and their held-out
        # figures come from cross-validation over every prompt (ridge_out_of_fold), not from one split.
        if len(np.unique(data.group_of[: data.labeled])) < 2:
            raise ValueError(
                "head_fit ridge needs labeled replies of at least 2 prompts to cross-validate, got "
                f"{len(examples)} replies of "
                f"{len(np.unique(data.group_of[: data.labeled]))}; label more prompts"
            )
        train_groups = val_groups = np.arange(len(data.groups), dtype=np.int64)
    else:
        train_groups, val_groups = data.split(cfg.val_fraction, seed)
    if len(val_groups) == 0:
        raise ValueError("reward model validation split is empty: the data covers a single prompt; label more prompts")
    rng = np.random.default_rng(seed)
    boot = torch.tensor(_bootstrap(len(data.groups), members, rng))
    seq_boot = boot[torch.as_tensor(data.group_of)]  # (sequence, member)
    val_seqs = np.concatenate([data.groups[g] for g in val_groups])
    val_pairs = data.pairs_within(val_seqs)

    rationale_head = None
    if cfg.head_fit == "ridge" and cfg.rationale_weight > 0:
        log.warning(
            "head_fit ridge fits the heads to the teacher's labels and people's pairs: the rationale "
            "target is not used"
        )
    if cfg.rationale_weight > 0 and cfg.head_fit == "gradient" and data.labeled and "rationale" in examples:
        rationale_targets = _rationale_targets(
            net, tokenizer, list(examples["rationale"].fillna("")), cfg.max_length, cfg.batch_size
        )
        has_rationale = torch.zeros(len(data.encoded), dtype=torch.bool)  # per sequence: human replies have none
        has_rationale[: data.labeled] = torch.tensor(
            examples["rationale"].fillna("").str.strip().astype(bool).to_numpy()
        )
        rationale_head = nn.Linear(net.feature_size, rationale_targets.shape[1])

    # The guard columns never change (the student is not trained here), and a frozen backbone gives every
    # sequence the same pooled vector in every epoch: both computed once.
    scorer = (
        GuardScorer(cfg.guards, guard_student, cache=feature_cache, shipped=shipped_features, device=device)
        if cfg.guards
        else None
    )
    guards = scorer(*zip(*data.texts)) if scorer is not None else None
    people = people_column = None
    if use_people:
        people, people_column = fit_people_score(
            people_encoder, cfg, feature_cache, data, people_only, seed, device, shipped=shipped_features
        )
        column = torch.from_numpy(people_column[: len(data.texts)]).float().unsqueeze(1)
        guards = column if guards is None else torch.cat([guards, column], 1)
    pooled_cache = None
    if (
        feature_cache is not None
        and cfg.backbone.finetune == "frozen"
        and isinstance(backbone_path, Path)
        and backbone_path.is_dir()
    ):
        from hominem_pipeline.core.reward.feature_cache import FeatureCache

        pooled_cache = FeatureCache(
            feature_cache,
            pooled_namespace(
                backbone_path, kind, pooling, backbone.config.num_hidden_layers, net.layers, cfg.length_feature
            ),
            net.feature_size - net.guards,
            shipped=shipped_features,
        )
    frozen = (
        None
        if cfg.backbone.finetune != "frozen"
        else _pooled_all(
            net.to(device or "cpu"), data.encoded, cfg.batch_size, pad_id(tokenizer), guards, cache=pooled_cache
        )
    )
    net.cpu()  # the backbone's one pass on `device`; the heads are fitted on the CPU
    guard_cache = scorer.disk_cache() if scorer is not None else None
    if guard_cache is not None and guard_cache.shipped:
        log.info(
            "reward model guards: %d of %d replies read from the cache or the %d rows shipped with the project",
            guard_cache.hits,
            len(data.texts),
            guard_cache.shipped,
        )
    cached = {
        f"feature_cache_{name}_hits": c.hits
        for name, c in (("pooled", pooled_cache), ("guards", guard_cache))
        if c is not None
    }
    head_params = [p for n, p in net.named_parameters() if not n.startswith("backbone.")] + (
        list(rationale_head.parameters()) if rationale_head else []
    )
    backbone_params = [p for p in net.backbone.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        ([{"params": backbone_params, "lr": cfg.learning_rate}] if backbone_params else [])
        + [{"params": head_params, "lr": cfg.head_learning_rate}],
        weight_decay=cfg.weight_decay,
    )
    w = cfg.loss_weights
    weights = {"vector": w.vector, "scalar": w.scalar, "reward_intensity": w.intensity, "safety_score": w.safety}
    pad = pad_id(tokenizer)

    def regression_losses(seqs: torch.Tensor, heads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per head: the bootstrap-weighted squared error over the batch's labeled sequences and members."""
        labeled = seqs < data.labeled
        if not labeled.any():
            return {}
        rows, bw = seqs[labeled], seq_boot[seqs[labeled]]  # bw: (b, M)
        out = {}
        for k in weights:
            err = (heads[k][labeled] - data.targets[k][rows].unsqueeze(1)) ** 2
            if k == "vector":
                err = err.mean(-1)
            out[k] = (err * bw).sum() / bw.sum().clamp(min=1e-6)
        return out

    def pair_loss(seqs: np.ndarray, scalar: torch.Tensor, vector: torch.Tensor | None = None) -> torch.Tensor | None:
        """Bradley-Terry: -log sigmoid(scale * (s_preferred - s_other)), per member, weighted. With `vector`
        (b, M, D): the same on each tagged people's pair's own dimension instead of the scalar."""
        which = data.pairs_within(seqs)
        if vector is not None:
            which = which[data.pair_dimension[which] >= 0]
            scalar = vector[..., torch.as_tensor(data.pair_dimension[which])] if len(which) else scalar
        else:
            which = which[data.pair_scalar[which]]  # a nudge's pair says nothing about the scalar
        if len(which) == 0:
            return None
        position = {s: i for i, s in enumerate(seqs.tolist())}
        first = torch.tensor([position[s] for s in data.pairs[which, 0]])
        second = torch.tensor([position[s] for s in data.pairs[which, 1]])
        pw = (
            torch.tensor(data.pair_weight[which], dtype=torch.float32).unsqueeze(1)
            * seq_boot[torch.as_tensor(data.pairs[which, 0])]
        )
        if vector is not None:  # (b, M, pairs) -> each pair's own dimension on its two rows: (pairs, M)
            columns = torch.arange(len(which))
            logits = cfg.pair_loss.scale * (scalar[first, :, columns] - scalar[second, :, columns])
        else:
            logits = cfg.pair_loss.scale * (scalar[first] - scalar[second])
        return (nn.functional.softplus(-logits) * pw).sum() / pw.sum().clamp(min=1e-6)

    def predict(seqs: np.ndarray) -> dict[str, np.ndarray]:
        """Member-mean predictions for `seqs`, keyed like the heads."""
        net.eval()
        out = {
            "vector": np.zeros((len(seqs), len(dimensions)), np.float32),
            **{k: np.zeros(len(seqs), np.float32) for k in HEAD_OUTPUTS[1:]},
        }
        with torch.inference_mode():
            if frozen is not None:
                mean, _ = member_mean_std(net.heads(frozen[torch.as_tensor(seqs)]))
                return {k: mean[k].numpy() for k in out}
            for pos, ids, mask in length_sorted_batches([data.encoded[i] for i in seqs], cfg.batch_size, pad):
                mean, _ = member_mean_std(
                    net(ids, mask, None if guards is None else guards[torch.as_tensor(seqs[pos])])
                )
                for k in out:
                    out[k][pos] = mean[k].numpy()
        return out

    def predict_val() -> dict[str, np.ndarray]:
        """Member-mean validation predictions, indexed by sequence (zero elsewhere)."""
        preds = predict(val_seqs)
        full = {k: np.zeros((len(data.encoded),) + v.shape[1:], np.float32) for k, v in preds.items()}
        for k in preds:
            full[k][val_seqs] = preds[k]
        return full

    def evaluate(full: dict[str, np.ndarray]) -> dict[str, Any]:
        metrics: dict[str, Any] = {}
        lab = val_seqs[val_seqs < data.labeled]
        val_loss = 0.0
        if len(lab):
            for k in weights:
                t = data.targets[k][torch.as_tensor(lab)].numpy()
                metrics[f"val_mse_{k}"] = float(((full[k][lab] - t) ** 2).mean())
                val_loss += weights[k] * metrics[f"val_mse_{k}"]
            tv = data.targets["vector"][torch.as_tensor(lab)].numpy()
            for j, d in enumerate(dimensions):
                metrics[f"val_mse_dim_{d}"] = float(((full["vector"][lab, j] - tv[:, j]) ** 2).mean())
                metrics[f"val_pearson_{d}"] = pearson(full["vector"][lab, j], tv[:, j])
            metrics["val_pearson_scalar"] = pearson(
                full["scalar"][lab], data.targets["scalar"][torch.as_tensor(lab)].numpy()
            )
        scalar_pairs = val_pairs[data.pair_scalar[val_pairs]]
        teacher, human = scalar_pairs[~data.pair_human[scalar_pairs]], scalar_pairs[data.pair_human[scalar_pairs]]
        metrics["val_pairwise_accuracy"] = pairwise_accuracy(data.pairs[teacher], full["scalar"])
        metrics["val_pairs"] = len(teacher)
        if n_human > n_dimension_only:
            metrics["val_human_accuracy"] = pairwise_accuracy(data.pairs[human], full["scalar"])
            metrics["val_human_pairs"] = len(human)
        if len(scalar_pairs):
            gap = full["scalar"][data.pairs[scalar_pairs, 0]] - full["scalar"][data.pairs[scalar_pairs, 1]]
            metrics["val_pair_nll"] = float(np.logaddexp(0.0, -cfg.pair_loss.scale * gap).mean())
            val_loss += cfg.pair_loss.weight * metrics["val_pair_nll"]
        metrics["val_loss"] = val_loss
        return metrics

    best_loss, best_state, best_epoch, stale = math.inf, None, 0, 0
    combination = None
    best_full: dict[str, np.ndarray] = {}
    best_metrics: dict[str, Any] = {}
    history = []
    if cfg.head_fit == "ridge":
        features = frozen[:, :-1] if use_people else frozen  # the people's score joins the scalar after the heads' fit
        labeled = np.arange(data.labeled)
        output_weights = torch.tensor(
            [w.vector / len(dimensions)] * len(dimensions) + [w.scalar, w.intensity, w.safety], dtype=torch.float64
        )
        hp = data.pairs[data.pair_human]  # people's pairs (rows of `frozen`), fitted by the scalar with the labels
        hw = data.pair_weight[data.pair_human]
        human = (hp, hw, data.group_of[hp[:, 0]]) if len(hp) else None
        overall = data.pair_scalar[
            data.pair_human
        ]  # the people's pairs about the reply overall (not a nudge's, about one dimension)
        # the scalar's view of them: a nudge's pair weighs 0 (the folds stay those of every people's pair)
        scalar_human = (hp, hw * overall, human[2]) if human and overall.any() else None
        pull, pull_accuracy, people_weights = 1.0, {}, {}
        hp_dims = data.pair_dimension[data.pair_human]  # the dimension each people's pair is tagged with (-1: none)
        # the labels' fit of each prompt fold, shared by the scalar's pulls, the dimensions' and the combination's
        fold_fits = (
            label_folds(
                features,
                data.targets,
                labeled,
                data.group_of[labeled],
                cfg.ridge_alphas,
                output_weights,
                seed,
                RIDGE_FOLDS,
                human[2] if human else None,
            )
            if human or combined
            else None
        )
        dim_pull, dimension_metrics = (
            choose_dimension_pull(
                features, data, labeled, cfg, output_weights, seed, human, hp_dims, dimensions, fold_fits
            )
            if human and cfg.dimension_pairs and (hp_dims >= 0).any()
            else (0.0, {})
        )
        if scalar_human and not combined:
            # How far people's pairs pull the scalar from the judge's: the scale of their weights whose
            # out-of-fold pairs people agree with most (ties: the smaller pull, nearer the judge). With a
            # people's score, each scale's scalar is read with the score at the weight fitted for it
            # (people_scalar_weight): the final scalar's agreement decides, not the heads' alone.
            trials = ridge_out_of_fold_pulls(
                features,
                data.targets,
                labeled,
                data.group_of[labeled],
                cfg.ridge_alphas,
                output_weights,
                seed,
                RIDGE_FOLDS,
                scalar_human,
                PAIR_PULLS,
                fold_fits,
            )
            for scale, (_, _, oof) in trials.items():
                if use_people:
                    people_weights[scale] = people_scalar_weight(oof[overall], people_column, hp[overall], hw[overall])
                    pull_accuracy[scale] = float(
                        (with_people(oof[overall], people_column, hp[overall], people_weights[scale]) > 0).mean()
                    )
                else:
                    pull_accuracy[scale] = float((oof[overall, 0] > oof[overall, 1]).mean())
            pull = max(PAIR_PULLS, key=lambda scale: (pull_accuracy[scale], -scale))
            log.info(
                "reward model ridge heads: people's pairs pull the scalar at scale %g (out-of-fold "
                "agreement with them %s)",
                pull,
                ", ".join(f"{k:g}: {v:.1%}" for k, v in pull_accuracy.items()),
            )
            held_out, fold_alphas, human_oof = trials[pull]
        else:
            held_out, fold_alphas, human_oof = ridge_out_of_fold_pulls(
                features,
                data.targets,
                labeled,
                data.group_of[labeled],
                cfg.ridge_alphas,
                output_weights,
                seed,
                RIDGE_FOLDS,
                None if combined else scalar_human,
                (1.0,),
                fold_fits,
            )[1.0]
        people_weight = 0.0
        if use_people and not combined:
            # The people's score's weight beside the heads' scalar: a two-weight logistic fit of people's
            # pairs, each read out of fold by both (the heads' scalar fitted without the pair's fold, the
            # score without its own), so neither looks better than it is on a new reply (above, per pull).
            people_weight = people_weights[pull]
            log.info(
                "reward model: the people's score weighs %.3g in the scalar (out-of-fold agreement with "
                "people's pairs: heads alone %.1f%%, "
                "with the score %.1f%%)",
                people_weight,
                100 * float((human_oof[overall, 0] > human_oof[overall, 1]).mean()),
                100 * float((with_people(human_oof[overall], people_column, hp[overall], people_weight) > 0).mean()),
            )
        standardise(net, frozen[torch.as_tensor(labeled)])
        if use_people:  # the score is read as it is (its own units), weighed in the scalar alone
            net.feature_mean[-1], net.feature_std[-1] = 0.0, 1.0
        mean, std = (
            (net.feature_mean[:-1], net.feature_std[:-1]) if use_people else (net.feature_mean, net.feature_std)
        )
        x, y = ridge_design(features, labeled, mean, std), ridge_targets(data.targets, labeled)
        alpha, errors = choose_ridge_alpha(x, y, data.group_of[labeled], cfg.ridge_alphas, output_weights, seed)
        for step, (a, err) in enumerate(errors.items(), 1):
            # the sweep under its own key: MLflow shows a metric's last step, and `ridge_alpha` is the chosen one
            history.append({"epoch": step, "ridge_alpha_tried": a, "ridge_cv_error": err})
            if on_epoch:
                on_epoch(step, {"ridge_alpha_tried": a, "ridge_cv_error": err})
        log.info(
            "reward model ridge heads: penalty %g chosen by %d-fold cross-validation over the prompts (errors %s)",
            alpha,
            RIDGE_FOLDS,
            ", ".join(f"{a:g}: {e:.4f}" for a, e in errors.items()),
        )
        hx = pair_rows(features, hp, mean, std) if human else None
        pull_scalar = (
            scalar_human is not None and not combined
        )  # a combined scalar is no head of its own: nothing to pull
        coefs = [
            ridge_solve(
                x,
                y,
                seq_boot[torch.as_tensor(labeled), m].double(),
                alpha,
                hx if pull_scalar else None,
                torch.as_tensor(hw * overall * pull, dtype=torch.float64)
                * seq_boot[torch.as_tensor(hp[:, 0]), m].double()
                if pull_scalar
                else None,
                len(dimensions),
            )
            for m in range(members)
        ]
        if dim_pull:  # each tagged dimension pulled toward its people's pairs, from the labels' solution
            tagged = hp_dims >= 0
            coefs = [
                pull_dimensions(
                    c,
                    hx[torch.as_tensor(tagged)],
                    torch.as_tensor(data.pair_weight[data.pair_human][tagged] * dim_pull, dtype=torch.float64)
                    * seq_boot[torch.as_tensor(hp[tagged, 0]), m].double(),
                    hp_dims[tagged],
                    alpha,
                )
                for m, c in enumerate(coefs)
            ]
        if use_people:  # one more row before the intercept: the score's weight in the scalar, 0 in every other head
            coefs = [with_column(c) for c in coefs]
            for c in coefs:
                c[-2, len(dimensions)] = people_weight
        set_ridge_heads(net, coefs)
        best_full = predict_val()  # every labeled reply and every human pair out of fold:
        d = len(dimensions)
        for j, k in enumerate(HEAD_OUTPUTS):
            best_full[k][labeled] = (held_out[:, :d] if k == "vector" else held_out[:, d + j - 1]).numpy()
        if scalar_human and not combined:
            best_full["scalar"][hp[:, 0]], best_full["scalar"][hp[:, 1]] = human_oof[:, 0], human_oof[:, 1]
        if (
            fold_fits is not None
        ):  # the vector out of fold as the saved heads pull it: labeled replies, people's pairs' replies
            vectors, pair_vectors = vectors_out_of_fold(
                features, labeled, human, hp_dims if dim_pull else None, dim_pull, fold_fits, d
            )
            best_full["vector"][labeled] = vectors
            if human:
                best_full["vector"][hp[:, 0]], best_full["vector"][hp[:, 1]] = pair_vectors[:, 0], pair_vectors[:, 1]
        combination, combination_metrics = None, {}
        if combined:  # the scalar from the vector and the people's score, both out of fold
            combination, combination_metrics = _combine(
                net, best_full, data, labeled, people_column if use_people else None, dimensions
            )
            people_weight = combination.people
        elif use_people:  # the out-of-fold scalars with the score added as the saved heads add it
            scalar = best_full["scalar"].astype(np.float64).clip(-1 + 1e-6, 1 - 1e-6)
            best_full["scalar"] = np.tanh(np.arctanh(scalar) + people_weight * people_column[: len(scalar)]).astype(
                np.float32
            )
        best_metrics = {
            "ridge_alpha": alpha,
            "ridge_fold_alphas": fold_alphas,
            **evaluate(best_full),
            **dimension_metrics,
            **combination_metrics,
            **(
                {"human_pull": pull, **{f"human_pull_{k:g}_accuracy": v for k, v in pull_accuracy.items()}}
                if scalar_human and not combined
                else {}
            ),
            **(
                {
                    "people_weight": people_weight,
                    "people_pairs": people.pairs,
                    "people_agreement": people.agreement,
                    "people_alpha": people.alpha,
                }
                if use_people
                else {}
            ),
        }
        log.info(
            "reward model ridge heads: out of fold (%d prompt folds) they order %s of %d teacher pairs",
            RIDGE_FOLDS,
            _pct(best_metrics["val_pairwise_accuracy"]),
            best_metrics["val_pairs"],
        )
        best_epoch = list(errors).index(alpha) + 1
        best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    epochs = cfg.epochs if cfg.head_fit == "gradient" else 0  # ridge: solved above
    steps_per_epoch = len(data.batches(train_groups, cfg.batch_size, np.random.default_rng(0)))
    progress = Progress("reward model training", epochs * steps_per_epoch, log, unit="steps") if epochs else None
    for epoch in range(1, epochs + 1):
        net.train()
        running: dict[str, float] = {}
        counts: dict[str, int] = {}
        for batch in data.batches(train_groups, cfg.batch_size, rng):
            seqs = torch.as_tensor(batch)
            pooled = (
                frozen[seqs]
                if frozen is not None
                else net.features(
                    *pad_batch([data.encoded[i] for i in batch], pad), None if guards is None else guards[seqs]
                )
            )
            heads = net.heads(pooled)
            parts = regression_losses(seqs, heads)
            loss = sum((weights[k] * v for k, v in parts.items()), torch.zeros(()))
            bt = pair_loss(batch, heads["scalar"])
            if bt is not None:
                parts["pair"] = bt
                loss = loss + cfg.pair_loss.weight * bt
            dim_bt = pair_loss(batch, heads["scalar"], heads["vector"]) if cfg.dimension_pairs else None
            if dim_bt is not None:  # tagged people's pairs on their own dimension, as the scalar's pairs
                parts["dimension_pair"] = dim_bt
                loss = loss + cfg.pair_loss.weight * dim_bt
            if rationale_head is not None:
                explained = has_rationale[seqs]
                if explained.any():
                    guess = rationale_head(net.dropout(pooled[explained]))
                    parts["rationale"] = (
                        1 - nn.functional.cosine_similarity(guess, rationale_targets[seqs[explained]], dim=-1)
                    ).mean()
                    loss = loss + cfg.rationale_weight * parts["rationale"]
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], 1.0)
            optimizer.step()
            for k, v in parts.items():
                running[k] = running.get(k, 0.0) + v.item() * len(batch)
                counts[k] = counts.get(k, 0) + len(batch)
            if progress:
                progress.advance(1, epoch=epoch, loss=f"{loss.item():.4f}")
        metrics = {("train_mse_" if k in weights else "train_loss_") + k: running[k] / counts[k] for k in running}
        full = predict_val()
        metrics.update(evaluate(full))
        history.append({"epoch": epoch, **metrics})
        log.info(
            "reward model epoch %d: val loss %.4f, teacher pair accuracy %s, human pair accuracy %s",
            epoch,
            metrics["val_loss"],
            _pct(metrics["val_pairwise_accuracy"]),
            _pct(metrics.get("val_human_accuracy")),
        )
        if on_epoch:
            on_epoch(epoch, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if metrics["val_loss"] < best_loss - 1e-6:
            best_loss, best_epoch, stale = metrics["val_loss"], epoch, 0
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
            best_full, best_metrics = full, {k: v for k, v in metrics.items() if not k.startswith("train_")}
        else:
            stale += 1
            if stale >= cfg.early_stopping_patience:
                log.info("early stopping after epoch %d (best epoch %d)", epoch, best_epoch)
                break
    if best_state is None:  # every epoch's validation loss was NaN
        raise ValueError(
            "reward model training diverged (validation loss is not finite); lower reward_model.learning_rate"
        )
    net.load_state_dict(best_state)
    full, final = best_full, best_metrics  # the best epoch's validation predictions and metrics
    fitted = len(data.encoded) if cfg.head_fit == "ridge" else int(sum(len(data.groups[g]) for g in train_groups))
    final.update(
        {
            "best_epoch": best_epoch,
            "epochs_run": len(history),
            "train_sequences": fitted,
            "val_sequences": len(val_seqs),
            **cached,
        }
    )
    validation = (
        f"out of fold: every prompt's replies scored by heads fitted on the other {RIDGE_FOLDS - 1} of "
        f"{RIDGE_FOLDS} prompt folds "
        "(penalty chosen inside them), and every human pair by heads fitted without its fold; the saved "
        "heads are fitted on every prompt and pair"
        if cfg.head_fit == "ridge"
        else f"split by prompt: {cfg.val_fraction:g} of the prompts (and of the human pairs) held out, for "
        "early stopping and these figures"
    )
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

    out_dir.mkdir(parents=True, exist_ok=True)
    calibration, calibration_metrics = calibrate_validation(
        data,
        val_seqs,
        val_pairs,
        full,
        list(examples["prompt_id"]),
        dimensions,
        out_dir,
        date,
        source="out-of-fold" if cfg.head_fit == "ridge" else "validation",
    )
    final.update(calibration_metrics)

    backbone = net.backbone = _unwrap_backbone(net.backbone)
    if cfg.backbone.finetune == "frozen":  # unchanged weights: referenced with their digest, not copied
        write_backbone_reference(out_dir / BACKBONE_DIR, backbone_path)
    else:
        backbone.save_pretrained(out_dir / BACKBONE_DIR)
        tokenizer.save_pretrained(out_dir / BACKBONE_DIR)
    save_file({k: v.contiguous() for k, v in net.head_state_dict().items()}, str(out_dir / HEADS))
    if people is not None:
        people.save(out_dir)
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
            "uncertainty": f"standard deviation of each output across {cfg.uncertainty.method}"
            + (
                f" ({members} members)"
                if cfg.uncertainty.method == "ensemble"
                else f" ({cfg.uncertainty.mc_samples} passes)"
                if cfg.uncertainty.method == "mc_dropout"
                else ""
            ),
        },
        "normalisation": (
            "heads read features standardised by the training split's mean and spread (feature_mean, "
            "feature_std in the heads file); "
            if cfg.head_fit == "ridge"
            else "none; "
        )
        + "heads are bounded to the label ranges (tanh for vector and scalar, sigmoid for intensity and safety)",
        "max_length": cfg.max_length,
        "backbone": {
            "source": model_name(backbone_path) if Path(backbone_path).is_dir() else str(backbone_path),
            "kind": kind,
            "pooling": pooling,
            "finetune": cfg.backbone.finetune,
            "depth": backbone.config.num_hidden_layers,
            "layers": None if net.layers is None else list(net.layers),
        },
        "frame": frame,
        "head_fit": cfg.head_fit,
        "validation": validation,
        "length_feature": cfg.length_feature,
        "guards": {
            "names": list(cfg.guards),
            "student": model_name(guard_student),
            "sha256": folder_digest(Path(guard_student)),
        }
        if cfg.guards
        else None,
        "people": {
            "encoder": model_name(people_encoder),
            "sha256": folder_digest(Path(people_encoder)),
            "max_length": cfg.people_score.max_length,
            "weight": people_weight,
            "alpha": people.alpha,
            "pairs": people.pairs,
            "agreement": people.agreement,
        }
        if people is not None
        else None,
        "scalar": combination.describe(dimensions) if combination is not None else None,
        "members": members,
        "dropout": cfg.dropout,
        "uncertainty": {"method": cfg.uncertainty.method, "mc_samples": cfg.uncertainty.mc_samples},  # members: above
        "losses": {
            "regression": weights,
            "pair": cfg.pair_loss.model_dump(),
            "rationale_weight": cfg.rationale_weight if rationale_head else 0.0,
        },
        "training_data_digest": data_digest,
        "date": date,
        "training_examples": len(examples),
        "human_pairs": n_human,
        "dimension_only_pairs": n_dimension_only,
        "calibration": calibration,
        "metrics": final,
        "history": history,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        "label_spread": dict(zip(dimensions, vector_matrix(examples["vector"], dimensions).std(0).tolist()))
        if len(examples) >= 2
        else None,
    }
    # through JSON first: numpy scalars in the metrics and calibration become plain numbers
    RewardMetadata.model_validate(json.loads(json.dumps(metadata, default=float))).write(out_dir)
    return final
