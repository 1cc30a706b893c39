"""How fast does the preference history index answer over a large log, sqlite and Postgres?

Writes a synthetic interaction log of `--events` events (default 1,000,000) over `--days` day files, in
the service's format: exchanges of two served turns to one conversation, most with a choice between
them, some with a thumb, a nudge or an emotion label; `--raters` raters, `--versions` adapter versions,
the nine seed categories as domains. Then, per backend (sqlite in a temporary folder; Postgres from
Debian's package, started here and stopped after): the time to index the whole log, and each query
(choices of rater R, turns of version V, pairs of domain D: the count and the newest 100 rows) asked
`--queries` times with random keys, p50 and p95 in ms. The baseline, in the same run: answering each
question by reading the log files (what there is without the index), once per question.

The domain of a synthetic turn is read off its prompt, so the encoder's cost (the project classifies a
new turn's message once, when it is indexed) is not in these figures.

Goal (issue 54): each query's p95 under 50 ms over 1,000,000 events, on both backends.

    .venv/bin/python benchmarks/preference_history.py
    .venv/bin/python benchmarks/preference_history.py --events 100000 --backends sqlite
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import turn_event
from hominem_pipeline.core.online.history import HistoryIndex
from hominem_pipeline.core.online.log import read_events

DOMAINS = [
    "emotional_support",
    "disagreement_conflict",
    "moral_dilemma",
    "information_seeking",
    "agency_empowerment",
    "narrative",
    "reasoning",
    "factual",
    "creative",
]
START = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc)


def write_log(folder: Path, events: int, days: int, raters: int, versions: int, seed: int) -> dict[str, int]:
    """The synthetic log; the counts of each kind written."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    counts = {"turn": 0, "choice": 0, "thumb": 0, "nudge": 0, "emotion": 0}
    per_day = events // days
    n = 0
    for day in range(days):
        lines: list[str] = []
        clock = START + dt.timedelta(days=day)
        while len(lines) < per_day:
            n += 1
            domain = rng.choice(DOMAINS)
            rater = f"r{rng.randrange(raters):04d}"
            version = rng.randrange(versions)
            adapter = None if version == 0 else f"lora_adapter/2026-10-{1 + version % 28:02d}/v{version:04x}"
            messages = [{"role": "user", "content": f"{domain}: message {n} about something that matters to me"}]
            ids = [f"t{n}a", f"t{n}b"]
            clock += dt.timedelta(seconds=rng.randrange(1, 5))
            stamp = clock.isoformat()
            for i, tid in enumerate(ids):
                fields = {
                    "session": f"s{n}",
                    "model": "hominem",
                    "adapter": adapter,
                    "reward_model": "reward_model/2026-10-01/rm01",
                    "reward": {"scalar": round(rng.uniform(-1, 1), 3)},
                    "sampling": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 128, "seed": n},
                    "completion_tokens": 20,
                    "rater": rater,
                }
                turn = turn_event(tid, stamp, messages, f"reply {i} to {n}", **fields)
                lines.append(json.dumps(turn, separators=(",", ":")))
                counts["turn"] += 1
            later = (clock + dt.timedelta(seconds=1)).isoformat()
            if rng.random() < 0.85:
                lines.append(
                    json.dumps(
                        {
                            "kind": "choice",
                            "id": f"c{n}",
                            "time": later,
                            "rater": rater,
                            "chosen": ids[rng.randrange(2)],
                            "rejected": ids[0],
                            "strength": rng.choice(["slight", "clear", "strong"]),
                        },
                        separators=(",", ":"),
                    )
                )
                counts["choice"] += 1
            if rng.random() < 0.5:
                lines.append(
                    json.dumps(
                        {
                            "kind": "thumb",
                            "id": f"u{n}",
                            "time": later,
                            "rater": rater,
                            "turn": ids[0],
                            "value": rng.choice(["up", "down"]),
                        }
                    )
                )
                counts["thumb"] += 1
            if rng.random() < 0.1:
                lines.append(
                    json.dumps(
                        {
                            "kind": "nudge",
                            "id": f"n{n}",
                            "time": later,
                            "rater": rater,
                            "turn": ids[1],
                            "dimension": "empathy",
                            "direction": "more",
                        }
                    )
                )
                counts["nudge"] += 1
            if rng.random() < 0.1:
                lines.append(
                    json.dumps(
                        {
                            "kind": "emotion",
                            "id": f"e{n}",
                            "time": later,
                            "rater": rater,
                            "turn": ids[1],
                            "valence": -1,
                            "tags": [],
                        }
                    )
                )
                counts["emotion"] += 1
        (folder / f"{(START + dt.timedelta(days=day)).date()}.jsonl").write_text("\n".join(lines) + "\n")
    return counts


