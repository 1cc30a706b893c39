"""How often the default reward model agrees with people, beside three baselines, in one run.

People: HH-RLHF harmless-base pairs (../shared/data/hh-rlhf/, parsed by the project's importer),
shuffled with seed 0; the first 1,800 are the training part (the 1,800 shipped in config/human/) and
the next `--test` (504) are held out, never seen by any model here. Each scorer orders
each held-out pair; agreement is the share it orders as the person did. Scorers:

    default         the reward model a fresh clone's `make run` builds for the day (the judge's labels,
                    the shipped people's pairs, and any imports or feedback of the window)
    people's score  the default's people's score alone (reward_model.people_score): what its heads add to it
    free scalar     the default with reward_model.scalar free: the scalar its own head (the judge's scalar
                    pulled by people's pairs, plus the people's score), not a combination of the vector
    judge's vector  the default with dimension_pairs false: its vector the judge's alone (the scalar that
                    vector's combination)
    no guards       the default without its guard columns (reward_model.guards []): does each guard earn its place
    judge copy      the same without any people's pairs (reward_model.people_pairs [], guards [],
                    human_preferences false): the copy of the offline judge alone
    longer          prefer the longer reply
    student LL      prefer the reply the base student finds more likely per token (mean log-probability)

Each is also scored on the contrast fixtures (config/fixtures/contrast.yaml: overall, its weakest tag, and the
driving-test pair), and the reward models on the judge's own pairs out of fold; the reward models' vectors too: each
fixture tag's own dimension (`core.common.tags.own_dimension`), and the driving-test pair's empathy, social
coherence and agency support. The reward models read the same frozen backbone in the same frame, so the held-out
replies are encoded once and each model's heads are applied to the pooled features and the guard columns it reads
(checked against `raw_scores`).

    .venv/bin/python benchmarks/reward_human_agreement.py                 # today's partition, 504 held out
    .venv/bin/python benchmarks/reward_human_agreement.py --date 2026-11-25 --test 200 .venv/bin/python
    benchmarks/reward_human_agreement.py --project ../other --date 2026-11-26   # another project's labels

With --project, the four reward models are trained here on that project's labels of the day and the
shipped people's pairs alone (a first day's default), with this code's settings; its features cache is used.

Needs a `make run` of that day (the teacher's labels) and ../shared/data/hh-rlhf/ (or --data PATH);
the project itself never reads it. Plot: docs/plots/reward_human_agreement.png.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.fixtures import fixture_report, load_fixtures
from hominem_pipeline.core.human.preferences import parse_preference_file
from hominem_pipeline.core.pipeline.lineage import lineage
from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
TRAIN = 1800  # the training part of the split (the pairs shipped in config/human/)
WITHOUT_PEOPLE = {"reward_model": {"people_pairs": [], "human_preferences": False, "guards": []}}
WITHOUT_GUARDS = {"reward_model": {"guards": []}}
WITHOUT_DIMENSION_PAIRS = {"reward_model": {"dimension_pairs": False}}
FREE_SCALAR = {"reward_model": {"scalar": "free"}}
README_DIMENSIONS = (
    "empathy",
    "social_coherence",
    "agency_support",
)  # what the driving-test example must show, beside the scalar
DRIVING = ("I failed my driving test again.", "That's rough. What happened?", "Try harder.")


def heads_scores(rm, backbone, guards, prompts, replies) -> tuple[np.ndarray, np.ndarray]:
    """The scalar and the vector of `rm`'s heads on the backbone's pooled features, the guard columns it
    reads (by name, from `guards`) and its own people's score, checked against its own scoring."""
    import torch

    names = rm.metadata.guards.names if rm.metadata.guards else []
    people = rm.people_column(prompts, replies)
    pooled = torch.cat(
        [backbone]
        + [guards[name].unsqueeze(1) for name in names]
        + ([] if people is None else [torch.from_numpy(people).float().unsqueeze(1)]),
        1,
    )
    heads = rm.heads_from_pooled(pooled)
    scores = heads["scalar"].astype(np.float64)
    check = rm.raw_scores(prompts[:4], replies[:4])
    if not np.allclose(check["scalar"], scores[:4], atol=1e-4) or not np.allclose(
        check["vector"], heads["vector"][:4], atol=1e-4
    ):
        raise SystemExit(
            f"the heads on the pooled features give {scores[:4]}, raw_scores {check['scalar']}: the two "
            "models do not share a backbone"
        )
    return scores, heads["vector"].astype(np.float64)


