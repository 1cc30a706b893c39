"""The reward model as every later stage uses it: `RewardModel.load(path).score(prompts, responses)`.

A saved model is a folder: `backbone/` (HF `save_pretrained`, with its tokenizer; for a frozen backbone,
`backbone.json` naming the folder it was read from and its checksum instead), `heads.safetensors` and
`METADATA.json` (`reward.metadata.RewardMetadata`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hominem_pipeline.core.reward.encoding import (
    frame_prefix,
    length_sorted_batches,
    make_encoder,
    pad_id,
)
from hominem_pipeline.core.reward.guards import GuardScorer
from hominem_pipeline.core.reward.metadata import (
    METADATA,
    GuardInfo,
    PeopleInfo,
    RewardMetadata,
)
from hominem_pipeline.core.reward.network import (
    RewardNet,
    backbone_source,
    keep_layers,
    load_backbone,
    member_mean_std,
)
from hominem_pipeline.core.reward.people import EncoderStates, PeopleScore

HEADS = "heads.safetensors"


def _checked_folder(recorded: str, sha256: str, what: str) -> Path:
    """The folder a saved model's `what` reads: the one with the digest it had at training, wherever it is
    on this machine (`model_refs.find_model`)."""
    from hominem_pipeline.core.lm.model_refs import find_model

    return find_model(recorded, sha256, f"this reward model's {what}")


def guard_scorer(info: GuardInfo | None, device: Any = None) -> GuardScorer | None:
    """The scorer of a saved model's guard columns, from the student it was trained with (checked by digest)."""
    if info is None or not info.names:
        return None
    return GuardScorer(
        info.names, _checked_folder(info.student, info.sha256, "guards read the student"), device=device
    )


def people_reader(
    info: PeopleInfo | None, folder: Path, device: Any = None
) -> tuple[EncoderStates, PeopleScore] | None:
    """The encoder and the fitted people's score of a saved model (the encoder checked by digest)."""
    if info is None:
        return None
    source = _checked_folder(info.encoder, info.sha256, "people's score reads the encoder")
    return EncoderStates(source, info.max_length, device=device), PeopleScore.load(
        folder, info.alpha, info.agreement, info.pairs
    )


BACKBONE_DIR = "backbone"
MAX_CHARS = 100_000  # per prompt or response: far beyond any max_length, so longer input is a caller's mistake
MC_SEED = 0  # MC dropout masks are seeded so that the same inputs get the same uncertainty


@dataclass(frozen=True)
class RewardOutput:
    vector: dict[str, float]
    scalar: float
    reward_intensity: float
    safety_score: float
    # Standard deviation per output (each dimension, scalar, reward_intensity, safety_score) across the
    # ensemble members or MC dropout passes; all 0.0 for a model trained without an uncertainty method.
    uncertainty: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "vector": self.vector,
            "scalar": self.scalar,
            "reward_intensity": self.reward_intensity,
            "safety_score": self.safety_score,
            "uncertainty": self.uncertainty,
        }


def _check_inputs(prompts: Sequence[str], responses: Sequence[str]) -> None:
    if isinstance(prompts, str) or isinstance(responses, str):
        raise TypeError("score() takes lists of strings, not a single string; wrap it: score([prompt], [response])")
    if len(prompts) != len(responses):
        raise ValueError(
            f"score() got {len(prompts)} prompts but {len(responses)} responses; pass one prompt per response"
        )
    for i, (p, r) in enumerate(zip(prompts, responses)):
        if not isinstance(p, str) or not isinstance(r, str):
            raise TypeError(
                f"item {i}: prompt and response must be str, got {type(p).__name__} and {type(r).__name__}"
            )
        if not r.strip():
            raise ValueError(f"item {i}: the response is empty; there is nothing to score")
        for name, text in (("prompt", p), ("response", r)):
            if len(text) > MAX_CHARS:
                raise ValueError(
                    f"item {i}: the {name} is {len(text):,} characters, more than the {MAX_CHARS:,} score() accepts "
                    f"(the model reads at most its max_length tokens); pass one conversation turn, not a whole file"
                )


