"""Does feedback teach the reward model? HH-RLHF pairs posted to `hominem serve` as a rater would, the
reward model rebuilt through the pipeline after each step, agreement with people measured on pairs no
step saw, beside agreement with the judge.

The pairs are HH-RLHF harmless-base (`../shared/data/hh-rlhf/`), shuffled with seed 0 and split as
`reward_human_agreement.py` splits them (the first 1,800 to teach, the other 504 held out). For each
step (0, 100, 300, 1,000, 1,800 pairs given in all) the new pairs go through the running service:
both replies recorded with `POST /turns`, the choice with `POST /feedback` (strength `clear`). Then the
`human_feedback` and `reward_model` stages of the day run (the core runner: the same builds Dagster
runs) on this project's data, with the benchmark's own log folder so no real feedback mixes in, and
the new reward model scores the held-out pairs (the frozen backbone's pooled features of them are
computed once and each step's heads applied to them, checked against `raw_scores`). Printed per
step: agreement with the people on the held-out pairs, the judge's pairs ordered out of fold
(`val_pairwise_accuracy`), and the plot `docs/plots/feedback_learning_curve.png`. Goal: agreement
rises with the feedback and reaches 65% at 1,800, the judge's figure reported beside it.

    .venv/bin/python benchmarks/feedback_learning_curve.py [--steps 0,100,300,1000,1800] [--test 504]

Needs today's `make run` (the log is written per UTC day, so the pairs given today train today's
reward model, on today's teacher labels) and ../shared/data/hh-rlhf/.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.human.preferences import parse_preference_file
from hominem_pipeline.testing.service import ServeFailed, start_serve, stop_serve

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
LOG_DIR = "online-benchmark-feedback"


def serve(day_log_dir: str) -> tuple[subprocess.Popen, str]:
    try:
        proc, url, _ = start_serve(
            ["--adapter", "none", "--reward-model", "none", "--set", f"serving.log_dir={day_log_dir}"], ROOT
        )
    except ServeFailed as exc:
        raise SystemExit(str(exc)) from None
    return proc, url


def give(url: str, pairs) -> None:
    """Each pair as a rater gives it: both replies recorded as turns, then the choice."""
    with httpx.Client(base_url=url, timeout=60) as http:
        for row in pairs.itertuples():
            chosen = http.post("/turns", json={"prompt": row.prompt, "reply": row.chosen, "author": "hh-rlhf"}).json()[
                "turn"
            ]
            rejected = http.post(
                "/turns", json={"prompt": row.prompt, "reply": row.rejected, "author": "hh-rlhf"}
            ).json()["turn"]
            answer = http.post(
                "/feedback", json={"kind": "choice", "chosen": chosen, "rejected": rejected, "strength": "clear"}
            )
            if answer.status_code != 200:
                raise SystemExit(f"feedback refused: {answer.text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--steps", default="0,100,300,1000,1800", help="pairs given in all after each step")
    ap.add_argument("--test", type=int, default=504, help="held-out pairs")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "plots" / "feedback_learning_curve.png")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.reward.model import RewardModel

    steps = [int(x) for x in args.steps.split(",")]
    pairs = parse_preference_file(args.data, "hh-rlhf", args.data.name).pairs.reset_index(drop=True)
    order = np.random.default_rng(0).permutation(len(pairs))
    teach, test = (
        pairs.iloc[order[: max(steps)]].reset_index(drop=True),
        pairs.iloc[order[1800 : 1800 + args.test]].reset_index(drop=True),
    )
    longer = float((test["chosen"].str.len() > test["rejected"].str.len()).mean())
    cfg = load_config(None, overrides={"serving": {"log_dir": LOG_DIR}})
    day = time.strftime("%Y-%m-%d", time.gmtime())
    if lineage(cfg).expected("teacher_labels", day) is None:
        raise SystemExit(f"no teacher_labels for {day} under the default config; run `make run` first")
    log_file = cfg.data_dir / LOG_DIR / "log" / f"{day}.jsonl"
    if log_file.exists():
        log_file.unlink()  # a clean start: the benchmark's own log, never the user's
    print(
        f"day {day}; {len(teach)} pairs to give in steps {steps}, {len(test)} held out; 'prefer the "
        f"longer reply' agrees {longer:.1%} on them",
        flush=True,
    )

    proc, url = serve(LOG_DIR)
    rows, given, pooled = [], 0, None
    prompts, replies = list(test["prompt"]) * 2, list(test["chosen"]) + list(test["rejected"])
    try:
        for step in steps:
            started = time.monotonic()
            give(url, teach.iloc[given:step])
            given = step
            run_stage("human_feedback", cfg, day)
            result = run_stage("reward_model", cfg, day)
            rm = RewardModel.load(result.ref.path)
            if pooled is None:  # the backbone is frozen and the same in every step: only the heads change
                pooled = rm.pooled(prompts, replies)
            scores = rm.scalar_from_pooled(pooled)
            check = rm.raw_scores(prompts[:4], replies[:4])["scalar"]  # what a user's scoring call gives, for a few
            if not np.allclose(check, scores[:4], atol=1e-4):
                raise SystemExit(f"the heads on the held-out pooled features give {scores[:4]}, raw_scores {check}")
            people = float((scores[: len(test)] > scores[len(test) :]).mean())
            judge = result.metrics.get("val_pairwise_accuracy")
            rows.append((step, people, judge, result.metrics.get("val_human_accuracy")))
            print(
                f"{step:5d} pairs given: agreement with people {people:.1%} on {len(test)} held-out "
                "pairs; judge's pairs (out of fold) "
                f"{judge:.1%}; given pairs out of fold "
                f"{rows[-1][3] if rows[-1][3] is None else f'{rows[-1][3]:.1%}'}; "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
    finally:
        stop_serve(proc)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot([r[0] for r in rows], [100 * r[1] for r in rows], "o-", label="people (held-out HH-RLHF pairs)")
    ax.plot([r[0] for r in rows], [100 * r[2] for r in rows], "s--", label="the judge (its pairs, out of fold)")
    ax.axhline(100 * longer, color="grey", lw=0.8, ls=":", label="prefer the longer reply")
    ax.axhline(65, color="tab:red", lw=0.8, label="goal: 65%")
    ax.set_xlabel("preference pairs given through /feedback")
    ax.set_ylabel("agreement (%)")
    ax.set_title("The default reward model learning from feedback")
    ax.legend(fontsize=8)
    fig.tight_layout()
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
