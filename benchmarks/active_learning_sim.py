"""The picker measured in-process, on the raters it is for (`active_learning_curve.py` runs it; `--through-service`
there runs the slower end-to-end arm through `hominem serve` and the pipeline).

- The question pool: the 1,800 HH-RLHF pairs of the seed-0 split's training part (as `hominem data
  import-questions` would hold them). Held out: the 504 pairs after them.
- Features: the people's score's (the shipped projection of the MiniLM encoder's states, `EncoderStates.projected`),
  read once for every reply.
- The learner: the project's people's score (`PeopleScore.fit_projected`), fitted on the answers so far alone
  and judged on the held-out pairs: agreement with the rater's own preference.
- The picker (`core.attune.posterior`): a Laplace posterior over a logistic preference model on the same
  features, refitted after every answer, with the rater's noise read from the consistency of repeated pairs as the
  page measures it (the first answers asked again). Arms: `random`; `random-again`, random with other draws of the
  picks and flips: what random scores against itself, the figure's null (curve noise alone lets a second random run
  "reach" the first's final early); `bald` and `epig` (targets: a sample of the pool, the pairs people bring); today's
  parts `uncertainty` (the predictive closest to a coin toss) and `disagreement` (the chance the spread flips the
  order, the posterior's read as an ensemble's). Two arms ask by the learner's own model instead of the picker's:
  `design`, the service's `attunement.selection.method: design` (transductive experimental design in the people's
  score's kernel, `core.attune.design`) over a uniform sample of 64 open pairs (`design:N`: N), and `margin`, the
  pairs the learner's latest fit is least sure of (`least_sure`).
- Raters:
  - `hh`: the HH-RLHF labels (many people, noisy; no repeats, so the picker reads the default noise);
  - `consistent-<c>`: a simulated rater with a hidden utility over what a reply says (`UTILITY`: length, a
    question, sympathy, a refusal, steps, hedging, ... with weights drawn per rater and seed), who answers against
    it with the flip rate that gives consistency c on a repeated pair.

Every arm of a rater and seed starts from the same 10 random answers, and the seed draws the rater.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

START = 10  # answers every arm starts from (the people's score needs two per fold)
REPEATS = 10  # of them, asked again: the consistency the picker reads its noise from
TARGETS = 256  # pool pairs EPIG's targets are drawn from
POOL_SAMPLE = 64  # the open pairs the design arm values per pick, as the service (attunement.selection.pool_sample)
MARGIN_BATCH = 10  # the margin arm refits the learner after this many answers
NOISE = {"consistent-0.95": 0.95, "consistent-0.85": 0.85, "consistent-0.70": 0.70}

UTILITY = {  # what a reply says, as a number; a rater's taste is a weighted sum of them (standardised)
    "length": lambda t: float(np.log1p(len(t.split()))),
    "asks a question": lambda t: float("?" in t),
    "addresses you": lambda t: min(len(re.findall(r"\byou(r|rs|'re)?\b", t, re.I)), 5) / 5,
    "apologises": lambda t: float(bool(re.search(r"\b(sorry|apolog)", t, re.I))),
    "refuses": lambda t: float(bool(re.search(r"\b(can(no|')t|won't|not able|unable|shouldn't)\b", t, re.I))),
    "gives steps": lambda t: float(bool(re.search(r"(^|\n)\s*(\d+[.)]|[-*])\s|\b(first|then|finally)\b", t, re.I))),
    "hedges": lambda t: float(bool(re.search(r"\b(maybe|might|perhaps|probably|I think|not sure)\b", t, re.I))),
    "exclaims": lambda t: min(t.count("!"), 3) / 3,
    "names feelings": lambda t: float(bool(re.search(r"\b(feel\w*|sad|upset|angry|happy|worried)\b", t, re.I))),
    "gives numbers": lambda t: float(bool(re.search(r"\d", t))),
}


@dataclass
class Rater:
    """Who answers: their preference on the pool and held-out pairs (1: the first reply, 0: the second, 0.5: no
    preference) and the chance they answer against it."""

    name: str
    pool: np.ndarray
    test: np.ndarray
    flip: float

    def answer(self, i: int, rng: np.random.Generator) -> float:
        prefers = self.pool[i] if self.pool[i] != 0.5 else float(rng.random() < 0.5)
        return 1.0 - prefers if rng.random() < self.flip else prefers


def text_properties(texts: list[str]) -> np.ndarray:
    raw = np.array([[f(t) for f in UTILITY.values()] for t in texts])
    return (raw - raw.mean(0)) / np.where(raw.std(0) > 0, raw.std(0), 1.0)


def simulated(name: str, pool_pairs, test_pairs, seed: int) -> Rater:
    """A consistent rater: utility = properties . w, w drawn by `seed`; they flip with the rate that gives the
    consistency `NOISE[name]` on a repeat ((1 - f)^2 + f^2 = c)."""
    from hominem_pipeline.core.attune.posterior import noise_from_consistency

    rng = np.random.default_rng(10_000 + seed)
    w = rng.normal(size=len(UTILITY))
    texts = [*pool_pairs["chosen"], *pool_pairs["rejected"], *test_pairs["chosen"], *test_pairs["rejected"]]
    u = text_properties(texts) @ w
    n, m = len(pool_pairs), len(test_pairs)

    def prefers(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(np.isclose(a, b), 0.5, (a > b).astype(float))

    return Rater(
        name,
        prefers(u[:n], u[n : 2 * n]),
        prefers(u[2 * n : 2 * n + m], u[2 * n + m :]),
        noise_from_consistency(NOISE[name]),
    )


def people(pool_pairs, test_pairs) -> Rater:
    """The HH-RLHF labels: the chosen reply (stored first) is preferred; each pair answered once as labelled."""
    return Rater("hh", np.ones(len(pool_pairs)), np.ones(len(test_pairs)), 0.0)


def features(cfg, pool_pairs, test_pairs) -> tuple[np.ndarray, np.ndarray, object]:
    """The people's score's projected rows of (pool chosen, pool rejected) and (test chosen, test rejected), and the
    projection."""
    from hominem_pipeline.core.builds.reward_model import people_encoder
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES
    from hominem_pipeline.core.reward.people import EncoderStates, Projection

    reader = EncoderStates(
        people_encoder(cfg), cfg.reward_model.people_score.max_length, cache=cfg.data_dir / FEATURE_CACHE
    )
    shipped = cfg.path(SHIPPED_FEATURES)
    projection = Projection.load(reader.projection_file(shipped))

    def rows(pairs) -> np.ndarray:
        prompts = list(pairs["prompt"]) * 2
        return reader.projected(prompts, [*pairs["chosen"], *pairs["rejected"]], projection, shipped)

    return rows(pool_pairs), rows(test_pairs), projection


def fit_learner(projection, z_pool, asked, answers, seed: int, weights=None):
    """The people's score fitted on the answers alone (each weighing `weights`, default 1)."""
    from hominem_pipeline.core.reward.people import PairSet, PeopleScore

    n = len(z_pool) // 2
    asked = np.asarray(asked)
    first = np.where(np.asarray(answers) > 0.5, asked, asked + n)  # the chosen reply's row
    other = np.where(np.asarray(answers) > 0.5, asked + n, asked)
    pairs = np.stack([first, other], 1)
    w = np.ones(len(pairs)) if weights is None else np.asarray(weights, dtype=np.float64)
    data = PairSet(pairs, w, np.array([f"q{i}" for i in asked]))
    return PeopleScore.fit_projected(projection, z_pool, data, seed)[0]


