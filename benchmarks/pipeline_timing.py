"""Wall time and peak memory of each stage of the default pipeline on this machine, then the time of a
second run of the same day (which must reuse every version), in a throwaway data folder.

    .venv/bin/python benchmarks/pipeline_timing.py [--config my.yaml] [--date 2026-11-22]

Prints per stage: seconds in both runs, the peak resident memory of this process while the stage ran
(sampled every 50 ms; the stages run one after another in this one process, as in a Dagster run of the
default job) and how much above the resident memory it started with; then the ratio of the second
run's time to the first's and the whole run's peak (goal: under 8 GB). Run `hominem setup` first (the
student folder under data/models/ is reused, not rebuilt).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from pathlib import Path

import psutil

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.lm.models import prepare_student
from hominem_pipeline.core.pipeline.runner import run_stage
from hominem_pipeline.core.pipeline.stages import STAGES


class PeakMemory:
    """This process's resident memory, sampled on a thread: the peak since the last `reset`."""

    def __init__(self, every: float = 0.05):
        self._process, self._every = psutil.Process(), every
        self.start = self.peak = self._process.memory_info().rss
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def reset(self) -> None:
        self.start = self.peak = self._process.memory_info().rss

    def close(self) -> None:
        self._stop.set()


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
        memory: dict[str, tuple[int, int]] = {}  # first run: (peak, peak above the stage's start)
        totals = []
        meter = PeakMemory()
        for run in range(2):
            started = time.perf_counter()
            for spec in [s for s in STAGES if s.daily]:
                meter.reset()
                t0 = time.perf_counter()
                result = run_stage(spec, cfg, args.date)
                timings[spec.name].append(time.perf_counter() - t0)
                hits[spec.name].append(result.cache_hit)
                if run == 0:
                    memory[spec.name] = (meter.peak, meter.peak - meter.start)
            totals.append(time.perf_counter() - started)
        meter.close()

    gb = 1024**3
    print(f"{'stage':<22}{'first run s':>12}{'second run s':>14}{'peak GB':>9}{'added GB':>10}  second run reused")
    for spec in [s for s in STAGES if s.daily]:
        first, second = timings[spec.name]
        peak, added = memory[spec.name]
        print(
            f"{spec.name:<22}{first:>12.1f}{second:>14.2f}{peak / gb:>9.2f}{added / gb:>10.2f}  {hits[spec.name][1]}"
        )
    worst = max(memory, key=lambda k: memory[k][0])
    print(
        f"{'total':<22}{totals[0]:>12.1f}{totals[1]:>14.2f}  ratio second/first = {totals[1] / totals[0]:.3f}; "
        f"peak {memory[worst][0] / gb:.2f} GB in {worst} (goal: under 8 GB)"
    )


if __name__ == "__main__":
    main()
