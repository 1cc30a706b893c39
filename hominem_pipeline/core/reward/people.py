"""The people's score: what people prefer, learned from their pairs alone, read by the reward model's
heads as one more column (`reward_model.people_score`).

The heads read the judge's network, which costs a pass of the student per text: reading thousands of
long human conversations that way every first day is out of reach on a CPU, and a few hundred pairs
teach it little (its agreement with people grows slowly with their number). A small frozen sentence
encoder (MiniLM, 6 layers) reads the same texts about 30 times faster, and a kernel model of its
states learns people's pairs better than the heads do. So every people's pair (shipped, imported,
given as feedback) trains this score, and the scalar reads it beside the heads.

The features of an exchange are the encoder's mean state after each layer, over the whole exchange
and over the reply's tokens alone, standardised and cut to their main principal directions. The score
of a reply is `f(x) = sum_j c_j exp(-|x - x_j|^2 / s)` over the pairs' replies x_j (a Gaussian kernel,
expanded on at most PEOPLE_LANDMARKS of them, Nystroem); a pair asks `f(chosen) - f(rejected)` to be 1
(weighted least squares), with the kernel's width s and the ridge penalty chosen by agreement over
folds of the people's prompts. The heads are fitted on the same pairs, so for the replies of a pair
the weight of the score in the scalar reads the score of a model fitted without that pair's prompt
(out of fold, `fit`): otherwise the score would look better than it is on a new reply.

The standardisation and principal directions (`Projection`) are fitted on the pairs' replies, unless the
project ships one for the encoder (`ship_projection`, fitted on every shipped pair's replies, with their
rows read through it): a fresh clone's first fit then reads those rows instead of the encoder.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.reward.kernel import (
    as_stored,
    choose_landmarks,
    expand,
    kernel,
    nystroem_map,
    pair_folds,
    principal,
    solve,
    solve_each,
    squared_distances,
)

if TYPE_CHECKING:
    import pandas as pd

    from hominem_pipeline.core.config import RewardModelConfig
    from hominem_pipeline.core.reward.dataset import TrainingSet

log = logging.getLogger(__name__)

PEOPLE_FILE = "people_score.safetensors"  # in a reward model's folder: the score's standardisation and coefficients
PEOPLE_ALPHAS = (0.1, 0.3, 1.0, 3.0, 10.0)  # ridge penalties tried (on the kernel's features, whose squared norm is 1)
PEOPLE_GAMMAS = (0.5, 1.0, 2.0)  # kernel widths tried: k(a, b) = exp(-gamma |a - b|^2 / median squared distance)
PEOPLE_COMPONENTS = 256  # principal directions of the standardised states the kernel reads
PEOPLE_LANDMARKS = 4000  # training replies the kernel is expanded on, at most (the rest are sampled)
PEOPLE_FOLDS = 5
PEOPLE_BATCH = 32
PROJECTION_PART = "projection"  # a shipped projection's file: <the encoder's namespace digest>-projection.safetensors
PROJECTION_ROWS = "people"  # the shipped rows read through it: <the projected namespace's digest>-people.npz
INVARIANCE_ROWS = "invariance"  # the invariance pairs' texts' rows read through it: <that digest>-invariance.npz
CACHE_ROWS = 20_000  # the encoder's states of this many texts kept on disk (a row is 18 kB for MiniLM)


def _pair_segments(ids: torch.Tensor, sep: int, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) 1 on the reply's tokens (after the first separator), 0 elsewhere and on padding."""
    first = (ids == sep).int().argmax(1, keepdim=True)
    return (torch.arange(ids.shape[1]).unsqueeze(0) > first).long() * mask


