"""Do replies a person marked distressing become rarer in the live adapter's replies to the same prompts,
through the online updates?

The day: `--prompts` of the project's held-out prompts, `--k` replies to each sampled from the daily adapter
live at the start (the serving's temperature and top-p), written to the interaction log as served turns.
A scripted rater labels each reply's emotion by a fixed rule: distress (valence -2, high arousal) when the
reward model scores it in the bottom quarter of the day's replies, warmth (+1) in the top quarter, neutral
(0) between. The labels are what `feedback_tables` makes emotion-weighted pairs of (a warmer reaction
preferred over a colder one to the same message), so a distressing reply is always the rejected side.
The day is played in `--rounds` rounds, each followed by one online update (`run_update`), with the
fast-loop gate opened so that every update goes live (as in `nudge_response.py`).

Arms, each from the same start and on the same turns:
- `emotion`: the rater's labels;
- `control`: the same labels shuffled among each prompt's replies: the same number of emotion pairs and
  weights, trained the same way, but with no relation to what the rater found distressing.

Judged at the end, against the adapter live at the start:
- **the marked replies' probability**: per prompt, the change (end minus start) of the distress-marked
  reply's per-token log-probability, minus the mean change of the prompt's other replies (nats per
  token; negative: the marked reply became rarer relative to its siblings), mean ± standard error over
  the prompts with one;
- **fresh samples**: `--k` new replies to each prompt from the start adapter and from the end adapter
  (the same seed, another than the day's), and the share the rater's rule would mark distressing (at or
  below the day's bottom-quarter threshold).
Goal: `emotion` below `control` on both.

    .venv/bin/python benchmarks/emotion_response.py --project P .venv/bin/python benchmarks/emotion_response.py
    --project P --adapter data/lora_adapter/<day>/<version> --prompts 24 --k 4 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import OPEN_GATE, paired_se, sample_replies, scratch_project


def per_token_logps(cfg, adapter: Path, prompts: list[str], replies: list[list[str]]) -> np.ndarray:
    """Each reply's log-probability per token under the student with `adapter`, shaped like `replies`."""
    from hominem_pipeline.core.evaluation.people_pairs import exchange_logps
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.lora import load_policy, merged

    model, tokenizer = load_policy(student_path(cfg), adapter, None)
    exchanges = [(p, r) for p, rs in zip(prompts, replies) for r in rs]
    with merged(model):
        sums, counts = exchange_logps(model, tokenizer, exchanges, cfg.evaluation.batch_size)
    return (sums / counts).reshape(len(prompts), -1)


def rate(scalars: np.ndarray, low: float, high: float) -> np.ndarray:
    """The scripted rater's valence of each reply: -2 at or below `low`, +1 at or above `high`, else 0."""
    return np.where(scalars <= low, -2, np.where(scalars >= high, 1, 0))


def day_events(
    prompts: list[str], replies: list[list[str]], valence: np.ndarray, day: str, round_: int, first: int
) -> list[dict]:
    """The round's log events: each prompt's served turns and the rater's emotion label on each."""
    from benchmarks.common import turn_event

    events = []
    for i, (prompt, rs) in enumerate(zip(prompts, replies)):
        messages = [{"role": "user", "content": prompt}]
        stamp = f"{day}T{9 + round_:02d}:{i:02d}:00+00:00"
        for j, reply in enumerate(rs):
            tid = f"e{first + i}-{j}"
            v = int(valence[i, j])
            events += [
                turn_event(tid, stamp, messages, reply, rater="sim", session=f"e{first + i}"),
                {
                    "kind": "emotion",
                    "id": f"{tid}-emo",
                    "time": stamp,
                    "rater": "sim",
                    "turn": tid,
                    "valence": v,
                    "tags": ["high_arousal"] if v <= -2 else [],
                },
            ]
    return events


