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


def _solve(d: np.ndarray, w: np.ndarray, alpha: float) -> np.ndarray:
    """argmin_b sum_p w_p (d_p b - 1)^2 + alpha |b|^2, in whichever of the primal (features) or dual
    (pairs) forms is smaller."""
    return _solve_each(d, w, [alpha])[0]


def _solve_each(d: np.ndarray, w: np.ndarray, alphas: Sequence[float]) -> list[np.ndarray]:
    """`_solve` for each penalty in `alphas`, the Gram matrix formed once."""
    a = d * np.sqrt(w)[:, None]
    y = np.sqrt(w)
    if len(a) < a.shape[1]:
        gram = a @ a.T
        return [a.T @ np.linalg.solve(gram + alpha * np.eye(len(a)), y) for alpha in alphas]
    gram, rhs = a.T @ a, a.T @ y
    return [np.linalg.solve(gram + alpha * np.eye(a.shape[1]), rhs) for alpha in alphas]


def _principal(x: np.ndarray, top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(singular values, right singular vectors as columns) of `x`, largest first (the `top` largest
    only, when given): the SVD's, from the eigendecomposition of the smaller Gram matrix (x'x or xx'),
    a few times faster than the SVD itself, and faster again when only the top ones are computed."""
    from scipy.linalg import eigh

    small = x.T @ x if x.shape[0] >= x.shape[1] else x @ x.T
    n = len(small)
    subset = None if top is None or top >= n else [n - top, n - 1]
    lam, vec = eigh(
        small, subset_by_index=subset, driver="evr" if subset else "evd", overwrite_a=True, check_finite=False
    )
    lam, vec = lam[::-1], vec[:, ::-1]
    sv = np.sqrt(np.clip(lam, 0.0, None))
    if x.shape[0] >= x.shape[1]:
        return sv, vec
    nonzero = sv > 1e-12 * max(sv[0], 1e-300)
    return sv[nonzero], (x.T @ vec[:, nonzero]) / sv[nonzero]


def _nystroem_map(centres: np.ndarray, scale: float) -> np.ndarray:
    """The (landmarks, landmarks) matrix M of the Nystroem features phi(x) = k(x, L) M, for which
    phi(a) . phi(b) = k(a, L) K^-1 k(L, b) with K = k(L, L): M = C^-T for the Cholesky factor C of K
    (a tiny ridge on K's diagonal keeps duplicate or near-duplicate landmarks from making it singular;
    it shrinks only directions the kernel barely spans). A ridge on phi is the same fit under any such M."""
    from scipy.linalg import LinAlgError, cholesky, solve_triangular

    gram = _kernel(centres, centres, scale)
    jitter = 1e-10 * len(gram)
    for _ in range(6):
        try:
            factor = cholesky(gram + jitter * np.eye(len(gram)), lower=True, check_finite=False)
            break
        except LinAlgError:
            jitter *= 100.0
    else:
        raise ValueError(
            "the people's score's kernel matrix is not positive definite even with a ridge; its "
            "landmarks' states hold NaN?"
        )
    return solve_triangular(factor, np.eye(len(gram)), lower=True, check_finite=False).T


def _folds(groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    names = np.random.default_rng(seed).permutation(np.unique(groups))
    fold = {g: i % folds for i, g in enumerate(names)}
    return np.array([fold[g] for g in groups], dtype=np.int64)


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a_i - b_j|^2, (len(a), len(b))."""
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0)


