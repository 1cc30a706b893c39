"""Do per-domain scalar weights order people's pairs better than the one combination the reward
model fits for every domain?

The scalar is a combination of the reward vector and the people's score (`reward.combination`): one set of
non-negative weights for every prompt. A per-domain variant fits those weights again within each domain (the
seed category a prompt lies nearest, `attune.predictions.Domains`, the same the prediction log records)
that has at least `--min-pairs` people's pairs, the others keeping the global weights. Three ways:

    global       the combination's logistic fit on every training pair (what the reward model does)
    per domain   the same fit on the domain's pairs alone
    shrunk       the domain's pairs, plus every other pair at weight `--prior` (the global fit as a prior)

The reward model is the project's default of the day trained without the shipped HH-RLHF pairs (as the
active-learning benchmark's first round: `hominem run --select human_feedback,reward_model` in a scratch
folder), so its vector and people's score never saw the people's pairs used here. The weights are fitted on
the 1,800 pairs of the seed-0 split's training part (their features read honestly, out of sample) and
judged on the 504 held-out pairs: agreement overall and per domain, and the paired bootstrap interval of
each variant's difference from the global fit.

    .venv/bin/python benchmarks/domain_weights.py --project /path/to/make-run-project

Limits: HH-RLHF's harmless-base pairs are one population of raters and one kind of request; the domains
here are the seed categories those requests lie nearest, not categories the raters chose.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def features(
    model, prompts: list[str], chosen: list[str], rejected: list[str]
) -> tuple[np.ndarray, np.ndarray | None]:
    """(vector gaps (n, D), people's score gaps (n,) or None) of each pair, chosen minus rejected."""
    pooled = model.pooled(prompts + prompts, chosen + rejected)
    vector = model.heads_from_pooled(pooled)["vector"].astype(np.float64)
    people = model.people_from_pooled(pooled)
    n = len(prompts)
    return vector[:n] - vector[n:], None if people is None else people[:n] - people[n:]


def fit(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The combination's weights (`reward.combination`) from pair gaps `x` (the people's score last)."""
    from hominem_pipeline.core.reward.combination import logistic_nonnegative

    return logistic_nonnegative(x, weights)


def bootstrap(better: np.ndarray, rng: np.random.Generator, draws: int = 4000) -> tuple[float, float]:
    """The 95% interval of the mean of `better` (per pair: +1, 0 or -1 against the global fit)."""
    idx = rng.integers(0, len(better), (draws, len(better)))
    means = better[idx].mean(1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, required=True, help="a `make run` project with today's teacher labels")
    ap.add_argument(
        "--data", type=Path, default=ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
    )
    ap.add_argument("--min-pairs", type=int, default=100, help="training pairs a domain needs for weights of its own")
    ap.add_argument("--prior", type=float, default=0.2, help="weight of the other domains' pairs in the shrunk fit")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hominem-domain-weights"))
    args = ap.parse_args()

    from active_learning_curve import POOL_FILE, hominem, scratch, today
    from student_people_agreement import held_out_test

    from hominem_pipeline.core.attune.questions import make
    from hominem_pipeline.core.builds.predictions import domains_for
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.human.preferences import parse_preference_file
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES
    from hominem_pipeline.core.reward.model import project_reward_model

    project = args.project.resolve()
    day = today()
    overlay = scratch(project, args.out, "domains", 0, day)
    hominem(project, "run", "--config", str(overlay), "--date", day, "--select", "human_feedback,reward_model")
    cfg = load_config(overlay, root=project)
    ref, _ = lineage(cfg).newest("reward_model")
    model = project_reward_model(ref.path, cfg)
    model.use_feature_cache(project / "data" / FEATURE_CACHE, project / SHIPPED_FEATURES)

    train = parse_preference_file(project / POOL_FILE, "hh-rlhf", POOL_FILE).pairs.reset_index(drop=True)
    # each prompt as the imported question reads it (the form the active-learning benchmark warmed the feature cache
    # with)
    train["prompt"] = [make(r.prompt, r.chosen, r.rejected, "hh").prompt for r in train.itertuples()]
    test = held_out_test(args.data, 504)
    domains = domains_for(cfg)
    parts = {}
    for name, frame in (("train", train), ("test", test)):
        gaps, people = features(model, list(frame["prompt"]), list(frame["chosen"]), list(frame["rejected"]))
        x = gaps if people is None else np.concatenate([gaps, people[:, None]], 1)
        parts[name] = (x, np.array(domains(list(frame["prompt"]))))
        print(f"{name}: {len(frame)} pairs read", flush=True)
    (x_tr, d_tr), (x_te, d_te) = parts["train"], parts["test"]
    ones = np.ones(len(x_tr))
    global_beta = fit(x_tr, ones)
    own = {d: d_tr == d for d in np.unique(d_tr) if (d_tr == d).sum() >= args.min_pairs}
    betas = {
        "per domain": {d: fit(x_tr[m], ones[m]) for d, m in own.items()},
        "shrunk": {d: fit(x_tr, np.where(m, 1.0, args.prior)) for d, m in own.items()},
    }
    correct = {"global": x_te @ global_beta > 0}
    for variant, per in betas.items():
        z = x_te @ global_beta
        for d, beta in per.items():
            z = np.where(d_te == d, x_te @ beta, z)
        correct[variant] = z > 0
    rng = np.random.default_rng(0)
    names = sorted(np.unique(np.concatenate([d_tr, d_te])))
    print(
        f"\nreward model {ref.path.name}: people's score {'on' if x_tr.shape[1] > len(model.dimensions) else 'off'}; "
        f"domains with >= {args.min_pairs} training pairs: {', '.join(own) or 'none'}"
    )
    print(f"{'domain':<28}{'train':>7}{'test':>6}" + "".join(f"{v:>13}" for v in correct))
    for d in [*names, "all"]:
        m = np.ones(len(d_te), bool) if d == "all" else d_te == d
        n_tr = len(d_tr) if d == "all" else int((d_tr == d).sum())
        print(
            f"{d:<28}{n_tr:>7}{int(m.sum()):>6}"
            + "".join(f"{c[m].mean():>13.1%}" if m.any() else f"{'-':>13}" for c in correct.values())
        )
    for variant in betas:
        better = correct[variant].astype(int) - correct["global"].astype(int)
        lo, hi = bootstrap(better, rng)
        print(
            f"{variant} minus global: {better.mean():+.1%} (95% interval {lo:+.1%} to {hi:+.1%}) on "
            f"{len(better)} held-out pairs"
        )


if __name__ == "__main__":
    main()
