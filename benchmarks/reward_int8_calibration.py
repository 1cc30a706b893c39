"""What the int8 calibration costs inside the reward_model stage, with a frozen backbone (the default).

Training calibrates the int8 scoring path (`reward_model.measure_int8`): the activation ranges of 64
training replies, then int8's error against fp32 on 64 others. With a frozen backbone both fp32 parts
come from training's own pass over the replies (`pooled_and_int8_ranges`); this script trains the
reward model as the stage does on the window of labels ending at `--date` and, at the stage's call,
times `measure_int8` both ways in the same process: with its own fp32 passes (the baseline, as before
4426bcd) and from training's pass, and prints their recheck margins, which must agree.

    .venv/bin/python benchmarks/reward_int8_calibration.py --date 2026-11-24     # ~4 min on a week here

Reads the project's data/ (teacher_labels); needs no ../shared data.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from reward_teacher_agreement import window_labels  # noqa: E402

from hominem_pipeline.core import reward_model as rm  # noqa: E402
from hominem_pipeline.core.config import load_config  # noqa: E402
from hominem_pipeline.core.models import reward_backbone  # noqa: E402
from hominem_pipeline.core.teacher import rubric_system  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--date", default=None, help="last day of the label window (default: the latest teacher_labels partition)")
    args = ap.parse_args()
    cfg = load_config(root=ROOT)
    if cfg.reward_model.backbone.finetune != "frozen":
        sys.exit(f"reward_model.backbone.finetune is {cfg.reward_model.backbone.finetune!r}: the shortcut measured here needs a frozen backbone (the default)")
    labels, days = window_labels(cfg, args.date)
    print(f"{len(labels)} labels ({', '.join(days)}); training the reward model as the stage does", flush=True)

    measure, record = rm.measure_int8, rm.pooled_and_int8_ranges

    def timed_record(*a, **k):
        started = time.perf_counter()
        out = record(*a, **k)
        print(f"training's frozen pass over every reply, the calibration replies' ranges recorded on the way: {time.perf_counter() - started:.1f} s", flush=True)
        return out

    def both_ways(net, encoded, seed, batch_size, pad, pooled=None, absmax=None):
        started = time.perf_counter()
        own = measure(net, encoded, seed, batch_size, pad)
        t_own = time.perf_counter() - started
        started = time.perf_counter()
        shared = measure(net, encoded, seed, batch_size, pad, pooled=pooled, absmax=absmax)
        t_shared = time.perf_counter() - started
        if own is None or shared is None:
            sys.exit("this PyTorch build's quantized engine refused the layers: there is no int8 path to calibrate here")
        print(f"measure_int8 on {len(encoded)} labeled replies: its own fp32 passes {t_own:.1f} s, from training's pass {t_shared:.1f} s "
              f"({t_own / t_shared:.1f}x); recheck margin {own[1]['recheck_margin']:.4f} and {shared[1]['recheck_margin']:.4f}", flush=True)
        return shared

    rm.measure_int8, rm.pooled_and_int8_ranges = both_ways, timed_record
    with tempfile.TemporaryDirectory() as tmp:
        rm.train_reward_model(labels, dimensions=cfg.dimension_names, backbone_path=reward_backbone(cfg), cfg=cfg.reward_model, out_dir=Path(tmp),
                              seed=0, data_digest="benchmark", date="benchmark", judge_system=rubric_system(cfg.labeling),
                              judge_question=cfg.labeling.scalar_question)


if __name__ == "__main__":
    main()
