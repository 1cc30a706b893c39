"""Wall time of each stage of the default pipeline on this machine, then of a second run of the same
day (which must reuse every version), in a throwaway data folder.

    .venv/bin/python benchmarks/pipeline_timing.py [--config my.yaml] [--date 2026-11-22]

Prints seconds per stage for both runs and the ratio of the second to the first. Run `hominem setup`
first (the student folder under data/models/ is reused, not rebuilt).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from hominem_pipeline.core.config_loader import load_config
from hominem_pipeline.core.models import prepare_student
from hominem_pipeline.core.runner import run_stage
from hominem_pipeline.core.stages import STAGES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=None, help="overlay on config/hominem.yaml")
    parser.add_argument("--date", default="2026-11-22", help="partition to build")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    base = load_config(args.config)
    student = prepare_student(base)
    with tempfile.TemporaryDirectory(prefix="hominem-bench-") as tmp:
        cfg = load_config(
            args.config,
            overrides={
                "project": {"data_dir": tmp},
                "tracking": {"mlflow_uri": f"sqlite:///{tmp}/mlflow.db", "artifact_root": f"{tmp}/mlartifacts"},
                "models": {"student": {"path": str(student)}},
            },
        )
        timings: dict[str, list[float]] = {s.name: [] for s in STAGES if s.daily}
        hits: dict[str, list[bool]] = {s.name: [] for s in STAGES if s.daily}
        totals = []
        for _ in range(2):
            started = time.perf_counter()
            for spec in [s for s in STAGES if s.daily]:
                t0 = time.perf_counter()
                result = run_stage(spec, cfg, args.date)
                timings[spec.name].append(time.perf_counter() - t0)
                hits[spec.name].append(result.cache_hit)
            totals.append(time.perf_counter() - started)

    print(f"{'stage':<22}{'first run s':>12}{'second run s':>14}  second run reused")
    for spec in [s for s in STAGES if s.daily]:
        first, second = timings[spec.name]
        print(f"{spec.name:<22}{first:>12.1f}{second:>14.2f}  {hits[spec.name][1]}")
    print(f"{'total':<22}{totals[0]:>12.1f}{totals[1]:>14.2f}  ratio second/first = {totals[1] / totals[0]:.3f}")


if __name__ == "__main__":
    main()
