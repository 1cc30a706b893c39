"""How stable the local teacher's pairwise judgements are under rewordings that keep the meaning.

The reward model is asked to order held-out pairs of candidates the way the teacher does (pairs whose
teacher scalar differs by at least 0.1). This script re-rates the stored candidates of the given days
with the offline judge (the same `LocalHFTeacher.rubric_scores` the labeling stage uses) three ways:
the configured wording (it must reproduce the stored labels: the judge is deterministic), the judge's
system text reworded, and the overall question reworded. For each it prints the Pearson correlation of
the scalar with the stored one and the share of the teacher's pairs whose order survives. A pair order
that flips when "strict, fair" becomes "fair and strict" is the judge's noise, not the reply's quality:
no reward model that reads only the conversation can be expected to reproduce it.

    .venv/bin/python benchmarks/teacher_label_stability.py                      # every stored day
    .venv/bin/python benchmarks/teacher_label_stability.py --date 2026-11-22

Reads the project's data/ (teacher labels) and the offline student; needs no ../shared data.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.common.stats import pearson
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.lm.models import student_path
from hominem_pipeline.core.pipeline.lineage import lineage
from hominem_pipeline.core.reward.calibration import same_prompt_pairs
from hominem_pipeline.core.reward.dataset import PAIR_GAP, pairwise_accuracy
from hominem_pipeline.core.teacher.base import expected_score_to_label_value
from hominem_pipeline.core.teacher.local import LocalHFTeacher

REWORDINGS = {
    "as configured": {},
    "judge system reworded": {
        "judge_system": "You are a fair and strict judge of an assistant's replies. You rate one quality at a time, "
        "from 1 (very poor) to 5 (excellent)."
    },
    "overall question reworded": {"scalar_question": "All things considered, how good is this reply for the user?"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--date", action="append", help="a teacher_labels partition (repeat; default: every stored day)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(root=ROOT)
    if cfg.teacher.provider != "local":
        sys.exit(f"teacher.provider is {cfg.teacher.provider!r}: this script re-rates with the local judge only")
    data = lineage(cfg)
    store = data.store
    days = args.date or store.partitions("teacher_labels")
    if not days:
        sys.exit("no teacher_labels stored; run `make run` first")
    refs = {d: data.expected("teacher_labels", d) for d in days}
    if missing := [d for d, ref in refs.items() if ref is None]:
        sys.exit(
            f"no teacher_labels stored for {', '.join(missing)}; stored days: "
            f"{', '.join(store.partitions('teacher_labels')) or 'none'}"
        )
    labels = pd.concat([pd.read_parquet(ref.file("labels.parquet")) for ref in refs.values()], ignore_index=True)
    labels = labels[labels["response"].str.strip().astype(bool)].reset_index(drop=True)
    stored = labels["scalar"].to_numpy(dtype=np.float64)
    pairs = same_prompt_pairs(labels["prompt_id"].to_numpy(), stored, PAIR_GAP)
    print(
        f"{len(labels)} stored labels from {', '.join(days)}; {len(pairs)} teacher pairs (scalar gap >= {PAIR_GAP})",
        flush=True,
    )
    conversations = list(zip(labels["prompt"], labels["response"]))
    print(f"\n{'judge wording':<28} {'Pearson with stored scalar':>27} {'pair orders kept':>17} {'seconds':>8}")
    for name, change in REWORDINGS.items():
        variant = cfg.model_copy(update={"labeling": cfg.labeling.model_copy(update=change)})
        judge = LocalHFTeacher(student_path(cfg), variant, batch_size=cfg.teacher.batch_size)
        started = time.monotonic()
        scores = judge.rubric_scores(conversations)
        scalar = np.array([expected_score_to_label_value("scalar", s["scalar"][0]) for s in scores])
        corr, kept = pearson(stored, scalar), pairwise_accuracy(pairs, scalar)
        print(
            f"{name:<28} {'n/a' if corr is None else f'{corr:.3f}':>27} "
            f"{'n/a' if kept is None else f'{kept:.1%}':>17} {time.monotonic() - started:>8.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