class EncoderStates:
    """Per (prompt, reply): the encoder's mean state after each layer over the whole exchange, then the
    same over the reply's tokens ((n, 2 * layers * hidden) float32), as `[CLS] prompt [SEP] reply [SEP]`
    cut to `max_length` (the prompt from the left). With a cache folder, every exchange read is kept on
    disk by content (`feature_cache`), for the next day."""

    def __init__(self, encoder: Path | str, max_length: int, cache: Path | None = None, device: Any = None):
        self.encoder, self.max_length, self.cache_folder, self.device = Path(encoder), max_length, cache, device
        self._model: Any = None
        self._tokenizer: Any = None
        self._cache: Any = None

    @cached_property
    def width(self) -> int:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.encoder)
        return 2 * config.num_hidden_layers * config.hidden_size

    def load(self) -> None:
        if self._model is None:
            from transformers import AutoModel, AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.encoder)
            self._model = AutoModel.from_pretrained(self.encoder).eval()
            if self.device is not None:
                self._model = self._model.to(self.device)

    @cached_property
    def namespace(self) -> list:
        """What decides a row: the encoder's files and the tokens it reads."""
        from hominem_pipeline.core.pipeline.artifacts import folder_digest

        return ["people", folder_digest(self.encoder), self.max_length]

    def disk_cache(self):
        if self.cache_folder is not None and self._cache is None:
            from hominem_pipeline.core.reward.feature_cache import FeatureCache

            self._cache = FeatureCache(self.cache_folder, self.namespace, self.width, max_rows=CACHE_ROWS)
        return self._cache

    def projection_file(self, shipped: Path) -> Path:
        """Where a project ships the projection for this encoder and length (`hominem data ship-features`)."""
        from hominem_pipeline.core.pipeline.artifacts import fingerprint

        return Path(shipped) / f"{fingerprint(self.namespace, 16)}-{PROJECTION_PART}.safetensors"

    def projected_cache(self, projection: Projection, shipped: Path | None = None):
        """The on-disk cache of rows read through `projection`, with the project's shipped ones (needs a cache
        folder)."""
        from hominem_pipeline.core.reward.feature_cache import FeatureCache

        return FeatureCache(
            self.cache_folder,
            [*self.namespace, "projected", projection.digest()],
            projection.basis.shape[1],
            max_rows=CACHE_ROWS,
            shipped=shipped,
        )

    def projected(
        self, prompts: Sequence[str], replies: Sequence[str], projection: Projection, shipped: Path | None = None
    ) -> np.ndarray:
        """`projection` of the states of each (prompt, reply): with a cache folder, the rows the project
        ships (`shipped`) or the cache holds are read, the rest measured (their full states cached as
        `__call__` caches them)."""
        from hominem_pipeline.core.reward.feature_cache import cached_rows, text_key

        def measure(todo: list[int]) -> np.ndarray:
            return projection(self([prompts[i] for i in todo], [replies[i] for i in todo]).numpy())

        keys = [text_key(p, r) for p, r in zip(prompts, replies)]
        cache = self.projected_cache(projection, shipped) if self.cache_folder is not None else None
        return cached_rows(cache, keys, measure, projection.basis.shape[1]).numpy().astype(np.float64)

    def __call__(self, prompts: Sequence[str], replies: Sequence[str]) -> torch.Tensor:
        from hominem_pipeline.core.reward.feature_cache import cached_rows, text_key

        keys = [text_key(p, r) for p, r in zip(prompts, replies)]
        return cached_rows(
            self.disk_cache(),
            keys,
            lambda todo: self._measure([prompts[i] for i in todo], [replies[i] for i in todo]),
            self.width,
        )

    def _measure(self, prompts: Sequence[str], replies: Sequence[str]) -> torch.Tensor:
        from hominem_pipeline.core.reward.encoding import (
            encode_pair,
            length_sorted_batches,
        )

        self.load()
        tok, model = self._tokenizer, self._model
        encoded = [encode_pair(tok, p, r, self.max_length) for p, r in zip(prompts, replies)]
        out = torch.zeros(len(encoded), self.width)
        progress = (
            Progress("people's score encoder", len(encoded), log, unit="replies") if len(encoded) > 512 else None
        )
        with torch.inference_mode():
            for idx, ids, mask in length_sorted_batches(encoded, PEOPLE_BATCH, tok.pad_token_id):
                reply = _pair_segments(ids, tok.sep_token_id, mask)
                ids, mask, reply = ids.to(model.device), mask.to(model.device), reply.to(model.device)
                states = model(
                    input_ids=ids, attention_mask=mask, token_type_ids=reply, output_hidden_states=True
                ).hidden_states[1:]
                parts = []
                for weights in (mask, reply):
                    w = weights.unsqueeze(-1).float()
                    parts += [(h * w).sum(1) / w.sum(1).clamp(min=1) for h in states]
                out[idx] = torch.cat(parts, 1).cpu()
                if progress:
                    progress.advance(len(idx))
        return out