def _kernel(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """exp(-|a_i - b_j|^2 / scale), (len(a), len(b))."""
    return np.exp(-_squared_distances(a, b) / scale)


def _expand(z: np.ndarray, landmarks: np.ndarray, scale: float, coef: np.ndarray, batch: int = 2048) -> np.ndarray:
    """sum_j coef_j k(z_i, landmark_j) for every row of z, a batch of rows at a time."""
    return np.concatenate(
        [np.zeros(0)] + [_kernel(z[i : i + batch], landmarks, scale) @ coef for i in range(0, len(z), batch)]
    )


def _as_stored(x: np.ndarray) -> np.ndarray:
    """The float32 values the model folder keeps, as float64: the fit computes with exactly what a
    loaded model reads."""
    return np.ascontiguousarray(x, dtype=np.float32).astype(np.float64)


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
        sv, directions = _principal((x - mean) / std, top=components)
        keep = min(components, int((sv > 1e-6 * sv[0]).sum()))
        return cls(mean, std, _as_stored(directions[:, :keep]))

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
        return _expand(z, self.landmarks, self.scale, self.coef)

    @classmethod
    def fit(
        cls,
        states: np.ndarray,
        pairs: np.ndarray,
        weights: np.ndarray,
        groups: np.ndarray,
        seed: int,
        components: int = PEOPLE_COMPONENTS,
        **settings: Any,
    ) -> tuple[PeopleScore, np.ndarray]:
        """Fit on `pairs` ((p, 2) rows of `states`: chosen, rejected), weighted, folded by `groups` (a
        pair's prompt), reading the states through the projection fitted on the pairs' rows. Returns the
        score and every row's value: out of fold for the rows of a pair (from the fit without its fold,
        at the chosen width and penalty), the full fit's elsewhere. `settings`: as `fit_projected`'s."""
        cls._check_pairs(pairs, settings.get("folds", PEOPLE_FOLDS))
        x = np.asarray(states, dtype=np.float64)
        projection = Projection.fit(x[np.unique(pairs)], components)
        return cls.fit_projected(projection, projection(x), pairs, weights, groups, seed, **settings)

    @staticmethod
    def _check_pairs(pairs: np.ndarray, folds: int) -> None:
        if len(pairs) < 2 * folds:
            raise ValueError(
                f"the people's score needs at least {2 * folds} people's pairs, got {len(pairs)}; add pairs "
                "(reward_model.people_pairs, `hominem data import-preferences`) or set "
                "reward_model.people_score.encoder: null"
            )

    @classmethod
    def fit_projected(
        cls,
        projection: Projection,
        z: np.ndarray,
        pairs: np.ndarray,
        weights: np.ndarray,
        groups: np.ndarray,
        seed: int,
        alphas: Sequence[float] = PEOPLE_ALPHAS,
        gammas: Sequence[float] = PEOPLE_GAMMAS,
        folds: int = PEOPLE_FOLDS,
        landmarks: int = PEOPLE_LANDMARKS,
    ) -> tuple[PeopleScore, np.ndarray]:
        """`fit` on states already read through `projection` (`z`, e.g. a shipped projection's rows)."""
        cls._check_pairs(pairs, folds)
        z = np.asarray(z, dtype=np.float64)
        used = np.unique(pairs)
        rng = np.random.default_rng(seed)
        marks = used if len(used) <= landmarks else np.sort(rng.choice(used, landmarks, replace=False))
        centres = _as_stored(z[marks])
        some = centres[rng.choice(len(centres), min(len(centres), 1000), replace=False)]
        median = float(np.median(_squared_distances(some, some)[np.triu_indices(len(some), 1)]))
        w = np.asarray(weights, dtype=np.float64)
        which = _folds(np.asarray(groups), folds, seed)
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
            to_coef = _nystroem_map(centres, median / gamma)
            phi = _kernel(z[used], centres, median / gamma) @ to_coef
            d = phi[pos[:, 0]] - phi[pos[:, 1]]
            oof = {a: np.zeros(len(used)) for a in alphas}
            right.update({(gamma, a): 0.0 for a in alphas})
            for k in np.unique(which):
                fit, held = which != k, which == k
                for a, b in zip(alphas, _solve_each(d[fit], w[fit], alphas)):
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
            to_coef @ _solve(d, w, alpha),
            float(alpha),
            right[gamma, alpha] / float(w.sum()),
            len(pairs),
            basis=projection.basis,
            landmarks=centres,
            scale=median / gamma,
        )
        values = np.zeros(len(z))
        values[used] = held_values
        others = np.setdiff1d(
            np.arange(len(z)), used
        )  # rows of no pair: the full fit's values (the pairs' are out of fold)
        values[others] = _expand(z[others], centres, score.scale, score.coef)
        log.info(
            "people's score: %d pairs, %d landmarks in %d dimensions, kernel width %g x median, penalty "
            "%g, out-of-fold agreement %.1f%% (%s)",
            len(pairs),
            len(centres),
            z.shape[1],
            1 / gamma,
            alpha,
            100 * score.agreement,
            ", ".join(f"{g:g}/{a:g}: {100 * r / w.sum():.1f}%" for (g, a), r in right.items()),
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
    reader = EncoderStates(encoder, cfg.people_score.max_length, cache=cache, device=device)
    prompts, replies = [p for p, _ in texts], [r for _, r in texts]
    pairs, weights, groups = np.concatenate(pairs), np.concatenate(weights), np.array(groups)
    if shipped is not None and (path := reader.projection_file(shipped)).is_file():
        projection = Projection.load(path)
        log.info("people's score: the states read through the projection shipped in %s", path)
        return PeopleScore.fit_projected(
            projection, reader.projected(prompts, replies, projection, shipped), pairs, weights, groups, seed
        )
    return PeopleScore.fit(reader(prompts, replies).numpy(), pairs, weights, groups, seed)


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
