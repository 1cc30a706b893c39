"""Which online-update settings teach a person's taste? The same choices, one update under each setting (an arm),
and the share of held-out replies that keep the taste after it.

The person's choices, shared by every arm (`--pools` keeps them for the next run): the daily adapter answers each
teaching message of the taste (`taste_test.messages`) `--pool` times, sampled as served and shown as the page shows
them (a reply the token limit cut ends at its last sentence); where a pool holds a reply that keeps the taste and one
that does not, the person chooses the first that keeps it over the first that does not (the pair the page's surest
pick shows once their taste model knows the taste), until `--choices` choices. They go into each arm's interaction
log as the service writes them (two turns and a clear choice, rater `local`).

The arms share one scratch project (`benchmarks/common.scratch_project`: the repo's config, the daily adapter live).
Each arm sets the live state back to the start, leaves only the person's choices in the log and the memory folder
empty, and runs one online update under its overrides (`updates.run_update`: the replay buffer, the taste pairs, the
held-out choices, the training, the gate as configured: its taste checks and no-worse checks). Judged, whether the
gate promoted it or not: `--held-out` messages the person never taught on, `--samples` replies each, sampled as served
with the same seeds for every arm and for the start; the share keeping the taste with its standard error over
messages, each arm against the start paired by message, the replies' mean words (a taste kept by saying less is
seen); and the gate's outcome, its checks, the facts lost, the update's batch by source and its time.

    .venv/bin/python benchmarks/taste_teaching.py --project P --adapter data/lora_adapter/DAY/VERSION \\
        --taste asks_back --arm default={} --arm imitate='{"online": {"taste": {"imitate": true}}}'
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import (
    choice_event,
    named_settings,
    paired_se,
    reset_live,
    sample_replies,
    scratch_project,
    turn_event,
)  # noqa: E402
from benchmarks.taste_test import messages, seed_prompts  # noqa: E402
from hominem_pipeline.core.evaluation.tastes import TASTES, Taste, taste_share, words  # noqa: E402
from hominem_pipeline.core.online.updates import REPLAY_BATCH  # noqa: E402

ARMS = {
    "default": {},
    "imitate": {"online": {"taste": {"imitate": True}}},
    "steps_16": {"online": {"max_steps": 16}},
    "no_teacher": {"online": {"teacher_share": 0.0}},
    "lr_1e-3": {"online": {"learning_rate": 1.0e-3}},
    "imitate_steps_16": {"online": {"max_steps": 16, "taste": {"imitate": True}}},
}


def person_choices(taste: Taste, teach: list[str], pools: list[list[str]], n: int) -> list[tuple[str, str, str]]:
    """(message, chosen, rejected) of the first `n` pools with a reply that keeps the taste and one that does not."""
    out = []
    for message, pool in zip(teach, pools):
        keeps = [r for r in pool if r.strip() and taste.keeps(r)]
        not_keeps = [r for r in pool if r.strip() and not taste.keeps(r)]
        if keeps and not_keeps:
            out.append((message, keeps[0], not_keeps[0]))
        if len(out) == n:
            break
    return out


def write_log(cfg: Any, choices: list[tuple[str, str, str]]) -> None:
    day = time.strftime("%Y-%m-%d", time.gmtime())
    path = cfg.data_dir / cfg.serving.log_dir / "log" / f"{day}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    events = []
    for i, (message, chosen, rejected) in enumerate(choices):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 60 * (len(choices) - i)))
        said = [{"role": "user", "content": message}]
        events += [
            turn_event(f"t{i}a", stamp, said, chosen, session=f"s{i}"),
            turn_event(f"t{i}b", stamp, said, rejected, session=f"s{i}"),
            choice_event(f"c{i}", stamp, f"t{i}a", f"t{i}b"),
        ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def judged(taste: Taste, held_out: list[str], said: list[list[str]]) -> dict[str, Any]:
    s = taste_share(taste, held_out, said)
    return {
        "share": s.share,
        "standard_error": s.standard_error,
        "replies": s.replies,
        "words": float(np.mean([words(r) for replies in said for r in replies])),
        "per_message": list(s.per_message),
    }


def run_arm(
    args: argparse.Namespace, root: Path, start: str, name: str, overrides: dict, choices: list, held_out: list[str]
) -> dict:
    """One online update of the scratch project at `root` under `overrides` (the live state back at `start`, its
    memory folder and log holding only the person's choices), through the gate as configured; its candidate judged
    whether promoted or not."""
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.live import LIVE_DIR, ONLINE_ADAPTERS
    from hominem_pipeline.core.online.updates import run_update

    cfg = load_config(root=root, overrides=overrides)
    reset_live(cfg, start, f"taste teaching: arm {name}")
    write_log(cfg, choices)
    done = run_update(cfg, by="benchmark", reason=f"taste teaching: arm {name}")
    if done.version is None:
        raise SystemExit(f"arm {name}: no update: {done.reason}")
    out = cfg.data_dir / LIVE_DIR / ONLINE_ADAPTERS / done.version
    said = sample_replies(cfg, out, held_out, args.samples, 1000, args.max_tokens, shown=True)
    batch = pd.read_parquet(out / REPLAY_BATCH)
    taste = batch[batch["source"].astype(str).str.startswith("taste:")]
    checks = done.gate.get("checks", {})
    return {
        "arm": name,
        "overrides": overrides,
        "outcome": done.outcome,
        "reason": done.reason,
        "items": done.items,
        "taste_pairs_keeping": int(sum(TASTES[args.taste].keeps(c) for c in taste["chosen"])),
        "checks": {
            k: {f: c.get(f) for f in ("candidate", "reference", "difference", "standard_error", "refused")}
            for k, c in checks.items()
        },
        "facts_lost": done.gate.get("facts_lost"),
        "seconds": done.seconds,
        **judged(TASTES[args.taste], held_out, said),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, required=True, help="a project whose `make run` finished")
    ap.add_argument("--adapter", help="the daily adapter live at the start (default: the newest built)")
    ap.add_argument("--taste", default="asks_back", choices=sorted(TASTES))
    ap.add_argument("--choices", type=int, default=20, help="the person's choices before the update")
    ap.add_argument("--pool", type=int, default=4, help="replies sampled to each teaching message")
    ap.add_argument("--held-out", type=int, default=76, help="held-out messages the share is measured on")
    ap.add_argument("--samples", type=int, default=2, help="replies sampled to each held-out message")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens per reply, as the page asks")
    ap.add_argument(
        "--arm", action="append", default=[], metavar="NAME=JSON", help="config overrides of an arm (repeatable)"
    )
    ap.add_argument("--pools", type=Path, help="the teaching pools: read when the file exists, else written there")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "taste_teaching")
    args = ap.parse_args()
    arms = named_settings(args.arm, "--arm", """steps_16='{"online": {"max_steps": 16}}'""")
    arms = arms or ARMS
    taste = TASTES[args.taste]
    teach, held_out = messages(taste, seed_prompts())
    held_out = held_out[: args.held_out]

    tmp, cfg, state = scratch_project(args.project.resolve(), args.adapter)
    try:
        start = state.adapter_path()
        if args.pools and args.pools.is_file():
            pools = json.loads(args.pools.read_text())
        else:
            t = time.monotonic()
            pools = sample_replies(cfg, start, teach, args.pool, 0, args.max_tokens, shown=True)
            print(f"{len(teach)} teaching messages x {args.pool} replies in {time.monotonic() - t:.0f} s", flush=True)
            if args.pools:
                args.pools.write_text(json.dumps(pools, indent=1) + "\n")
        choices = person_choices(taste, teach, pools, args.choices)
        usable = sum(any(taste.keeps(r) for r in p) and not all(taste.keeps(r) for r in p) for p in pools)
        print(f"the person's choices: {len(choices)} ({usable} of {len(pools)} pools can show the taste)", flush=True)
        t = time.monotonic()
        before = judged(
            taste, held_out, sample_replies(cfg, start, held_out, args.samples, 1000, args.max_tokens, shown=True)
        )
        print(f"start: {before['share']:.1%} +- {before['standard_error']:.1%} ({time.monotonic() - t:.0f} s)")
        rows, live = [], state.current().version  # every arm starts here, whether the one before went live or not
        for name, overrides in arms.items():
            row = run_arm(args, cfg.root, live, name, overrides, choices, held_out)
            d = np.array(row["per_message"]) - np.array(before["per_message"])
            row["against_start"] = {"difference": float(d.mean()), "se": paired_se(d)}
            rows.append(row)
            said = "; ".join(
                f"{k} {c['difference']:+.1%} +- {c['standard_error']:.1%}{' refused' if c['refused'] else ''}"
                for k, c in row["checks"].items()
            )
            print(
                f"{name}: {row['share']:.1%} +- {row['standard_error']:.1%}, against the start "
                f"{d.mean():+.1%} +- {paired_se(d):.1%}; {row['words']:.0f} words; batch {row['items']}, "
                f"{row['taste_pairs_keeping']} taste pairs keeping it; {row['outcome']}, facts lost "
                f"{row['facts_lost']}; {said}; seconds {row['seconds']}",
                flush=True,
            )
            args.out.mkdir(parents=True, exist_ok=True)
            result = {"taste": args.taste, "choices": len(choices), "start": before, "arms": rows}
            (args.out / f"{args.taste}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