def learner_agreement(projection, z_pool, asked, answers, z_test, rater: Rater, seed: int, weights=None) -> float:
    """The people's score fitted on the answers alone, judged on the held-out pairs the rater has a preference on."""
    from hominem_pipeline.core.reward.kernel import expand

    score = fit_learner(projection, z_pool, asked, answers, seed, weights)
    m = len(z_test) // 2
    values = expand(z_test, score.landmarks, score.scale, score.coef)
    decided = rater.test != 0.5
    right = (values[:m] > values[m:]) == (rater.test > 0.5)
    return float(right[decided].mean())


def least_sure(projection, z_pool, asked, answers, open_: np.ndarray, seed: int, k: int) -> list[int]:
    """The `margin` arm's next `k` questions: the open pairs the learner, fitted on the answers so far, orders by the
    smallest gap."""
    from hominem_pipeline.core.reward.kernel import expand

    n = len(z_pool) // 2
    score = fit_learner(projection, z_pool, asked, answers, seed)
    values = expand(z_pool, score.landmarks, score.scale, score.coef)
    gap = np.abs(values[:n] - values[n:])
    gap[~open_] = np.inf
    return [int(i) for i in np.argsort(gap)[:k]]


def run(arm: str, rater: Rater, z_pool, z_test, projection, seed: int, checkpoints: list[int]) -> list:
    """One arm's curve: (answers, agreement) at each checkpoint."""
    from hominem_pipeline.core.attune.posterior import LaplacePosterior, expected_information, noise_from_consistency
    from hominem_pipeline.core.attune.selection import disagreement

    rng = np.random.default_rng(seed + 7_919 if arm == "random-again" else seed)
    arm = "random" if arm == "random-again" else arm
    n = len(z_pool) // 2
    diffs = z_pool[:n] - z_pool[n:]
    start = list(np.random.default_rng(20_000 + seed).choice(n, START, replace=False))
    answers = [rater.answer(i, rng) for i in start]
    if rater.name == "hh":
        noise = noise_from_consistency(None)
    else:
        again = [rater.answer(i, rng) for i in start[:REPEATS]]
        noise = noise_from_consistency(float(np.mean([a == b for a, b in zip(answers, again)])))
    precision = LaplacePosterior.prior_precision_for(diffs)
    targets = diffs[np.random.default_rng(30_000 + seed).choice(n, TARGETS, replace=False)]
    asked, open_ = list(start), np.ones(n, bool)
    open_[start] = False
    posterior, curve, values = None, [], [0.0] * len(start)
    state = {"queue": [], "sample": int(arm.partition(":")[2] or POOL_SAMPLE), "rng": rng}
    # "bald@0.2": a fifth of the questions at random, as the service asks; "bald+1": each answer weighs 1 + 1 x its
    # expected information when asked in the learner's fit (retrain_boost)
    method, _, rest = arm.partition("@") if "@" in arm else (arm.split("+")[0], "", "")
    share = float(rest.split("+")[0]) if rest else 0.0
    boost = float(arm.split("+")[1]) if "+" in arm else 0.0
    while True:
        if len(asked) in checkpoints:
            weights = 1.0 + boost * np.array(values)  # attunement.selection.retrain_boost
            curve.append(
                (len(asked), learner_agreement(projection, z_pool, asked, answers, z_test, rater, seed, weights))
            )
        if len(asked) >= max(checkpoints):
            return curve
        candidates = np.flatnonzero(open_)
        if method == "margin" or method.startswith("design"):
            i = learner_pick(method, state, projection, z_pool, asked, answers, open_, seed)
        else:
            if method != "random":
                posterior = LaplacePosterior.fit(
                    diffs[asked], np.array(answers), precision, noise, None if posterior is None else posterior.mean
                )
            if method == "random" or rng.random() < share:
                i = int(rng.choice(candidates))
            else:
                if method in ("bald", "epig"):
                    value = expected_information(posterior, diffs[candidates], method, targets, rng).value
                elif method == "disagreement":  # today's part, the posterior's spread read as an ensemble's
                    mu, var = posterior.latent(diffs[candidates])
                    value = disagreement(mu, np.sqrt(var))
                else:  # uncertainty: today's part, the predictive nearest a coin toss
                    value = -np.abs(posterior.predictive(diffs[candidates]) - 0.5)
                i = int(candidates[np.argmax(value)])
        values.append(0.0 if posterior is None else float(expected_information(posterior, diffs[[i]]).value[0]))
        open_[i] = False
        asked.append(i)
        answers.append(rater.answer(i, rng))