@dataclass
class Projection:
    """How the score reads the encoder's states: standardised (`mean`, `std`), then cut to the `basis`'
    principal directions of the people's pairs' replies, where the kernel measures distances."""

    mean: np.ndarray
    std: np.ndarray
    basis: np.ndarray  # (width, components)

    def __call__(self, states: torch.Tensor | np.ndarray) -> np.ndarray:
        return ((np.asarray(states, dtype=np.float64) - self.mean) / self.std) @ self.basis

    @classmethod
    def fit(cls, states: np.ndarray, components: int = PEOPLE_COMPONENTS) -> Projection:
        """From the states of the pairs' replies, one row each."""
        x = np.asarray(states, dtype=np.float64)
        mean, std = x.mean(0), x.std(0)
        std = np.where(std > 1e-6, std, 1.0)
        sv, directions = principal((x - mean) / std, top=components)
        keep = min(components, int((sv > 1e-6 * sv[0]).sum()))
        return cls(mean, std, as_stored(directions[:, :keep]))

    def digest(self) -> str:
        import hashlib

        return hashlib.sha256(
            b"".join(np.ascontiguousarray(a, dtype=np.float64).tobytes() for a in (self.mean, self.std, self.basis))
        ).hexdigest()[:16]

    def save(self, path: Path) -> None:
        from safetensors.numpy import save_file

        save_file({"mean": self.mean, "std": self.std, "basis": self.basis.astype(np.float32)}, str(path))
        Path(path).chmod(0o644)  # a file the project ships, readable as its other files are

    @classmethod
    def load(cls, path: Path) -> Projection:
        from safetensors.numpy import load_file

        saved = load_file(str(path))
        return cls(
            saved["mean"].astype(np.float64), saved["std"].astype(np.float64), saved["basis"].astype(np.float64)
        )


@dataclass(frozen=True)
class PairSet:
    """The pairs a people's score learns: `pairs` (p, 2) rows of the states (chosen, rejected), each pair's
    weight, its group (its prompt: a fold keeps a group together), its target gap (`targets`: 1, the chosen
    a unit ahead, by default; 0, the two equal) and whether it is a people's pair (`people`, all by
    default): only those count in the agreement and fit the projection; the others are invariance pairs
    (`core.reward.invariance`), grouped with the pair they were made from."""

    pairs: np.ndarray
    weights: np.ndarray
    groups: np.ndarray
    targets: np.ndarray | None = None
    people: np.ndarray | None = None

    @property
    def target_gaps(self) -> np.ndarray:
        return np.ones(len(self.pairs)) if self.targets is None else np.asarray(self.targets, dtype=np.float64)

    @property
    def counted(self) -> np.ndarray:
        return np.ones(len(self.pairs), dtype=bool) if self.people is None else np.asarray(self.people, dtype=bool)