def domain_of(prompts: list[str]) -> list[str]:
    return [p.split(":", 1)[0] for p in prompts]


def scan(folder: Path, question: str, key: str) -> tuple[int, float]:
    """The baseline: answer by reading every log file (the count of matching rows)."""
    started = time.monotonic()
    turn_domain: dict[str, str] = {}
    total = 0
    for path in sorted(folder.glob("*.jsonl")):
        for e in read_events(path):
            if question == "turns" and e["kind"] == "turn":
                total += Path(e["adapter"] or "base").name == key
            elif question == "choices" and e["kind"] == "choice":
                total += e["rater"] == key
            elif question == "pairs":
                if e["kind"] == "turn":
                    turn_domain[e["id"]] = e["messages"][-1]["content"].split(":", 1)[0]
                elif e["kind"] == "choice":
                    total += turn_domain.get(e["chosen"]) == key
    return total, time.monotonic() - started


def measure(
    index: HistoryIndex, queries: int, raters: int, versions: int, rng: random.Random
) -> dict[str, dict[str, float]]:
    asks = {
        "choices of rater": lambda: index.choices_of_rater(f"r{rng.randrange(raters):04d}"),
        "turns of version": lambda: index.turns_of_version(
            rng.choice(["base", *(f"v{v:04x}" for v in range(1, versions))])
        ),
        "pairs of domain": lambda: index.pairs_of_domain(rng.choice(DOMAINS)),
    }
    out = {}
    for name, ask in asks.items():
        ask()  # warm: the first query of a kind pays the plan and the cache
        times, totals = [], []
        for _ in range(queries):
            page = ask()
            times.append(page.seconds * 1000)
            totals.append(page.total)
        out[name] = {
            "p50_ms": float(np.percentile(times, 50)),
            "p95_ms": float(np.percentile(times, 95)),
            "max_ms": float(np.max(times)),
            "mean_rows": float(np.mean(totals)),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--raters", type=int, default=1000)
    ap.add_argument("--versions", type=int, default=60)
    ap.add_argument("--queries", type=int, default=200, help="queries of each kind per backend")
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hominem-history-"))
    started = time.monotonic()
    counts = write_log(work / "log", args.events, args.days, args.raters, args.versions, args.seed)
    size = sum(p.stat().st_size for p in (work / "log").glob("*.jsonl"))
    print(
        f"log: {sum(counts.values()):,} events ({counts}) in {args.days} files, {size / 1e6:.0f} MB, "
        f"written in {time.monotonic() - started:.0f}s",
        flush=True,
    )

    report: dict[str, object] = {
        "events": sum(counts.values()),
        "counts": counts,
        "log_mb": size / 1e6,
        "backends": {},
    }
    baseline = {}
    for question, key in (("choices", "r0001"), ("turns", "v0001"), ("pairs", "reasoning")):
        total, seconds = scan(work / "log", question, key)
        baseline[question] = seconds * 1000
        print(f"baseline, reading the log: {question} ({key}): {total} rows in {seconds * 1000:,.0f} ms", flush=True)
    report["baseline_ms"] = baseline

    for backend in args.backends:
        server = None
        if backend == "postgres":
            from hominem_pipeline.testing.services import PostgresServer

            server = PostgresServer().start()
            url = server.url
        else:
            url = f"sqlite:///{work / 'history.sqlite'}"
        try:
            with HistoryIndex(url) as index:
                stats = index.update(work / "log", domain_of)
                print(
                    f"{backend}: indexed {stats.turns:,} turns and {stats.feedback:,} feedback events in "
                    f"{stats.seconds:.0f}s "
                    f"({(stats.turns + stats.feedback) / stats.seconds:,.0f} events/s)",
                    flush=True,
                )
                figures = measure(index, args.queries, args.raters, args.versions, random.Random(args.seed))
            for name, f in figures.items():
                base = baseline[
                    {"choices of rater": "choices", "turns of version": "turns", "pairs of domain": "pairs"}[name]
                ]
                print(
                    f"  {name}: p50 {f['p50_ms']:.1f} ms, p95 {f['p95_ms']:.1f} ms (max "
                    f"{f['max_ms']:.1f}; {f['mean_rows']:,.0f} rows match on "
                    f"average; reading the log: {base:,.0f} ms, {base / f['p95_ms']:,.0f}x the p95)",
                    flush=True,
                )
            report["backends"][backend] = {"index_seconds": stats.seconds, "queries": figures}  # type: ignore[index]
        finally:
            if server is not None:
                server.stop()
    goal = all(f["p95_ms"] < 50 for b in report["backends"].values() for f in b["queries"].values())  # type: ignore[union-attr]
    print(f"goal (every p95 under 50 ms): {'met' if goal else 'NOT met'}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    import shutil

    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