def learner_pick(method: str, state: dict, projection, z_pool, asked, answers, open_, seed: int) -> int:
    """The next question of the arms that ask by the learner's own model: `design` (the service's
    `core.attune.design` over a uniform sample of the open pairs, `design:N` a sample of N) and `margin`."""
    from hominem_pipeline.core.attune.design import design_worth

    if method.startswith("design"):
        n = len(z_pool) // 2
        candidates = np.flatnonzero(open_)
        candidates = np.sort(state["rng"].choice(candidates, min(state["sample"], len(candidates)), replace=False))
        worth = design_worth(z_pool[candidates], z_pool[n + candidates], z_pool[asked], z_pool[n + np.array(asked)])
        return int(candidates[np.argmax(worth)])
    if not state["queue"]:
        state["queue"] = least_sure(projection, z_pool, asked, answers, open_, seed, MARGIN_BATCH)
    return state["queue"].pop(0)


def simulate(cfg, pool_pairs, test_pairs, raters: list[str], arms: list[str], seeds: list[int], checkpoints) -> dict:
    """Every (rater, arm, seed)'s curve."""
    z_pool, z_test, projection = features(cfg, pool_pairs, test_pairs)
    curves = {}
    for name in raters:
        for seed in seeds:
            rater = people(pool_pairs, test_pairs) if name == "hh" else simulated(name, pool_pairs, test_pairs, seed)
            for arm in arms:
                started = time.monotonic()
                curves[(name, arm, seed)] = run(arm, rater, z_pool, z_test, projection, seed, checkpoints)
                print(
                    f"  {name} {arm} seed {seed}: "
                    + " ".join(f"{n}:{a:.1%}" for n, a in curves[(name, arm, seed)])
                    + f" ({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
    return curves


def answers_to_reach(curve: list, target: float) -> float | None:
    """The answers at which `curve` first reaches `target`, linearly interpolated between its points."""
    for (n0, a0), (n1, a1) in zip([curve[0], *curve], curve):
        if a1 >= target:
            return float(n1) if a1 == a0 or n1 == n0 else n0 + (target - a0) / (a1 - a0) * (n1 - n0)
    return None


def summarise(curves: dict, raters: list[str], arms: list[str], seeds: list[int]) -> dict:
    """Per rater and arm: the answers it needs to reach random's final agreement (random's at its last checkpoint,
    N answers), as a share of N: per seed (a seed that never reaches it counts as 1) and on the seeds' mean curves;
    and the checkpoint where it trails random most, with the paired standard error there."""
    from benchmarks.common import paired_se

    out = {}
    for name in raters:
        runs = {arm: np.array([[a for _, a in curves[(name, arm, s)]] for s in seeds]) for arm in arms}
        points = [n for n, _ in curves[(name, "random", seeds[0])]]
        final = points[-1]
        for arm in [a for a in arms if a != "random"]:
            per_seed = []
            for k, seed in enumerate(seeds):
                need = answers_to_reach(curves[(name, arm, seed)], runs["random"][k, -1])
                per_seed.append(1.0 if need is None else need / final)
            mean_need = answers_to_reach(list(zip(points, runs[arm].mean(0))), runs["random"][:, -1].mean())
            gaps = runs[arm] - runs["random"]
            worst = int(np.argmin(gaps.mean(0)))
            se = paired_se(gaps[:, worst]) if len(seeds) > 1 else float("nan")
            out[(name, arm)] = {
                "share of answers": float(np.mean(per_seed)),
                "per seed": per_seed,
                "on the mean curves": None if mean_need is None else mean_need / final,
                "worst point": points[worst],
                "worst gap": float(gaps.mean(0)[worst]),
                "its SE": se,
                "final gap": float(gaps.mean(0)[-1]),
            }
            row = out[(name, arm)]
            print(
                f"{name:16s} {arm:13s} reaches random's final ({runs['random'][:, -1].mean():.1%} at {final}) with "
                f"{row['share of answers']:.2f} of its answers (seeds: "
                f"{', '.join(f'{r:.2f}' for r in per_seed)}; mean curves: "
                f"{'not reached' if mean_need is None else f'{mean_need / final:.2f}'}); trails most at "
                f"{row['worst point']}: {row['worst gap']:+.1%} (paired SE {se:.1%}); "
                f"at {final}: {row['final gap']:+.1%}",
                flush=True,
            )
    return out


def plot(curves: dict, raters: list[str], arms: list[str], seeds: list[int], path: Path) -> None:
    """Agreement against answers, one panel per rater, the seeds' mean per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(raters), figsize=(3.6 * len(raters), 3.6), squeeze=False)
    for ax, name in zip(axes.flat, raters):
        for arm in arms:
            runs = [curves[(name, arm, s)] for s in seeds]
            n = [p[0] for p in runs[0]]
            mean = np.mean([[p[1] for p in r] for r in runs], axis=0)
            ax.plot(n, mean, "--" if arm.startswith("random") else "-", marker="o", markersize=3, label=arm)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("answers", fontsize=8)
        ax.tick_params(labelsize=7)
    axes.flat[0].set_ylabel("agreement on 504 held-out pairs", fontsize=8)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"asking by expected information against at random (mean of seeds {seeds})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