@dataclass
class PeopleScore:
    """The fitted score: the states' standardisation and principal directions, the training replies
    there (the kernel's landmarks), and their coefficients. `basis` None: a linear score (`coef` over
    the standardised states), as saved before the kernel."""

    mean: np.ndarray
    std: np.ndarray
    coef: np.ndarray
    alpha: float
    agreement: float  # out-of-fold share of people's pairs ordered as they chose (at `alpha`, `scale`)
    pairs: int
    basis: np.ndarray | None = None  # (width, components)
    landmarks: np.ndarray | None = None  # (landmarks, components)
    scale: float = 1.0  # the kernel's squared-distance scale: k(a, b) = exp(-|a - b|^2 / scale)

    def project(self, states: torch.Tensor | np.ndarray) -> np.ndarray:
        x = (np.asarray(states, dtype=np.float64) - self.mean) / self.std
        return x if self.basis is None else x @ self.basis

    def __call__(self, states: torch.Tensor | np.ndarray) -> np.ndarray:
        z = self.project(states)
        if self.landmarks is None:
            return z @ self.coef
        return expand(z, self.landmarks, self.scale, self.coef)

    @classmethod
    def fit(
        cls, states: np.ndarray, data: PairSet, seed: int, components: int = PEOPLE_COMPONENTS, **settings: Any
    ) -> tuple[PeopleScore, np.ndarray]:
        """Fit on `data` (pairs of rows of `states`), reading the states through the projection fitted on
        the people's pairs' rows. Returns the score and every row's value: out of fold for the rows of a pair
        (from the fit without its fold, at the chosen width and penalty), the full fit's elsewhere.
        `settings`: as `fit_projected`'s."""
        cls._check_pairs(data, settings.get("folds", PEOPLE_FOLDS))
        x = np.asarray(states, dtype=np.float64)
        projection = Projection.fit(x[np.unique(data.pairs[data.counted])], components)
        return cls.fit_projected(projection, projection(x), data, seed, **settings)

    @staticmethod
    def _check_pairs(data: PairSet, folds: int) -> None:
        if int(data.counted.sum()) < 2 * folds:
            raise ValueError(
                f"the people's score needs at least {2 * folds} people's pairs, got {int(data.counted.sum())}; "
                "add pairs "
                "(reward_model.people_pairs, `hominem data import-preferences`) or set "
                "reward_model.people_score.encoder: null"
            )

    @classmethod
    def fit_projected(
        cls,
        projection: Projection,
        z: np.ndarray,
        data: PairSet,
        seed: int,
        alphas: Sequence[float] = PEOPLE_ALPHAS,
        gammas: Sequence[float] = PEOPLE_GAMMAS,
        folds: int = PEOPLE_FOLDS,
        landmarks: int = PEOPLE_LANDMARKS,
    ) -> tuple[PeopleScore, np.ndarray]:
        """`fit` on states already read through `projection` (`z`, e.g. a shipped projection's rows). The
        kernel's width and the penalty are those that order most of the people's pairs' weight right out of
        fold; an invariance pair is left out of its group's fold, as a people's pair is, and never counted."""
        cls._check_pairs(data, folds)
        pairs, targets, counted = data.pairs, data.target_gaps, data.counted
        z = np.asarray(z, dtype=np.float64)
        used = np.unique(pairs)
        rng = np.random.default_rng(seed)
        marks = choose_landmarks(np.unique(pairs[counted]), np.setdiff1d(used, pairs[counted]), landmarks, rng)
        centres = as_stored(z[marks])
        some = centres[rng.choice(len(centres), min(len(centres), 1000), replace=False)]
        median = float(np.median(squared_distances(some, some)[np.triu_indices(len(some), 1)]))
        w = np.asarray(data.weights, dtype=np.float64)
        which = pair_folds(np.asarray(data.groups), folds, seed)
        pos = np.searchsorted(used, pairs)  # pair -> rows of `used`
        right: dict[
            tuple[float, float], float
        ] = {}  # (gamma, alpha) -> weight of the pairs ordered right, out of fold
        best: tuple[Any, ...] | None = (
            None  # the chosen (gamma, alpha)'s Nystroem map, pair features and out-of-fold values
        )
        for gamma in gammas:
            # Nystroem features of the kernel on the landmarks: phi(a) . phi(b) = k(a, b) wherever a or b
            # is a landmark; a pair's features are their difference
            to_coef = nystroem_map(centres, median / gamma)
            phi = kernel(z[used], centres, median / gamma) @ to_coef
            d = phi[pos[:, 0]] - phi[pos[:, 1]]
            oof = {a: np.zeros(len(used)) for a in alphas}
            right.update({(gamma, a): 0.0 for a in alphas})
            for k in np.unique(which[counted]):
                fit, held = which != k, (which == k) & counted
                for a, b in zip(alphas, solve_each(d[fit], w[fit], alphas, targets[fit])):
                    right[gamma, a] += float((w[held] * ((d[held] @ b) > 0)).sum())
                    rows = pos[held].ravel()
                    oof[a][rows] = phi[rows] @ b
            # ties: the wider kernel (smaller gamma) and the larger penalty, the smoother score
            alpha = max(alphas, key=lambda a: (right[gamma, a], a))
            if best is None or right[gamma, alpha] > right[best[0], best[1]]:
                best = (gamma, alpha, to_coef, d, oof[alpha])
        gamma, alpha, to_coef, d, held_values = best
        score = cls(
            projection.mean,
            projection.std,
            to_coef @ solve(d, w, alpha, targets),
            float(alpha),
            right[gamma, alpha] / float(w[counted].sum()),
            int(counted.sum()),
            basis=projection.basis,
            landmarks=centres,
            scale=median / gamma,
        )
        values = np.zeros(len(z))
        values[used] = held_values
        # rows of no people's pair: the full fit's values (the people's pairs' are out of fold)
        others = np.setdiff1d(np.arange(len(z)), np.unique(pairs[counted]))
        values[others] = expand(z[others], centres, score.scale, score.coef)
        log.info(
            "people's score: %d pairs (and %d invariance pairs), %d landmarks in %d dimensions, kernel width "
            "%g x median, penalty %g, out-of-fold agreement %.1f%% (%s)",
            int(counted.sum()),
            int((~counted).sum()),
            len(centres),
            z.shape[1],
            1 / gamma,
            alpha,
            100 * score.agreement,
            ", ".join(f"{g:g}/{a:g}: {100 * r / w[counted].sum():.1f}%" for (g, a), r in right.items()),
        )
        return score, values

    def save(self, folder: Path) -> None:
        from safetensors.numpy import save_file

        tensors = {
            "mean": self.mean,
            "std": self.std,
            "coef": self.coef,
        }  # float64: the values the heads were fitted on
        if self.basis is not None:
            tensors |= {
                "basis": self.basis.astype(np.float32),
                "landmarks": self.landmarks.astype(np.float32),
                "scale": np.array([self.scale]),
            }
        save_file(tensors, str(Path(folder) / PEOPLE_FILE))

    @classmethod
    def load(cls, folder: Path, alpha: float, agreement: float, pairs: int) -> PeopleScore:
        from safetensors.numpy import load_file

        saved = load_file(str(Path(folder) / PEOPLE_FILE))
        kernel = {}
        if "basis" in saved:
            kernel = {
                "basis": saved["basis"].astype(np.float64),
                "landmarks": saved["landmarks"].astype(np.float64),
                "scale": float(saved["scale"][0]),
            }
        return cls(
            saved["mean"].astype(np.float64),
            saved["std"].astype(np.float64),
            saved["coef"].astype(np.float64),
            alpha,
            agreement,
            pairs,
            **kernel,
        )