def mean_logps(student, prompts, replies, batch_size: int = 8) -> np.ndarray:
    """Per reply, the base student's mean log-probability of its tokens given the prompt (in the chat
    template, up to 384 tokens)."""
    from hominem_pipeline.core.lm.models import load_student
    from hominem_pipeline.core.policy.sequences import encode, reply_logps

    model, tokenizer = load_student(student)
    sums, counts = reply_logps(
        model, [encode(tokenizer, p, r, 384) for p, r in zip(prompts, replies)], tokenizer.pad_token_id, batch_size
    )
    return (sums / counts.clamp(min=1)).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument(
        "--date",
        default=time.strftime("%Y-%m-%d", time.gmtime()),
        help="the day whose labels the reward models train on (default: today)",
    )
    ap.add_argument("--test", type=int, default=504, help="held-out pairs (after the 1,800 of the training part)")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "plots" / "reward_human_agreement.png")
    ap.add_argument(
        "--project",
        type=Path,
        default=None,
        help="a project folder whose data (a `make run` of --date) to use with this code's config (default: this one)",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not args.data.is_file():
        sys.exit(f"{args.data} not found; pass --data PATH to harmless-base-test.jsonl.gz")

    import tempfile

    import pandas as pd

    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.reward.model import RewardModel

    pairs = parse_preference_file(args.data, "hh-rlhf", args.data.name).pairs.reset_index(drop=True)
    order = np.random.default_rng(0).permutation(len(pairs))
    test = pairs.iloc[order[TRAIN : TRAIN + args.test]].reset_index(drop=True)
    if args.project is not None:
        from benchmarks.common import config_on

        project = args.project.resolve()
        cfg, bare, unguarded, judge_vector, free = (
            config_on(project),
            config_on(project, WITHOUT_PEOPLE),
            config_on(project, WITHOUT_GUARDS),
            config_on(project, WITHOUT_DIMENSION_PAIRS),
            config_on(project, FREE_SCALAR),
        )
    else:
        cfg, bare, unguarded, judge_vector, free = (
            load_config(None),
            load_config(None, overrides=WITHOUT_PEOPLE),
            load_config(None, overrides=WITHOUT_GUARDS),
            load_config(None, overrides=WITHOUT_DIMENSION_PAIRS),
            load_config(None, overrides=FREE_SCALAR),
        )
    trained = (
        ("default", cfg),
        ("free scalar", free),
        ("judge's vector", judge_vector),
        ("no guards", unguarded),
        ("judge copy", bare),
    )
    shipped = people_pairs(cfg)
    if shipped is not None and set(shipped["pair_id"]) & set(test["pair_id"]):
        sys.exit(
            "the shipped people's pairs overlap the held-out pairs: this benchmark's split is not the "
            "one they were drawn from"
        )
    started = time.monotonic()
    models = {}
    if (
        args.project is not None
    ):  # the project's labels of the day with this code's settings: each model trained here, as on a first day
        from benchmarks.common import newest, train_first_day

        labels_file = newest(cfg, "teacher_labels", args.date, any_settings=True).file("labels.parquet")
        labels, out = pd.read_parquet(labels_file), Path(tempfile.mkdtemp(prefix="hominem-agreement-"))
        for name, c in trained:
            models[name] = train_first_day(c, labels, out / name, args.date)
            print(
                f"{name}: trained on {len(labels)} labels and {models[name][0].metadata.human_pairs} people's pairs",
                flush=True,
            )
    else:
        if lineage(cfg).expected("teacher_labels", args.date) is None:
            sys.exit(f"no teacher_labels for {args.date} under the default config; run `make run` (or pass --date)")
        for name, c in trained:
            result = run_stage("reward_model", c, args.date)
            models[name] = (RewardModel.load(result.ref.path), result.metrics)
            print(
                f"{name}: {result.ref.path} ({'reused' if result.cache_hit else 'built'}), "
                f"{int(result.metadata.get('human_pairs', 0))} people's pairs",
                flush=True,
            )

    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
    n = len(test)
    prompts = list(test["prompt"]) * 2 + [f.prompt for f in fixtures] * 2 + [DRIVING[0]] * 2
    replies = (
        list(test["chosen"])
        + list(test["rejected"])
        + [f.better for f in fixtures]
        + [f.worse for f in fixtures]
        + list(DRIVING[1:])
    )
    default = models["default"][0]
    for rm, _ in models.values():
        rm.use_feature_cache(
            cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES)
        )  # the encoded states: read once for all of them
    pooled = default.pooled(prompts, replies)
    names = default.metadata.guards.names if default.metadata.guards else []
    extra = len(names) + int(default.metadata.people is not None)
    backbone, guards = (
        pooled[:, : pooled.shape[1] - extra],
        {name: pooled[:, pooled.shape[1] - extra + i] for i, name in enumerate(names)},
    )
    heads = {name: heads_scores(rm, backbone, guards, prompts, replies) for name, (rm, _) in models.items()}
    scores = {name: scalar for name, (scalar, _) in heads.items()}
    if default.metadata.people is not None:  # the default's people's score on its own: what the heads add to it
        scores["people's score"] = default.people_column(prompts, replies).astype(np.float64)
    scores["longer"] = np.array([len(r.encode()) for r in replies], dtype=np.float64)
    # the default's reply_logp guard is this very figure (a test checks it): reused, not measured twice
    scores["student LL"] = (
        guards["reply_logp"].double().numpy()
        if "reply_logp" in guards
        else mean_logps(student_path(cfg), prompts, replies)
    )

    f = len(fixtures)
    rows = []
    for name, s in scores.items():
        people = float((s[:n] > s[n : 2 * n]).mean())
        report = fixture_report(fixtures, s[2 * n : 2 * n + f] - s[2 * n + f : 2 * n + 2 * f])
        tag, worst = report.worst_tag()
        kind = "yes" if s[-2] > s[-1] else "no"
        if name in models:  # the calibrated probability, as `hominem reward-probe` prints it
            kind += f" (P {models[name][0].probability(float(s[-2] - s[-1])):.2f})"
        judge = models[name][1].get("val_pairwise_accuracy") if name in models else None
        rows.append((name, people, report.accuracy, tag, worst, kind, judge))
    se = 100 * np.sqrt(0.25 / n)
    print(
        f"\n{n} held-out HH-RLHF pairs (one standard error {se:.1f} points), {f} contrast fixtures, day "
        f"{args.date}; {time.monotonic() - started:.0f} s"
    )
    print(
        f"{'scorer':12s} {'people':>8s} {'fixtures':>9s}  {'weakest tag':24s} {'kind reply wins':>16s} "
        f"{'judge OOF':>10s}"
    )
    for name, people, fix, tag, worst, kind, judge in rows:
        print(
            f"{name:12s} {people:8.1%} {fix:9.1%}  {f'{tag} {worst:.0%}':24s} {kind:>16s} "
            f"{'-' if judge is None else f'{judge:.1%}':>10s}"
        )
    print(
        "\nEach tag's own dimension on its fixtures (the scalar beside it), and the driving-test example's "
        f"{', '.join(README_DIMENSIONS)} (kind reply minus 'Try harder.'):"
    )
    dim_reports = {}
    for name, (scalar, vector) in heads.items():
        dim_reports[name] = fixture_report(
            fixtures,
            scalar[2 * n : 2 * n + f] - scalar[2 * n + f : 2 * n + 2 * f],
            vector[2 * n : 2 * n + f] - vector[2 * n + f : 2 * n + 2 * f],
            default.dimensions,
        ).dimensions
    tags = list(dim_reports["default"].by_tag)
    print(
        f"{'scorer':15s} {'all':>6s} "
        + " ".join(f"{t[:10]:>10s}" for t in tags)
        + "  "
        + " ".join(f"{d[:9]:>9s}" for d in README_DIMENSIONS)
    )
    for name, rep in dim_reports.items():
        vector = heads[name][1]
        gaps = [
            vector[-2, default.dimensions.index(d)] - vector[-1, default.dimensions.index(d)]
            for d in README_DIMENSIONS
        ]
        print(
            f"{name:15s} {rep.accuracy:6.1%} "
            + " ".join(f"{rep.by_tag[t]:10.0%}" for t in tags)
            + "  "
            + " ".join(f"{g:+9.3f}" for g in gaps)
        )
    # consistency: pairs of replies to one prompt (held out and fixtures) where one is at least as good on
    # every dimension and on the people's score, yet gets the lower scalar
    people_col = scores.get("people's score", np.zeros(len(replies)))
    first, second = np.r_[np.arange(n), 2 * n + np.arange(f)], np.r_[n + np.arange(n), 2 * n + f + np.arange(f)]
    print("\nReplies at least as good on every dimension and on the people's score, yet with the lower scalar:")
    for name, (scalar, vector) in heads.items():
        a_wins = (vector[first] >= vector[second]).all(1) & (people_col[first] >= people_col[second])
        b_wins = (vector[second] >= vector[first]).all(1) & (people_col[second] >= people_col[first])
        wrong = (a_wins & (scalar[first] < scalar[second])) | (b_wins & (scalar[second] < scalar[first]))
        print(f"  {name:15s} {int(wrong.sum())} of {int((a_wins | b_wins).sum())} such pairs")
    best = max(
        (r for r in rows if r[0] not in ("default", "no guards", "people's score", "judge's vector", "free scalar")),
        key=lambda r: r[1],
    )
    plain = next(r for r in rows if r[0] == "no guards")
    print(
        f"the guards ({', '.join(names) or 'none'}): {rows[0][1] - plain[1]:+.1%} agreement with people, "
        f"{rows[0][2] - plain[2]:+.1%} on the fixtures"
    )
    print(
        f"default against the best baseline ({best[0]}): {rows[0][1] - best[1]:+.1%} agreement with "
        "people; goal: at least 65% and above all three"
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.6, 3.6))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [100 * r[1] for r in rows], 0.4, label=f"people ({n} held-out HH-RLHF pairs)")
    ax.bar(x + 0.2, [100 * r[2] for r in rows], 0.4, label=f"contrast fixtures ({f})")
    ax.axhline(65, color="tab:red", lw=0.8, label="goal for people: 65%")
    ax.axhline(50, color="grey", lw=0.8, ls=":")
    ax.set_xticks(x, [r[0] for r in rows], fontsize=8)
    ax.set_ylabel("agreement (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Reward model and baselines, day {args.date}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
