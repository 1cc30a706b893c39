"""Is the reward model moved by what does not matter, and does it ever prefer a degenerate reply?

For each of the 132 contrast fixtures' messages (config/fixtures/contrast.yaml) and its better reply:

    word salad / spam / cheer   the share of messages where the sensible reply scores higher than the
                                reply made from it (`core.evaluation.degenerate`; goal: every one)
    one typo                    how far one typo in the reply moves the scalar (goal: at most 0.1)
    adversarial flip rate       the probing suite's rewrites of both replies of each fixture pair and the
                                frames around the message: the share of pairs whose order flips (goal: 5%)

and the two replies a new user tried on the first day: tone-deaf cheer to "I failed my driving test again
and I feel stupid." and a helpful reply ending in hashtags. Scorers, side by side: the project's reward model
(newest), and with --preference-lora the score of a LoRA trained by `benchmarks/reward_backbone.py --out`.

    .venv/bin/python benchmarks/reward_robustness.py --project /tmp/fresh
    .venv/bin/python benchmarks/reward_robustness.py --project P --preference-lora DIR [--lora-backbone encoder]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import lora_backbone, newest, project_config

DRIVING = "I failed my driving test again and I feel stupid."
DRIVING_KIND = (
    "That's really disappointing, and it doesn't make you stupid. Lots of people need a few tries. "
    "What tripped you up?"
)
DRIVING_CHEER = (
    "Hey there, buddy! Driving is so much fun, and the open road is waiting for you! Happy driving, everyone!"
)
TRIP = "Any tips for a long flight?"
TRIP_PLAIN = "Drink plenty of water, walk the aisle every hour or two, and bring a neck pillow and earplugs."
TRIP_TAGS = TRIP_PLAIN + " #BeAwesome #TravelToday @MakesItFun"


class LoraScorer:
    """The trained preference LoRA's score as a scorer (`raw_scores` with the scalar alone)."""

    def __init__(self, cfg, folder: Path, backbone: str):
        from hominem_pipeline.core.reward.preference_lora import load_preference_lora

        base, depth, reader = lora_backbone(cfg, backbone)
        self.model, self.tokenizer = load_preference_lora(base, folder, depth)
        self.read = reader(self.tokenizer)

    def raw_scores(self, prompts, replies):
        from hominem_pipeline.core.reward.preference_lora import preference_scores

        return {"scalar": preference_scores(self.model, self.tokenizer, self.read, prompts, replies)}


def measure(scorer, fixtures) -> dict:
    from hominem_pipeline.core.evaluation.degenerate import degenerate_report, typo_shifts
    from hominem_pipeline.core.evaluation.probes import adversarial

    prompts, better, worse = [f.prompt for f in fixtures], [f.better for f in fixtures], [f.worse for f in fixtures]
    report = degenerate_report(scorer, prompts, better).set_index("kind")
    typo = typo_shifts(scorer, prompts, better)
    flips = adversarial(scorer, prompts, better, worse, seed=0)
    s = np.asarray(
        scorer.raw_scores([DRIVING, DRIVING, TRIP, TRIP], [DRIVING_KIND, DRIVING_CHEER, TRIP_PLAIN, TRIP_TAGS])[
            "scalar"
        ]
    )
    counted = flips.dropna(subset=["flip_rate"])
    return {
        **{f"sensible over {k}": float(report.loc[k, "sensible_higher"]) for k in report.index},
        "one typo: mean shift": typo["mean_shift"],
        "one typo: max shift": typo["max_shift"],
        "one typo: share over 0.1": typo["over_0_1"],
        "adversarial flip rate": float(np.average(counted["flip_rate"], weights=counted["pairs"])),
        **{f"flip rate: {r.perturbation}": r.flip_rate for r in counted.itertuples()},
        "driving test: kind - cheer": float(s[0] - s[1]),
        "flight: plain - hashtags": float(s[2] - s[3]),
        "worst spam": report.loc["spam", "worst"],
        "worst cheer": report.loc["cheer", "worst"],
        "worst typo": typo["worst"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True, help="a project with a built reward model")
    ap.add_argument(
        "--preference-lora", type=Path, default=None, help="a LoRA from benchmarks/reward_backbone.py --out"
    )
    ap.add_argument("--lora-backbone", choices=("student", "encoder"), default="student", help="what the LoRA is on")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()

    from hominem_pipeline.core.evaluation.fixtures import load_fixtures
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES
    from hominem_pipeline.core.reward.model import RewardModel

    project = args.project.resolve()
    cfg = project_config(project)
    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
    ref = newest(cfg, "reward_model")
    model = RewardModel.load(ref.path)
    model.use_feature_cache(project / "data" / FEATURE_CACHE, project / SHIPPED_FEATURES)
    scorers = {f"reward model {ref.partition}/{ref.version}": model}
    if args.preference_lora:
        scorers[f"preference LoRA {args.preference_lora.name}"] = LoraScorer(
            cfg, args.preference_lora, args.lora_backbone
        )
    results = {name: measure(scorer, fixtures) for name, scorer in scorers.items()}
    names = list(results)
    print(f"{'':34}" + "".join(f"{n[:28]:>30}" for n in names))
    for key in results[names[0]]:
        if key.startswith("worst"):
            continue
        print(f"{key:34}" + "".join(f"{results[n][key]:>30.3f}" for n in names))
    for name in names:
        for key in ("worst spam", "worst cheer", "worst typo"):
            print(f"{name} {key}: {results[name][key]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