def fit_people_score(
    encoder: Path,
    cfg: RewardModelConfig,
    cache: Path | None,
    data: TrainingSet,
    people_only: pd.DataFrame | None,
    seed: int,
    device: Any = None,
    shipped: Path | None = None,
) -> tuple[PeopleScore, np.ndarray]:
    """The people's score fitted on every people's pair (the heads' and `people_only`), and its value
    for each of the training set's texts (out of fold for a pair's replies), then the people-only texts'.
    With a projection shipped for this encoder in `shipped` (`ship_projection`), the states are read
    through it, and the rows it ships for the shipped pairs are not measured again; without one, the
    projection is fitted on the pairs' replies here."""
    texts = list(data.texts)
    overall = data.pair_human & data.pair_scalar  # a nudge's pair is about one dimension, not what people prefer
    hp, hw = data.pairs[overall], data.pair_weight[overall]
    groups = [f"heads:{g}" for g in data.group_of[hp[:, 0]]]
    pairs, weights = [hp], [hw]
    if people_only is not None and len(people_only):
        start = len(texts)
        texts += [(p, r) for p, r in zip(people_only["prompt"], people_only["chosen"])] + [
            (p, r) for p, r in zip(people_only["prompt"], people_only["rejected"])
        ]
        n = len(people_only)
        pairs.append(np.stack([start + np.arange(n), start + n + np.arange(n)], 1))
        weights.append(
            people_only["weight"].to_numpy(np.float64) * cfg.pair_loss.human_weight
            if "weight" in people_only
            else np.full(n, cfg.pair_loss.human_weight)
        )
        groups += [f"prompt:{p}" for p in people_only["prompt"]]
    pairs, weights, groups = np.concatenate(pairs), np.concatenate(weights), np.array(groups)
    texts, pair_set = _with_invariance(texts, PairSet(pairs, weights, groups), cfg.people_score.invariance)
    reader = EncoderStates(encoder, cfg.people_score.max_length, cache=cache, device=device)
    prompts, replies = [p for p, _ in texts], [r for _, r in texts]
    if shipped is not None and (path := reader.projection_file(shipped)).is_file():
        projection = Projection.load(path)
        log.info("people's score: the states read through the projection shipped in %s", path)
        return PeopleScore.fit_projected(
            projection, reader.projected(prompts, replies, projection, shipped), pair_set, seed
        )
    return PeopleScore.fit(reader(prompts, replies).numpy(), pair_set, seed)


