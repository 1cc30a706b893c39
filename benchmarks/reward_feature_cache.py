"""The reward model of the next day: training the default reward model on a day's teacher labels and
the shipped people's pairs with the features cache empty (a fresh clone's first day), then again on the
same texts with the cache the first run filled (every later day: the shipped pairs are the same texts
each day, and a day's labels are read again by the days whose window holds them).

Prints each run's seconds, the ratio, the cache's hits, and how far the two models' scalars differ on
the contrast fixtures' replies (a cached row equals the computed one up to float rounding).

    .venv/bin/python benchmarks/reward_feature_cache.py --project <a project after make run>

Reads the project's newest teacher_labels and this code's config (its people_pairs files); needs no
../shared data.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import config_on, newest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--project",
        type=Path,
        default=ROOT,
        help="the project whose teacher labels and student are used (default: this repo)",
    )
    args = ap.parse_args()

    import numpy as np
    import pandas as pd

    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures
    from hominem_pipeline.core.lm.models import reward_backbone, student_path
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline.core.teacher.base import rubric_system

    project = args.project.resolve()
    cfg = config_on(project)  # this code's config, the project's data and student
    labels_file = newest(cfg, "teacher_labels", any_settings=True).file("labels.parquet")
    labels, human = pd.read_parquet(labels_file), people_pairs(cfg)
    print(
        f"{len(labels)} teacher labels ({labels_file.parent.parent.name}), "
        f"{0 if human is None else len(human)} shipped people's pairs",
        flush=True,
    )
    tmp = Path(tempfile.mkdtemp(prefix="hominem-feature-cache-"))
    runs = {}
    for name in ("empty cache", "filled cache"):
        started = time.monotonic()
        metrics = train_reward_model(
            labels,
            dimensions=cfg.dimension_names,
            sources=RewardSources(
                reward_backbone(cfg),
                judge_system=rubric_system(cfg.labeling),
                judge_question=cfg.labeling.scalar_question,
                feature_cache=tmp / "cache",
                guard_student=student_path(cfg) if cfg.reward_model.guards else None,
            ),
            cfg=cfg.reward_model,
            out_dir=tmp / name,
            seed=cfg.project.seed,
            data_digest="benchmark",
            date=labels_file.parent.parent.name,
            human_pairs=human,
        ).metrics
        runs[name] = (time.monotonic() - started, metrics)
        print(
            f"{name}: {runs[name][0]:.1f} s (pooled rows read from the cache "
            f"{metrics.get('feature_cache_pooled_hits')}, guard rows "
            f"{metrics.get('feature_cache_guards_hits')})",
            flush=True,
        )
    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names) if cfg.fixtures.file else []
    prompts = [f.prompt for f in fixtures for _ in range(2)]
    replies = [r for f in fixtures for r in (f.better, f.worse)]
    scalars = [RewardModel.load(tmp / name).raw_scores(prompts, replies)["scalar"] for name in runs]
    cold, warm = runs["empty cache"][0], runs["filled cache"][0]
    print(
        f"\n| run | seconds |\n| --- | --- |\n| features cache empty | {cold:.1f} |\n| filled by the "
        f"first run | {warm:.1f} ({cold / warm:.1f}x faster) |"
    )
    print(
        f"largest difference between the two models' scalars on {len(replies)} fixture replies: "
        f"{np.abs(scalars[0] - scalars[1]).max():.2e}"
    )


if __name__ == "__main__":
    main()
