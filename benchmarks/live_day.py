"""A simulated day of the live loop on the default offline models: a fixed script of conversations and
choices, the online updates it starts, and after each promotion the live adapter's win rate over the
base (by the reward model, on the held-out prompts) and its memory-probe facts beside the base's.

The script: the hand-written contrast pairs people agree on (config/human/hominem-contrast-pairs.jsonl,
not the evaluation's fixtures), each a message with two replies and the person's choice of the better
one, written to the interaction log in `--rounds` rounds of `--per-round` conversations, with a few
facts about the person stated along the way ("My name is Ana", "My dog is called Rex"). After each round
one online update runs (`hominem live update`'s `run_update`: a short `dual` update of the live adapter
on a replay batch, the fast-loop gate); after each promotion the live adapter is compared with the base.
Goal: no memory-probe fact the base knew is lost.

In a scratch project (the repo's config, `data/` linked to this project's built versions), so the
project's own live state and log are untouched.

    .venv/bin/python benchmarks/live_day.py
    .venv/bin/python benchmarks/live_day.py --adapter data/lora_adapter/<day>/<version> --rounds 4 --per-round 12

Needs `make run` (a daily adapter, with its reward model and preference pairs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import scratch_project

FACTS = ["Hi, my name is Ana.", "My dog is called Rex.", "I live in Porto.", "My favorite color is green."]


def script_events(pairs: list[dict], facts: list[str], day: str, round_: int) -> list[dict]:
    """The round's log events: per pair, a message, its two replies as turns and the person's choice; the
    round's stated fact as the first message of its first conversation."""
    from benchmarks.common import choice_event, turn_event

    events = []
    for i, pair in enumerate(pairs):
        said = (f"{facts[round_ % len(facts)]} " if i == 0 and facts else "") + pair["prompt"]
        messages = [{"role": "user", "content": said}]
        stamp = f"{day}T{9 + round_:02d}:{i:02d}:00+00:00"
        good, bad = f"r{round_}-{i}-good", f"r{round_}-{i}-bad"
        session = f"r{round_}-{i}"
        events += [
            turn_event(good, stamp, messages, pair["chosen"], rater="sim", session=session),
            turn_event(bad, stamp, messages, pair["rejected"], rater="sim", session=session),
            choice_event(f"r{round_}-{i}-c", stamp, good, bad, rater="sim"),
        ]
    return events


def against_base(cfg, adapter: Path, prompts: list[str]) -> dict:
    """The live adapter against the base: the gate's figures (win rate by the reward model, facts)."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.lm.models import load_student, student_path
    from hominem_pipeline.core.online.gate import GateHealth, GateModels, GateQuestions, GateSides, run_gate
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.reward.model import RewardModel

    base, tokenizer = load_student(student_path(cfg))
    report = run_gate(
        GateSides(adapter, None),
        cfg=cfg,
        models=GateModels(base, tokenizer, RewardModel.load(LiveState(cfg.data_dir).reward_model_path())),
        questions=GateQuestions(prompts, read_memory_rows(memory_paths(cfg)), seed=cfg.project.seed),
        health=GateHealth(1.0),
    )
    f = report.figures
    return {
        "win_rate_vs_base": f["win_rate_vs_live"],
        "facts_asked": f["facts_asked"],
        "facts_base": f["facts_live"],
        "facts_live": f["facts_candidate"],
        "facts_lost": f["facts_lost"],
        "lost": f["facts_lost_prompts"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=ROOT)
    ap.add_argument(
        "--adapter", help="the daily adapter live at the start (default: the newest built under the config)"
    )
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--per-round", type=int, default=12, help="conversations (each a choice) per round")
    args = ap.parse_args()

    from hominem_pipeline.core.online.updates import held_out_prompts, run_update, update_sources

    tmp, cfg, state = scratch_project(args.project.resolve(), args.adapter)
    data, adapter = cfg.data_dir, state.adapter_path()
    prompts = held_out_prompts(cfg, update_sources(cfg, state)[1])
    pairs = [
        json.loads(line)
        for line in (ROOT / "config" / "human" / "hominem-contrast-pairs.jsonl").read_text().splitlines()
        if line.strip()
    ]
    day = time.strftime("%Y-%m-%d", time.gmtime())
    log = data / cfg.serving.log_dir / "log" / f"{day}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"round": 0, "outcome": "start", "live": adapter.name, **against_base(cfg, adapter, prompts)}]
    print(f"start: {adapter.name}: {rows[-1]}")
    for r in range(args.rounds):
        chunk = pairs[r * args.per_round : (r + 1) * args.per_round]
        with open(log, "a") as fh:
            fh.write("".join(json.dumps(e) + "\n" for e in script_events(chunk, FACTS, day, r)))
        started = time.monotonic()
        done = run_update(cfg, by="benchmark", reason=f"simulated day, round {r + 1}")
        row = {
            "round": r + 1,
            "outcome": done.outcome,
            "live": state.current().version,
            "update_s": round(time.monotonic() - started, 1),
            "partial_rhi": done.partial_rhi,
            "win_rate_vs_live": done.gate.get("win_rate_vs_live"),
            "items": done.items,
        }
        if done.outcome == "promoted":
            row |= against_base(cfg, state.adapter_path(), prompts)
        else:
            row["reason"] = done.reason
        rows.append(row)
        print(f"round {r + 1}: {row}")
    print(json.dumps(rows, indent=1, default=str))
    lost = [r for r in rows if r.get("facts_lost")]
    print(f"facts the base knew lost after a promotion: {sum(r['facts_lost'] for r in lost)} (goal 0)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