def _with_invariance(
    texts: list[tuple[str, str]], data: PairSet, settings: Any
) -> tuple[list[tuple[str, str]], PairSet]:
    """`texts` with the invariance pairs' made texts after them, and `data` with those pairs
    (`core.reward.invariance`, made from the chosen replies of its pairs); both as they are when
    `settings.sources` is 0. The pairs depend on the texts alone (not on the day's seed), so the rows the
    project ships for them are read every day."""
    from hominem_pipeline.core.reward.invariance import invariance_pairs

    if settings.sources == 0:
        return texts, data
    made = invariance_pairs([p for p, _ in texts], [r for _, r in texts], data.pairs[:, 0], settings.sources)
    start = len(texts)
    group_of = dict(zip(data.pairs[:, 0].tolist(), data.groups.tolist()))
    weights = np.where(made.targets > 0, settings.degenerate_weight, settings.rewrite_weight)
    log.info(
        "people's score: %d invariance pairs from %d chosen replies (%s)",
        len(made),
        len(set(made.pairs[:, 0].tolist())),
        ", ".join(f"{k} {made.kinds.count(k)}" for k in dict.fromkeys(made.kinds)),
    )
    return texts + made.texts, PairSet(
        np.concatenate([data.pairs, np.stack([made.pairs[:, 0], start + made.pairs[:, 1]], 1)]),
        np.concatenate([data.weights, weights]),
        np.concatenate([data.groups, [group_of[s] for s in made.pairs[:, 0].tolist()]]),
        np.concatenate([data.target_gaps, made.targets]),
        np.concatenate([data.counted, np.zeros(len(made), dtype=bool)]),
    )