class RewardModel:
    """A trained reward model loaded for scoring."""

    def __init__(self, net: RewardNet, tokenizer: Any, metadata: RewardMetadata, device: Any = None):
        self.net = net.eval() if device is None else net.eval().to(device)
        self.device = next(self.net.parameters()).device
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.source: Path | None = None  # the folder it was loaded from (None: built in memory)
        self.dimensions: list[str] = list(metadata.dimensions)
        self.max_length: int = metadata.max_length
        self.uncertainty_method: str = metadata.uncertainty.method
        self.mc_samples: int = metadata.uncertainty.mc_samples
        self._encode = make_encoder(tokenizer, metadata.frame, self.max_length)
        self._guards = guard_scorer(metadata.guards, device)
        self._people: tuple[EncoderStates, PeopleScore] | None = (
            None  # set by `load` (the score's coefficients live in the folder)
        )
        self._pooled_cache: Any = None  # a frozen backbone's pooled rows by tokens (`use_feature_cache`)

    @classmethod
    def load(cls, path: str | Path, device: Any = None) -> RewardModel:
        """Load a saved model folder (`data/reward_model/<date>/<version>`), its networks on `device`
        (`core.lm.device`; None: the CPU); scores come back as CPU arrays either way."""
        from safetensors.torch import load_file

        path = Path(path)
        metadata = RewardMetadata.read(path)
        backbone, tokenizer = load_backbone(backbone_source(path))
        bb = metadata.backbone
        net = RewardNet(
            keep_layers(backbone, bb.depth),
            len(metadata.dimensions),
            members=metadata.members,
            pooling=bb.pooling,
            dropout=metadata.dropout,
            length_feature=metadata.length_feature,
            layers=bb.layers,
            guards=(0 if metadata.guards is None else len(metadata.guards.names)) + int(metadata.people is not None),
            combined=metadata.scalar is not None,
        )
        result = net.load_state_dict(load_file(str(path / HEADS)), strict=False)
        if result.unexpected_keys or any(not k.startswith("backbone.") for k in result.missing_keys):
            raise ValueError(
                f"{path / HEADS} does not match the model described by its {METADATA}: {result}; rebuild it "
                f"(hominem run --date {metadata.date} --select reward_model)"
            )
        net.shared_prefix = frame_prefix(tokenizer, metadata.frame, bb.kind)
        model = cls(net, tokenizer, metadata, device)
        model.source = path
        model._people = people_reader(metadata.people, path, device)
        return model

    @property
    def temperature(self) -> float:
        """The fitted preference temperature (1.0, uncalibrated, when training had no validation pairs)."""
        return self.metadata.temperature

    def probability(self, gap: float, dimension: str | None = None) -> float:
        """The calibrated probability that a reply is preferred over another whose score is `gap` lower:
        the scalar's gap (or, with `dimension`, that dimension's gap) through its fitted temperature."""
        from hominem_pipeline.core.reward.calibration import preference_probability

        if dimension is None:
            return float(preference_probability(gap, self.temperature))
        self._dimension_index(dimension)
        return float(preference_probability(gap, self.metadata.dimension_temperature(dimension)))

    def prefer(self, prompt: str, a: str, b: str, dimension: str | None = None) -> float:
        """The calibrated probability that response `a` is preferred over `b` for `prompt`: overall (by the
        scalar), or on one reward dimension (by its own fitted temperature)."""
        return self.probability(float(self.pair_gaps([prompt], [a], [b], dimension)[0]), dimension)

    def pair_gaps(
        self,
        prompts: Sequence[str],
        a: Sequence[str],
        b: Sequence[str],
        dimension: str | None = None,
        batch_size: int = 32,
    ) -> np.ndarray:
        """Score gap (a minus b) per pair, by the scalar or one dimension: positive where `a` is preferred."""
        if not len(prompts) == len(a) == len(b):
            raise ValueError(
                f"pair_gaps takes one prompt per pair: got {len(prompts)} prompts, {len(a)} a and {len(b)} b replies"
            )
        column = None if dimension is None else self._dimension_index(dimension)  # checked before scoring
        ps = list(prompts)
        raw = self.raw_scores(ps + ps, list(a) + list(b), batch_size)
        values = (raw["scalar"] if column is None else raw["vector"][:, column]).astype(
            np.float64
        )  # exact gaps of float32 scores
        return values[: len(ps)] - values[len(ps) :]

    def _dimension_index(self, dimension: str) -> int:
        if dimension not in self.dimensions:
            raise ValueError(f"unknown dimension {dimension!r}; this model has {', '.join(self.dimensions)}")
        return self.dimensions.index(dimension)

    def encode(self, prompts: Sequence[str], responses: Sequence[str]) -> list[list[int]]:
        return [self._encode(p, r) for p, r in zip(prompts, responses)]

    def use_feature_cache(self, folder: Path, shipped: Path | None = None) -> None:
        """Keep what the frozen networks compute for every exchange scored in `folder` by content
        (`reward.feature_cache`): the guard columns, the people's score's encoder states and a frozen
        backbone's pooled state, and read those computed before from it, or from the rows the project
        ships (`shipped`, read only). Training keys its rows alike: the day's replies it read are not read again."""
        from hominem_pipeline.core.reward.dataset import pooled_namespace
        from hominem_pipeline.core.reward.feature_cache import FeatureCache

        if self._guards is not None and self._guards.cache_folder is None:
            self._guards.cache_folder, self._guards.shipped = Path(folder), shipped
        if self._people is not None and self._people[0].cache_folder is None:
            self._people[0].cache_folder = Path(folder)
        bb = self.metadata.backbone
        if bb.finetune == "frozen" and self.source is not None and self._pooled_cache is None:
            from hominem_pipeline.core.reward.network import backbone_source

            namespace = pooled_namespace(
                backbone_source(self.source), bb.kind, bb.pooling, bb.depth, bb.layers, self.metadata.length_feature
            )
            self._pooled_cache = FeatureCache(
                Path(folder), namespace, self.net.feature_size - self.net.guards, shipped=shipped
            )

    def warm(self) -> None:
        """Load what scoring loads on first use (the student its guard columns read, the people's score's
        encoder), so the first score does not wait."""
        if self._guards is not None:
            self._guards.load()
        if self._people is not None:
            self._people[0].load()

    def people_column(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray | None:
        """The people's score of each exchange (`reward.people`); None for a model without one."""
        if self._people is None:
            return None
        reader, score = self._people
        return score(reader(prompts, responses))

    @property
    def has_people_score(self) -> bool:
        return self._people is not None

    def people_features(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray | None:
        """What the people's score reads of each exchange: the encoder's states through its projection (n,
        components), the features the question picker's posterior is over (`attune.posterior`); None for a model
        without a people's score."""
        if self._people is None:
            return None
        _check_inputs(prompts, responses)
        reader, score = self._people
        return score.project(reader(prompts, responses))

    def guard_columns(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor | None:
        """The columns the heads read beside the backbone: the guards (`reward.guards`), then the people's
        score (`reward.people`), (n, columns); None without either."""
        columns = [] if self._guards is None else [self._guards(prompts, responses)]
        if self._people is not None:
            columns.append(torch.from_numpy(self.people_column(prompts, responses)).float().unsqueeze(1))
        return torch.cat(columns, 1) if columns else None

    def _mc_passes(
        self, net: RewardNet, ids: torch.Tensor, mask: torch.Tensor, guards: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """Standard deviation of `net`'s member-mean outputs over `mc_samples` passes with dropout on."""
        dropouts = [m for m in net.modules() if isinstance(m, nn.Dropout)]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(MC_SEED)
            for m in dropouts:
                m.train()
            try:
                samples = [member_mean_std(net(ids, mask, guards))[0] for _ in range(self.mc_samples)]
            finally:
                for m in dropouts:
                    m.eval()
        return {k: torch.stack([s[k] for s in samples]).std(0, unbiased=False) for k in samples[0]}

    def raw_scores(
        self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32, uncertainty: bool = False
    ) -> dict[str, Any]:
        """Head outputs as arrays: vector (n, D), scalar, reward_intensity, safety_score (n,); with
        `uncertainty`, also "std": the same keys holding standard deviations."""
        _check_inputs(prompts, responses)
        net = self.net
        n = len(prompts)
        shapes = {"vector": (n, len(self.dimensions)), "scalar": (n,), "reward_intensity": (n,), "safety_score": (n,)}
        out: dict[str, Any] = {k: np.zeros(s, dtype=np.float32) for k, s in shapes.items()}
        std = {k: np.zeros(s, dtype=np.float32) for k, s in shapes.items()}
        guards = self.guard_columns(prompts, responses)
        if self._pooled_cache is not None and not (uncertainty and self.uncertainty_method == "mc_dropout"):
            from hominem_pipeline.core.reward.dataset import _pooled_all

            # a frozen backbone's states, read once per text: the heads on the cached features equal the whole net's
            # pass
            pooled = _pooled_all(
                net,
                self.encode(prompts, responses),
                batch_size,
                pad_id(self.tokenizer),
                guards,
                cache=self._pooled_cache,
            )
            with torch.inference_mode():
                mean, spread = member_mean_std(net.heads(pooled.to(self.device)))
            out = {k: mean[k].float().cpu().numpy() for k in shapes}
            if uncertainty:
                out["std"] = {k: spread[k].float().cpu().numpy() for k in shapes}
            return out
        with torch.inference_mode():
            for idx, ids, mask in length_sorted_batches(
                self.encode(prompts, responses), batch_size, pad_id(self.tokenizer)
            ):
                ids, mask = ids.to(self.device), mask.to(self.device)
                rows = None if guards is None else guards[idx].to(self.device)
                mean, spread = member_mean_std(net(ids, mask, rows))
                if uncertainty and self.uncertainty_method == "mc_dropout":
                    spread = self._mc_passes(net, ids, mask, rows)
                for key in shapes:
                    out[key][idx] = mean[key].float().cpu().numpy()
                    std[key][idx] = spread[key].float().cpu().numpy()
        if uncertainty:
            out["std"] = std
        return out

    def pooled(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """What the heads read: the backbone's pooled features of each exchange, then its guard columns.
        Models on one frozen backbone, frame and guards read the same features, so several can score
        one pooled set (`scalar_from_pooled`) without reading the texts again."""
        from hominem_pipeline.core.reward.dataset import _pooled_all

        _check_inputs(prompts, responses)
        return _pooled_all(
            self.net,
            self.encode(prompts, responses),
            batch_size,
            pad_id(self.tokenizer),
            self.guard_columns(prompts, responses),
            cache=self._pooled_cache,
        )

    def heads_from_pooled(self, pooled: torch.Tensor) -> dict[str, np.ndarray]:
        """Every head's output (the members' mean) on `pooled` features, keyed as `raw_scores`."""
        with torch.inference_mode():
            return {
                k: v.float().cpu().numpy()
                for k, v in member_mean_std(self.net.heads(pooled.to(self.device)))[0].items()
            }

    def people_from_pooled(self, pooled: torch.Tensor) -> np.ndarray | None:
        """The people's score of each row of `pooled` features (the last guard column); None without one."""
        return None if self._people is None else pooled[:, -1].double().cpu().numpy()

    def scalar_from_pooled(self, pooled: torch.Tensor) -> np.ndarray:
        """The scalar (the members' mean) of these heads on `pooled` features."""
        return self.heads_from_pooled(pooled)["scalar"]

    def score(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32) -> list[RewardOutput]:
        raw = self.raw_scores(prompts, responses, batch_size, uncertainty=True)
        std = raw["std"]
        results = []
        for i in range(len(prompts)):
            spread = {d: float(std["vector"][i, j]) for j, d in enumerate(self.dimensions)}
            spread.update({k: float(std[k][i]) for k in ("scalar", "reward_intensity", "safety_score")})
            results.append(
                RewardOutput(
                    vector={d: float(raw["vector"][i, j]) for j, d in enumerate(self.dimensions)},
                    scalar=float(raw["scalar"][i]),
                    reward_intensity=float(raw["reward_intensity"][i]),
                    safety_score=float(raw["safety_score"][i]),
                    uncertainty=spread,
                )
            )
        return results


def score_side(reward_model: RewardModel, prompts: Sequence[str], responses: Sequence[str]) -> dict[str, np.ndarray]:
    """Reward-model outputs for one side; an empty response gets NaN (it cannot be scored, and loses)."""
    n, dims = len(prompts), reward_model.dimensions
    out = {
        "vector": np.full((n, len(dims)), np.nan),
        "scalar": np.full(n, np.nan),
        "reward_intensity": np.full(n, np.nan),
        "safety_score": np.full(n, np.nan),
    }
    keep = [i for i, r in enumerate(responses) if r.strip()]
    if keep:
        raw = reward_model.raw_scores([prompts[i] for i in keep], [responses[i] for i in keep])
        for key in out:
            out[key][keep] = raw[key]
    return out


def project_reward_model(path: str | Path, cfg: Any) -> RewardModel:
    """The reward model at `path` as the project's stages, gate and commands score with it: on the device
    `runtime.device` names, with the project's feature cache in use (`RewardModel.use_feature_cache`), so
    a reply scored once (by the evaluation, say) is not read by the frozen networks again (by the health
    index or the gate)."""
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.reward.feature_cache import (
        FEATURE_CACHE,
        SHIPPED_FEATURES,
    )

    model = RewardModel.load(path, resolve_device(cfg.runtime.device))
    model.use_feature_cache(cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES))
    return model
