"""How long does one tick of the retrain sensor take over a large interaction log?

Writes the synthetic log of `preference_history.py` (`--events`, default 1,000,000, over `--days` day
files: exchanges of two turns, most with a choice, some with a thumb, a nudge or an emotion label) into a
data folder of its own, then times `core.pipeline.retrain.retrain_tick`, the sensor's whole decision (the history
index brought up to date, the counts per channel, the thresholds, the state file):

- the first tick, which indexes the whole log (once per data folder; `hominem history rebuild` does the same);
- a tick after `--new` new events were logged (the goal: under 2 s over 1,000,000 events);
- a tick with nothing new.

The baseline, in the same run: the same counts by reading every day of the log with `human_feedback`'s own
rules (`core.online.feedback.feedback_tables`), what a tick would cost without the index.

    .venv/bin/python benchmarks/retrain_tick.py
    .venv/bin/python benchmarks/retrain_tick.py --events 100000 --backend postgres
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.preference_history import write_log
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.online.feedback import feedback_tables
from hominem_pipeline.core.online.log import (
    log_folder,
    read_events,
)
from hominem_pipeline.core.pipeline.retrain import retrain_tick

GOAL_SECONDS = 2.0


def append_new(folder: Path, n: int, seed: int) -> None:
    """`n` new events on a new day: turns in pairs, each pair with a choice."""
    rng = random.Random(seed)
    day = (dt.date(2026, 10, 1) + dt.timedelta(days=len(list(folder.glob("*.jsonl"))))).isoformat()
    from benchmarks.common import choice_event, turn_event

    lines = []
    for i in range(n // 3):
        messages = [{"role": "user", "content": f"a new message {i}"}]
        for side in "ab":
            turn = turn_event(
                f"new{i}{side}",
                f"{day}T10:00:00+00:00",
                messages,
                f"reply {side}",
                session=f"new{i}",
                completion_tokens=3,
            )
            lines.append(json.dumps(turn))
        chosen = f"new{i}{'ab'[rng.randrange(2)]}"
        lines.append(json.dumps(choice_event(f"newc{i}", f"{day}T10:00:01+00:00", chosen, f"new{i}b")))
    with open(folder / f"{day}.jsonl", "a") as f:
        f.write("\n".join(lines) + "\n")


def counted_by_reading(folder: Path) -> tuple[int, int, float]:
    """(conversations, pairs, seconds): every day of the log through human_feedback's rules."""
    started = time.monotonic()
    conversations = pairs = 0
    for path in sorted(folder.glob("*.jsonl")):
        stats = feedback_tables(list(read_events(path)), path.name).stats
        conversations += stats["conversations"]
        pairs += stats["pairs"] + stats["nudge_pairs"]
    return conversations, pairs, time.monotonic() - started


def timed_tick(cursor, cfg) -> tuple[object, float]:
    started = time.monotonic()
    tick = retrain_tick(cursor, cfg)
    return tick, time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--new", type=int, default=3000, help="events logged between the first tick and the timed one")
    ap.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hominem-retrain-tick-"))
    server = None
    try:
        overrides = {"project": {"data_dir": str(work / "data")}}
        if args.backend == "postgres":
            from hominem_pipeline.testing.services import PostgresServer

            server = PostgresServer().start()
            overrides["history"] = {"url": server.url}
        cfg = load_config(root=ROOT, overrides=overrides)
        folder = log_folder(cfg)
        started = time.monotonic()
        counts = write_log(folder, args.events, args.days, raters=1000, versions=60, seed=args.seed)
        print(
            f"log: {sum(counts.values()):,} events ({counts}) in {args.days} files, written in "
            f"{time.monotonic() - started:.0f}s",
            flush=True,
        )

        tick, cold = timed_tick(None, cfg)
        print(f"first tick (indexes the whole log, {args.backend}): {cold:.1f} s: {tick.reason}", flush=True)
        append_new(folder, args.new, args.seed)
        tick, warm = timed_tick(tick.cursor, cfg)
        print(f"tick after {args.new:,} new events: {warm:.2f} s: {tick.reason}", flush=True)
        tick, idle = timed_tick(tick.cursor, cfg)
        print(f"tick with nothing new: {idle:.2f} s", flush=True)
        conversations, pairs, seconds = counted_by_reading(folder)
        total = json.loads(tick.cursor)
        print(
            f"baseline, reading every day of the log by human_feedback's rules: {seconds:.1f} s "
            f"({conversations:,} conversations, {pairs:,} pairs; "
            f"the tick counted {total['conversations']:,} and {total['preference_pairs']:,}); the tick "
            f"after new events: {seconds / warm:,.0f}x faster",
            flush=True,
        )
        print(
            f"goal (a tick after new events under {GOAL_SECONDS:.0f} s over {sum(counts.values()):,} "
            f"events): {'met' if warm < GOAL_SECONDS else 'NOT met'}"
        )
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