def ship_projection(
    encoder: Path, max_length: int, cache: Path, texts: Sequence[tuple[str, str]], shipped: Path
) -> tuple[Path, Path, int, int]:
    """Fit the projection on the states of `texts` (the replies of the people's pairs a project ships,
    each exchange once) and write it to `shipped` with their rows read through it, so that a fresh
    clone's first people's score neither measures those texts nor fits the projection. Returns (the
    projection's file, the rows' file, rows, rows the encoder read now: the rest came from the cache)."""
    from hominem_pipeline.core.reward.feature_cache import text_key

    reader = EncoderStates(encoder, max_length, cache=cache)
    texts = list(dict.fromkeys(texts))
    prompts, replies = [p for p, _ in texts], [r for _, r in texts]
    projection = Projection.fit(reader(prompts, replies).numpy())
    measured = reader.disk_cache().misses
    path = reader.projection_file(shipped)
    path.parent.mkdir(parents=True, exist_ok=True)
    projection.save(path)
    projection = Projection.load(path)  # as a clone reads it: the basis stored in float32
    reader.projected(prompts, replies, projection)  # measured into the cache
    keys = [text_key(p, r) for p, r in texts]
    return path, reader.projected_cache(projection).ship(keys, shipped, PROJECTION_ROWS), len(keys), measured


def ship_invariance_rows(
    encoder: Path,
    max_length: int,
    cache: Path,
    projection_file: Path,
    chosen: Sequence[tuple[str, str]],
    sources: int,
    shipped: Path,
) -> tuple[Path, int, int]:
    """Write to `shipped` the projected rows of the texts the invariance pairs make from `chosen` (the shipped
    people's pairs' prompts and chosen replies), as `fit_people_score` makes them with `sources`
    (`reward_model.people_score.invariance`), read through the shipped projection: a fresh clone's first
    people's score then reads them instead of running the encoder on them. Returns (the file, rows, rows the
    encoder read now: the rest came from the cache)."""
    from hominem_pipeline.core.reward.feature_cache import text_key
    from hominem_pipeline.core.reward.invariance import invariance_pairs

    made = invariance_pairs([p for p, _ in chosen], [r for _, r in chosen], range(len(chosen)), sources)
    reader = EncoderStates(encoder, max_length, cache=cache)
    projection = Projection.load(projection_file)
    reader.projected([p for p, _ in made.texts], [r for _, r in made.texts], projection)
    keys = [text_key(p, r) for p, r in made.texts]
    measured = reader.disk_cache().misses
    return reader.projected_cache(projection).ship(keys, shipped, INVARIANCE_ROWS), len(keys), measured


def people_scalar_weight(human_oof: np.ndarray, column: np.ndarray, pairs: np.ndarray, weights: np.ndarray) -> float:
    """The weight w of the people's score in the scalar (atanh(heads' scalar) + w * score) that people's
    pairs, read out of fold by both, favour: a logistic fit of the pair's choice on the two gaps (no
    intercept, a small penalty), w = the score's coefficient over the heads'. Never below 0."""
    gap_heads = np.arctanh(np.clip(human_oof[:, 0], -1 + 1e-6, 1 - 1e-6)) - np.arctanh(
        np.clip(human_oof[:, 1], -1 + 1e-6, 1 - 1e-6)
    )
    gap_people = column[pairs[:, 0]] - column[pairs[:, 1]]
    x = np.stack([gap_heads, gap_people], 1)
    w = np.asarray(weights, dtype=np.float64)
    beta = np.zeros(2)
    for _ in range(50):  # Newton's method on the penalised log-likelihood of "chosen over rejected"
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        grad = x.T @ (w * (1 - p)) - 1e-3 * beta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + 1e-3 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.abs(step).max() < 1e-8:
            break
    heads, people = beta
    if people <= 0:
        return 0.0
    return float(people / heads) if heads > 1e-3 else float(people / 1e-3)


def with_people(human_oof: np.ndarray, column: np.ndarray, pairs: np.ndarray, weight: float) -> np.ndarray:
    """Per pair: the gap chosen - rejected of atanh(heads' scalar) + weight * people's score."""
    pre = np.arctanh(np.clip(human_oof, -1 + 1e-6, 1 - 1e-6))
    return pre[:, 0] - pre[:, 1] + weight * (column[pairs[:, 0]] - column[pairs[:, 1]])