def run_arm(project: Path, adapter: str | None, arm: str, day: dict, args) -> dict:
    from hominem_pipeline.core.online.updates import run_update

    tmp, cfg, state = scratch_project(project, adapter, overrides=OPEN_GATE)
    try:
        prompts, replies, valence = day["prompts"], day["replies"], day["valence"]
        if arm == "control":
            rng = np.random.default_rng(args.seed)
            valence = np.stack([rng.permutation(v) for v in valence])
        today = time.strftime("%Y-%m-%d", time.gmtime())
        log = cfg.data_dir / cfg.serving.log_dir / "log" / f"{today}.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        per = -(-len(prompts) // args.rounds)
        outcomes = []
        for r in range(args.rounds):
            part = slice(r * per, (r + 1) * per)
            with open(log, "a") as fh:
                fh.write(
                    "".join(
                        json.dumps(e) + "\n"
                        for e in day_events(prompts[part], replies[part], valence[part], today, r, r * per)
                    )
                )
            started = time.monotonic()
            done = run_update(cfg, by="benchmark", reason=f"{arm}, round {r + 1}")
            outcomes.append(done.outcome)
            print(
                f"  {arm} round {r + 1}: {done.outcome} in {time.monotonic() - started:.0f} s ({done.items})",
                flush=True,
            )
        end = state.adapter_path()
        after = per_token_logps(cfg, end, prompts, replies)
        fresh = sample_replies(cfg, end, prompts, args.k, args.seed + 1)
        scalars = day["reward_model"].raw_scores(
            [p for p, rs in zip(prompts, fresh) for _ in rs], [r for rs in fresh for r in rs]
        )["scalar"]
        return {
            "arm": arm,
            "outcomes": outcomes,
            "logps": after,
            "fresh_distress": np.asarray(scalars, dtype=float) <= day["low"],
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def the_day(project: Path, adapter: str | None, args) -> dict:
    """The start: the day's sampled replies, their ratings, their log-probabilities under the start adapter,
    and the start adapter's fresh samples (what the arms' ends are compared with)."""
    from hominem_pipeline.core.online.updates import held_out_prompts, reward_model_at, update_sources

    tmp, cfg, state = scratch_project(project, adapter)
    try:
        start = state.adapter_path()
        rm_path, sources = update_sources(cfg, state)
        prompts = held_out_prompts(cfg, sources)[: args.prompts]
        reward_model = reward_model_at(rm_path, cfg)
        started = time.monotonic()
        replies = sample_replies(cfg, start, prompts, args.k, args.seed)
        flat = lambda rs: [r for x in rs for r in x]  # noqa: E731
        each = [p for p in prompts for _ in range(args.k)]
        scalars = np.asarray(reward_model.raw_scores(each, flat(replies))["scalar"], dtype=float)
        low, high = np.quantile(scalars, [0.25, 0.75])
        valence = rate(scalars, low, high).reshape(len(prompts), args.k)
        fresh = sample_replies(cfg, start, prompts, args.k, args.seed + 1)
        fresh_scalars = np.asarray(reward_model.raw_scores(each, flat(fresh))["scalar"], dtype=float)
        print(
            f"the day: {len(prompts)} prompts x {args.k} replies sampled and rated in "
            f"{time.monotonic() - started:.0f} s; "
            f"{int((valence == -2).sum())} distressing, {int((valence == 1).sum())} warm",
            flush=True,
        )
        return {
            "prompts": prompts,
            "replies": replies,
            "valence": valence,
            "low": float(low),
            "reward_model": reward_model,
            "before": per_token_logps(cfg, start, prompts, replies),
            "fresh_distress": fresh_scalars <= low,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def marked_move(before: np.ndarray, after: np.ndarray, valence: np.ndarray) -> tuple[float, float, int]:
    """Per prompt with a distress-marked reply: its change of per-token log-probability minus the mean change
    of the prompt's other replies. (mean, standard error, prompts)."""
    change = after - before
    moves = [
        change[i][valence[i] == -2].mean() - change[i][valence[i] != -2].mean()
        for i in range(len(change))
        if (valence[i] == -2).any() and (valence[i] != -2).any()
    ]
    m = np.asarray(moves)
    return float(m.mean()), paired_se(m), len(m)


def share(flags: np.ndarray) -> tuple[float, float]:
    p = float(flags.mean())
    return p, float(np.sqrt(p * (1 - p) / len(flags)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--project", type=Path, required=True, help="a `make run` project (its daily adapter, reward model and pairs)"
    )
    ap.add_argument("--adapter", help="the daily adapter live at the start (default: the newest built)")
    ap.add_argument("--arms", nargs="+", default=["control", "emotion"], choices=["control", "emotion"])
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--k", type=int, default=4, help="replies sampled per prompt")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    project = args.project.resolve()
    day = the_day(project, args.adapter, args)
    rows = []
    for arm in args.arms:
        started = time.monotonic()
        rows.append(run_arm(project, args.adapter, arm, day, args))
        print(f"{arm}: {time.monotonic() - started:.0f} s", flush=True)
    s0, e0 = share(day["fresh_distress"])
    print(
        "\nthe distress-marked replies' per-token log-probability change relative to their siblings' "
        "(end minus start, nats/token), "
        f"and the share of fresh samples the rater would mark distressing (start: {s0:.1%} ± {e0:.1%})"
    )
    print(f"{'arm':8s} {'marked reply':>20s} {'prompts':>8s} {'fresh distress':>18s} {'paired change':>16s}  updates")
    out = []
    for r in rows:
        m, se, n = marked_move(day["before"], r["logps"], day["valence"])
        s, e = share(r["fresh_distress"])
        d = r["fresh_distress"].astype(float) - day["fresh_distress"].astype(float)
        print(
            f"{r['arm']:8s} {m:+10.3f} ± {se:6.3f} {n:>8d} {s:9.1%} ± {e:5.1%} {d.mean():+8.1%} ± "
            f"{paired_se(d):5.1%}  {', '.join(r['outcomes'])}"
        )
        out.append(
            {
                "arm": r["arm"],
                "marked_move": [m, se, n],
                "fresh_distress": [s, e],
                "fresh_change": [float(d.mean()), paired_se(d)],
                "outcomes": r["outcomes"],
            }
        )
    print(json.dumps({"start_fresh_distress": [s0, e0], "threshold": day["low"], "arms": out}, indent=1))


if __name__ == "__main__":
    main()
