"""Online update settings compared on the same feedback: does a short update of the live adapter keep
the memory-probe facts the live adapter knows (the gate refuses one that loses any), learn the fact the
person stated, and win over the live adapter, and what does it cost.

Each case is one round of the simulated day (benchmarks/live_day.py): `--per-round` hand-written pairs
people agree on as choices in the interaction log, the first message stating a fact about the person;
then one online update (`run_update`: replay batch, `online.max_steps` dual steps, the fast-loop gate)
from the same daily adapter. Every `--variant NAME=JSON` (config overrides, e.g. policy or online
settings) runs every case in the same process, in a scratch project (the repo's config, `data/` linked
to `--project`'s built versions), its live state reset to the daily adapter and its extracted facts
cleared before each case.

    .venv/bin/python benchmarks/online_update_settings.py --cases 3
    .venv/bin/python benchmarks/online_update_settings.py --variant default={} \\
        --variant lr2e-4='{"policy": {"learning_rate": 2e-4}}'

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

from benchmarks.common import named_settings, reset_live, scratch_project
from benchmarks.live_day import FACTS, script_events

DEFAULT_VARIANTS = {
    "default": {},
    "6_steps": {"online": {"max_steps": 6}},
    "6_steps_lr_3e-4": {"online": {"max_steps": 6, "learning_rate": 3.0e-4}},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=ROOT)
    ap.add_argument(
        "--adapter",
        help="the daily adapter live at the start of every case (default: the newest built under the config)",
    )
    ap.add_argument("--cases", type=int, default=3)
    ap.add_argument("--per-round", type=int, default=12, help="choices per case")
    ap.add_argument(
        "--variant", action="append", default=[], metavar="NAME=JSON", help="config overrides to compare (repeatable)"
    )
    args = ap.parse_args()
    variants = named_settings(args.variant, "--variant", """'{"online": {"max_steps": 6}}'""")
    variants = variants or DEFAULT_VARIANTS

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.updates import run_update

    tmp, cfg0, state = scratch_project(args.project.resolve(), args.adapter)
    start = state.current()
    pairs = [
        json.loads(line)
        for line in (ROOT / "config" / "human" / "hominem-contrast-pairs.jsonl").read_text().splitlines()
        if line.strip()
    ]
    day = time.strftime("%Y-%m-%d", time.gmtime())
    rows = []
    for name, overrides in variants.items():
        cfg = load_config(root=cfg0.root, overrides=overrides)
        for case in range(args.cases):
            reset_live(cfg, start.version, f"{name}, case {case + 1}")
            log = cfg.data_dir / cfg.serving.log_dir / "log" / f"{day}.jsonl"
            log.parent.mkdir(parents=True, exist_ok=True)
            chunk = pairs[case * args.per_round : (case + 1) * args.per_round]
            log.write_text("".join(json.dumps(e) + "\n" for e in script_events(chunk, FACTS, day, case)))
            done = run_update(cfg, by="benchmark", reason=f"settings benchmark: {name}, case {case + 1}")
            g = done.gate
            gained = (g.get("facts_candidate", 0) - (g.get("facts_live", 0) - g.get("facts_lost", 0))) if g else None
            rows.append(
                {
                    "variant": name,
                    "case": case + 1,
                    "outcome": done.outcome,
                    "facts_live": g.get("facts_live"),
                    "facts_lost": g.get("facts_lost"),
                    "facts_gained": gained,
                    "lost": g.get("facts_lost_prompts"),
                    "win_rate_vs_live": g.get("win_rate_vs_live"),
                    "partial_rhi": done.partial_rhi,
                    **{f"{k}_s": v for k, v in (done.seconds or {}).items()},
                }
            )
            print(json.dumps(rows[-1], default=str), flush=True)

    print(
        "\n| variant | promoted | facts lost (of those the live knew) | facts gained, mean | win rate "
        "over the live | partial RHI | train s | gate s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in variants:
        rs = [r for r in rows if r["variant"] == name]
        mean = lambda k: sum(r[k] or 0 for r in rs) / len(rs)  # noqa: E731
        print(
            f"| {name} | {sum(r['outcome'] == 'promoted' for r in rs)}/{len(rs)} | "
            f"{sum(r['facts_lost'] or 0 for r in rs)} "
            f"(of {sum(r['facts_live'] or 0 for r in rs)}) | {mean('facts_gained'):.1f} | "
            f"{mean('win_rate_vs_live'):.0%} | "
            f"{mean('partial_rhi'):.3f} | {mean('train_s'):.0f} | {mean('gate_s'):.0f} |"
        )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
