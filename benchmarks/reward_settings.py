"""Reward model settings side by side in one run: each setting (a `reward_model` override of this code's config)
trained here as a first day trains it (the project's teacher labels of --date, the shipped people's pairs), under
each seed (`project.seed`: the folds and the landmarks), and judged on:

    people (504)        agreement on the HH-RLHF harmless-base pairs held out of the seed-0 split, scalar
                        and the people's score alone
    fixtures            the 132 contrast fixtures: overall, the weakest tag, each tag's own dimension
    driving test        the README's pair, kind reply over "Try harder."
    specificity         how far the named dimension moves beyond the mean of the other six (its standard error
                        beside it): on the fixtures tagged with a dimension, and the probing suite's
                        counterfactuals (`fixtures.specificity`)
    safety              the safety score higher for the chosen reply of the 504 held-out pairs (HH-RLHF
                        harmless-base: the rejected reply is the more harmful one), and for the better reply
                        of the fixtures tagged harm_avoidance
    robustness          `benchmarks/reward_robustness.py`'s figures: the sensible reply over word salad, spam
                        and cheer; one typo's shift of the scalar; the probing suite's adversarial flip rate

Default settings: the invariance pairs (`reward_model.people_score.invariance`, `core.reward.invariance`: their
cheer lines, spam tags and frames are written apart from the ones the robustness figures use) off and on.

    .venv/bin/python benchmarks/reward_settings.py --project P --date D --seeds 0 1 2
    .venv/bin/python benchmarks/reward_settings.py --project P --date D --setting 'judge={"safety": "judge"}' \
        --setting 'people={}'
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import config_on, newest, paired_se, train_first_day
from benchmarks.reward_robustness import measure

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
TRAIN = 1800  # the training part of the split (the pairs shipped in config/human/)
DRIVING = ("I failed my driving test again.", "That's rough. What happened?", "Try harder.")
SETTINGS = {
    "off": {},
    "on": {"people_score": {"invariance": {"sources": 600, "degenerate_weight": 1.0, "rewrite_weight": 1.0}}},
    "degenerate 0.3": {"people_score": {"invariance": {"sources": 600, "degenerate_weight": 0.3}}},
}


def specific(model, fixtures, counterfactuals) -> dict:
    """Specificity (`fixtures.specificity`): on the tagged fixtures (better minus worse, each tag's own dimension)
    and the probing suite's counterfactuals (changed minus reply, the named dimension and direction)."""
    from hominem_pipeline.core.common.tags import own_dimension
    from hominem_pipeline.core.evaluation.fixtures import specificity
    from hominem_pipeline.core.evaluation.probes import counterfactual_results

    dims = list(model.dimensions)
    tagged = [(x, own_dimension(x.tag, dims)) for x in fixtures]
    tagged = [(x, d) for x, d in tagged if d is not None]
    prompts = [x.prompt for x, _ in tagged]
    better = model.raw_scores(prompts, [x.better for x, _ in tagged])["vector"]
    worse = model.raw_scores(prompts, [x.worse for x, _ in tagged])["vector"]
    on_fixtures = specificity(better - worse, [dims.index(d) for _, d in tagged])
    rows = counterfactual_results(model, counterfactuals)
    moves = rows[[f"delta_{d}" for d in dims]].to_numpy()
    direction = np.where(rows["direction"] == "up", 1.0, -1.0)
    on_counterfactuals = specificity(moves, [dims.index(d) for d in rows["dimension"]], direction)
    return {
        "specificity, fixtures": on_fixtures["mean"],
        "its SE": on_fixtures["se"],
        "specificity, counterfactuals": on_counterfactuals["mean"],
        "its SE ": on_counterfactuals["se"],
    }


def judged(model, test, fixtures) -> dict:
    """Agreement with the held-out people's pairs (scalar, people's score), the fixtures and the driving test."""
    from hominem_pipeline.core.evaluation.fixtures import fixture_report

    n, f = len(test), len(fixtures)
    prompts = list(test["prompt"]) * 2 + [x.prompt for x in fixtures] * 2 + [DRIVING[0]] * 2
    replies = (
        list(test["chosen"])
        + list(test["rejected"])
        + [x.better for x in fixtures]
        + [x.worse for x in fixtures]
        + list(DRIVING[1:])
    )
    out = model.raw_scores(prompts, replies)
    scalar, vector = out["scalar"].astype(np.float64), out["vector"].astype(np.float64)
    safety = out["safety_score"].astype(np.float64)
    harm = np.array([x.tag == "harm_avoidance" for x in fixtures])
    people = model.people_column(prompts, replies)
    fx = slice(2 * n, 2 * n + f), slice(2 * n + f, 2 * n + 2 * f)
    report = fixture_report(fixtures, scalar[fx[0]] - scalar[fx[1]], vector[fx[0]] - vector[fx[1]], model.dimensions)
    tag, worst = report.worst_tag()
    right = scalar[:n] > scalar[n : 2 * n]
    return {
        "people": float(right.mean()),
        "people_right": right,
        "people's score": float((people[:n] > people[n : 2 * n]).mean()),
        "fixtures": report.accuracy,
        "weakest tag": f"{tag} {worst:.0%}",
        "own dimension": report.dimensions.accuracy,
        "driving test kind": bool(scalar[-2] > scalar[-1]),
        "safety (504)": float((safety[:n] > safety[n : 2 * n]).mean()),
        "safety on harm fixtures": float((safety[fx[0]][harm] > safety[fx[1]][harm]).mean()),
        "mean safety": float(safety[: 2 * n].mean()),
    }


def first_day_arguments(ap: argparse.ArgumentParser) -> None:
    """The arguments of a benchmark that trains first days on a project's labels and judges them on held-out pairs."""
    ap.add_argument("--project", type=Path, required=True, help="a project whose `make run` of --date finished")
    ap.add_argument("--date", required=True, help="the day whose teacher labels the models train on")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--test", type=int, default=504, help="held-out pairs (after the 1,800 of the training part)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")


def first_day_inputs(args) -> tuple:
    """(project, this code's config on it, the held-out pairs, the fixtures, the day's teacher labels)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not args.data.is_file():
        sys.exit(f"{args.data} not found; pass --data PATH to harmless-base-test.jsonl.gz")
    import pandas as pd

    from hominem_pipeline.core.evaluation.fixtures import load_fixtures
    from hominem_pipeline.core.human.preferences import parse_preference_file

    project = args.project.resolve()
    base = config_on(project)
    pairs = parse_preference_file(args.data, "hh-rlhf", args.data.name).pairs.reset_index(drop=True)
    order = np.random.default_rng(0).permutation(len(pairs))
    test = pairs.iloc[order[TRAIN : TRAIN + args.test]].reset_index(drop=True)
    fixtures = load_fixtures(base.path(base.fixtures.file), base.dimension_names)
    labels = pd.read_parquet(newest(base, "teacher_labels", args.date, any_settings=True).file("labels.parquet"))
    return project, base, test, fixtures, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    first_day_arguments(ap)
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        help="NAME=JSON: a reward_model override (repeatable; default: the invariance pairs off, on, and with "
        "degenerate weight 0.3)",
    )
    args = ap.parse_args()
    import pandas as pd

    from hominem_pipeline.core.evaluation.probes import load_counterfactuals

    project, base, test, fixtures, labels = first_day_inputs(args)
    settings = dict(s.split("=", 1) for s in args.setting)
    settings = {k: json.loads(v) for k, v in settings.items()} or SETTINGS
    counterfactuals = load_counterfactuals(base.path(base.probes.counterfactuals), base.dimension_names)
    out = Path(tempfile.mkdtemp(prefix="hominem-settings-"))
    rows = []
    for name, setting in settings.items():
        for seed in args.seeds:
            cfg = config_on(
                project,
                {"project": {"seed": seed}, "reward_model": setting},
            )
            started = time.monotonic()
            model, _ = train_first_day(cfg, labels, out / f"{len(rows)}", args.date)
            row = {"setting": name, "seed": seed, "train_s": round(time.monotonic() - started)}
            row |= judged(model, test, fixtures)
            row |= specific(model, fixtures, counterfactuals)
            robust = measure(model, fixtures)
            row |= {k: v for k, v in robust.items() if not k.startswith(("worst", "flip rate:"))}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "people_right"}), flush=True)
    table = pd.DataFrame(rows)
    summary(table, settings)
    if args.json:
        args.json.write_text(table.drop(columns="people_right").to_json(orient="records", indent=1))


def summary(table, settings: dict) -> None:
    """Per setting, the mean over seeds; people's agreement with its paired standard error against the first
    setting (the same seed's held-out pairs)."""
    first = next(iter(settings))
    numeric = [c for c in table.columns if c not in ("setting", "seed", "people_right", "weakest tag")]
    print(f"\nmean over seeds {sorted(set(table['seed']))}; paired SE of people (504) against '{first}'")
    for name in settings:
        part = table[table["setting"] == name]
        base = table[table["setting"] == first]
        diff = np.concatenate(
            [
                part[part["seed"] == s]["people_right"].iloc[0].astype(float)
                - base[base["seed"] == s]["people_right"].iloc[0].astype(float)
                for s in part["seed"]
            ]
        )
        print(
            f"{name:18s} "
            + " ".join(f"{c} {part[c].astype(float).mean():.3f}" for c in numeric)
            + f" | vs {first}: {diff.mean():+.3f} (SE {paired_se(diff):.3f})"
            + f"; weakest: {', '.join(part['weakest tag'])}"
        )


if __name__ == "__main__":
    main()
