"""How long picking the next question takes (`GET /feedback/next` waits for it): the rater's posterior refitted
from their answers (from the last posterior's mean, as the service does), then the expected information of every
candidate pair and the best one (`core.attune.posterior`). Features as the people's score reads them
(PEOPLE_COMPONENTS wide, scaled like the shipped projection's rows); the candidates' features are read from
memory, as the service keeps them. With `--method design`, as the service does it: a uniform sample of `--sample`
candidates (`attunement.selection.pool_sample`), P(A) from the posterior, and each one's design worth given the
answered pairs (`core.attune.design`).

Beside it, in the same process, the baseline: today's weighted parts (`core.attune.selection.information`) over
the same candidates, their scores given.

    .venv/bin/python benchmarks/question_pick_speed.py --candidates 10000 --answers 30 300 1000 --repeats 50
    .venv/bin/python benchmarks/question_pick_speed.py --method design --sample 64 256 --answers 30 300 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def percentiles(times: list[float]) -> str:
    ms = 1000 * np.asarray(times)
    return f"p50 {np.percentile(ms, 50):6.1f} ms  p95 {np.percentile(ms, 95):6.1f} ms"


def main() -> None:
    from hominem_pipeline.core.attune.posterior import (
        LaplacePosterior,
        answer_probability,
        expected_information,
        with_design,
    )
    from hominem_pipeline.core.attune.selection import information
    from hominem_pipeline.core.reward.people import PEOPLE_COMPONENTS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidates", type=int, default=10_000)
    ap.add_argument("--answers", type=int, nargs="+", default=[30, 300, 1000])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--method", default="bald", choices=["bald", "epig", "design"])
    ap.add_argument("--sample", type=int, nargs="+", default=[64], help="design: the candidates valued per pick")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    scale = np.sqrt(np.geomspace(224.0, 2.0, PEOPLE_COMPONENTS))  # the shipped rows' spread per direction
    replies = rng.normal(size=(2, args.candidates, PEOPLE_COMPONENTS)) * scale / np.sqrt(2)  # each pair's a and b
    candidates = replies[0] - replies[1]
    targets = candidates[rng.choice(args.candidates, 256, replace=False)]
    truth = rng.normal(size=PEOPLE_COMPONENTS) / np.sqrt((scale**2).sum())
    precision = LaplacePosterior.prior_precision_for(candidates)
    print(f"{args.candidates} candidate pairs, {PEOPLE_COMPONENTS} features, method {args.method}")
    for n in args.answers:
        given = rng.normal(size=(2, n, PEOPLE_COMPONENTS)) * scale / np.sqrt(2)
        answered = given[0] - given[1]
        outcomes = (rng.random(n) < answer_probability(answered @ truth * 3, 0.1)).astype(float)
        last = LaplacePosterior.fit(answered[:-1], outcomes[:-1], precision, 0.1)  # before the newest answer
        for sample in args.sample if args.method == "design" else [args.candidates]:
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                posterior = LaplacePosterior.fit(answered, outcomes, precision, 0.1, last.mean)
                if args.method == "design":
                    some = rng.choice(args.candidates, sample, replace=False)
                    worth = with_design(
                        expected_information(posterior, candidates[some]), replies[0, some], replies[1, some], *given
                    )
                else:
                    worth = expected_information(posterior, candidates, args.method, targets, rng)
                int(np.argmax(worth.value))
                times.append(time.perf_counter() - started)
            print(f"  {n:5d} answers, {sample} candidates: pick {percentiles(times)}", flush=True)
    weights = SimpleNamespace(uncertainty=0.25, disagreement=1.0, cluster=0.5, novelty=1.0)
    gap, spread = rng.normal(size=args.candidates), rng.uniform(0.1, 1.0, args.candidates)
    p_a = 1 / (1 + np.exp(-gap))
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        info = information(p_a, gap, spread, weights, novelty=rng.random(args.candidates))
        int(np.argmax(info["value"].to_numpy()))
        times.append(time.perf_counter() - started)
    print(f"  baseline, today's weighted parts with their scores given: {percentiles(times)}")


if __name__ == "__main__":
    main()
