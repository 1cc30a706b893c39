"""Does nudging "more empathy" move the live adapter toward empathy, and "less" away from it, through the
online updates, with no other dimension falling and no fact lost?

Each arm starts a scratch project (the repo's config, `data/` linked to a `make run` project's built versions) with
the project's daily adapter live, and plays the same simulated day: `--rounds` rounds of `--per-round` people's
choices (the hand-written contrast pairs, config/human/hominem-contrast-pairs.jsonl), each round followed by one
online update (`run_update`). The arms differ only in the nudges: `control` none, `more` a "more empathy" nudge on
`--share` of the round's replies, `less` a "less empathy" nudge on the same share; `more-strong` and `less-strong`
the same nudges under other `online.nudges` settings (`--strong`), measured beside the config's. The fast-loop gate
is opened (skip, rollback and freeze at 0, no win-rate or people's floor) so that every update goes live: this
measures what the updates learn, not what the gate lets through.

Judged at the end, against the adapter live at the start:
- its greedy replies to the held-out prompts (with `--extra-prompts`, the contrast fixtures' too), scored by the
  reward model: each dimension's mean change
  (end minus start) with its paired standard error; and the same on `--samples` sampled replies per
  prompt (the server's sampling, the same seeds on both sides; per prompt the mean of its replies), which
  averages out more of the noise of one reply;
- the contrast fixtures' empathy pairs: the change of its implicit reward (log P(better) - log P(worse)
  minus the base's, nats) on them, with its standard error;
- the memory probe: facts the start adapter answered that the end adapter lost (the gate's probe).
Each arm is then set against control paired by prompt: the arms share the start adapter and the seeds, so
an arm's end minus control's end, prompt by prompt, is what its nudges did, without the spread of the
prompts' own changes.
Goal, on the sampled replies paired with control: `more` above `control` on empathy with no other dimension
falling by more than one standard error, `less` below it, no fact lost.

    .venv/bin/python benchmarks/nudge_response.py --project P .venv/bin/python benchmarks/nudge_response.py
    --project P --arms control more less --rounds 3 --samples 4 --extra-prompts 42
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
from benchmarks.live_day import script_events


def nudges(
    events: list[dict], direction: str | None, share: float, dimension: str, stamp: str, tag: str
) -> list[dict]:
    """A nudge on `share` of the round's replies (every k-th turn), in `direction` (None: none)."""
    if direction is None:
        return []
    turns = [e for e in events if e["kind"] == "turn"]
    step = max(1, round(1 / share)) if share > 0 else len(turns) + 1
    return [
        {
            "kind": "nudge",
            "id": f"{tag}-{i}",
            "time": stamp,
            "rater": "sim",
            "turn": t["id"],
            "dimension": dimension,
            "direction": direction,
        }
        for i, t in enumerate(turns[::step])
    ]


def against_control(row: dict, control: dict, kind: str) -> np.ndarray:
    """Per prompt (per fixture for `kind` fixtures), the arm's change minus control's: its end minus control's end."""
    return np.asarray(row["per_prompt"][kind]) - np.asarray(control["per_prompt"][kind])


def judge(
    cfg,
    start: Path,
    end: Path,
    prompts: list[str],
    fixtures: list,
    reward_model,
    samples: int = 0,
    measured: dict | None = None,
) -> dict:
    """The end adapter against the start: reward-model dimensions of their held-out replies (greedy, and
    the mean of `samples` sampled ones per prompt, the same seeds on both sides), the implicit reward on
    the fixtures, facts lost. `measured` keeps each adapter's figures by its resolved path and the prompts,
    so that the arms' common start is measured once."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.compare import greedy_replies
    from hominem_pipeline.core.evaluation.fixtures import FIXTURE_MAX_LENGTH, base_logp_cache
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.evaluation.people_pairs import implicit_reward
    from hominem_pipeline.core.lm.models import load_student, student_path
    from hominem_pipeline.core.online.gate import GateHealth, GateModels, GateQuestions, GateSides, run_gate
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES

    cache = base_logp_cache(student_path(cfg), cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES))
    measured = {} if measured is None else measured
    figures = {}
    for name, adapter in (("start", start), ("end", end)):
        key = (str(adapter.resolve()), tuple(prompts), tuple(f.prompt for f in fixtures), samples)
        if key not in measured:
            model, tokenizer = load_policy(student_path(cfg), adapter, None)
            replies = [g.text for g in greedy_replies(model, tokenizer, prompts, cfg.evaluation, cfg.project.seed)]
            vector = np.asarray(reward_model.raw_scores(prompts, replies)["vector"], dtype=float)
            _, move = implicit_reward(
                model,
                tokenizer,
                [f.prompt for f in fixtures],
                [f.better for f in fixtures],
                [f.worse for f in fixtures],
                cfg.evaluation.batch_size,
                FIXTURE_MAX_LENGTH,
                cache,
            )
            mean = None
            if samples:  # per prompt, the mean vector of its sampled replies (the same seeds for every adapter)
                drawn = sample_replies(cfg, adapter, prompts, samples, cfg.project.seed)
                v = np.asarray(
                    reward_model.raw_scores(
                        [p for p in prompts for _ in range(samples)], [r for rs in drawn for r in rs]
                    )["vector"],
                    dtype=float,
                )
                mean = v.reshape(len(prompts), samples, -1).mean(1)
            measured[key] = {"vector": vector, "move": np.asarray(move, dtype=float), "sampled": mean}
        figures[name] = measured[key]
    diff = figures["end"]["vector"] - figures["start"]["vector"]
    move = figures["end"]["move"] - figures["start"]["move"]
    sampled = {}
    if samples:  # end minus start, paired by prompt
        d = figures["end"]["sampled"] - figures["start"]["sampled"]
        sampled = {dim: (float(d[:, j].mean()), paired_se(d[:, j])) for j, dim in enumerate(reward_model.dimensions)}
    base, tokenizer = load_student(student_path(cfg))
    gate = run_gate(
        GateSides(end, start),
        cfg=cfg,
        models=GateModels(base, tokenizer, reward_model),
        questions=GateQuestions(prompts, read_memory_rows(memory_paths(cfg)), seed=cfg.project.seed),
        health=GateHealth(1.0),
    ).figures
    return {
        "dimensions": {
            d: (float(diff[:, j].mean()), paired_se(diff[:, j])) for j, d in enumerate(reward_model.dimensions)
        },
        "sampled": sampled,
        "fixture_move": (float(move.mean()), paired_se(move)) if len(move) else (float("nan"), float("nan")),
        "facts_lost": gate["facts_lost"],
        "facts_asked": gate["facts_asked"],
        # per prompt (per fixture) changes, so that arms can be compared with control paired by prompt
        "per_prompt": {"greedy": diff.tolist(), "sampled": d.tolist() if samples else [], "fixtures": move.tolist()},
    }


def run_arm(project: Path, adapter: str | None, arm: str, args, measured: dict) -> dict:
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.online.updates import held_out_prompts, reward_model_at, run_update, update_sources

    direction, _, setting = arm.partition("-")  # more-strong: a "more" nudge under --strong's settings
    nudge_settings = json.loads(args.strong) if setting == "strong" else {}
    overrides = {**OPEN_GATE, "online": {**OPEN_GATE["online"], "nudges": nudge_settings}}
    tmp, cfg, state = scratch_project(project, adapter, overrides=overrides)
    try:
        start = state.adapter_path()
        rm_path, sources = update_sources(cfg, state)
        prompts = held_out_prompts(cfg, sources)
        all_fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
        if args.extra_prompts:  # more prompts to judge on: the fixtures' (never trained on), in their file's order
            known = set(prompts)
            extra = [p for p in dict.fromkeys(f.prompt for f in all_fixtures) if p not in known]
            prompts += extra[: args.extra_prompts]
        pairs = [
            json.loads(line)
            for line in (ROOT / "config" / "human" / "hominem-contrast-pairs.jsonl").read_text().splitlines()
            if line.strip()
        ]
        day = time.strftime("%Y-%m-%d", time.gmtime())
        log = cfg.data_dir / cfg.serving.log_dir / "log" / f"{day}.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        direction = None if direction == "control" else direction
        outcomes = []
        for r in range(args.rounds):
            events = script_events(pairs[r * args.per_round : (r + 1) * args.per_round], [], day, r)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
            events += nudges(events, direction, args.share, args.dimension, stamp, f"{arm}-{r}")
            with open(log, "a") as fh:
                fh.write("".join(json.dumps(e) + "\n" for e in events))
            started = time.monotonic()
            done = run_update(cfg, by="benchmark", reason=f"{arm}, round {r + 1}")
            outcomes.append(done.outcome)
            print(
                f"  {arm} round {r + 1}: {done.outcome} in {time.monotonic() - started:.0f} s ({done.items})",
                flush=True,
            )
        end = state.adapter_path()
        fixtures = [f for f in all_fixtures if f.tag == args.dimension]
        result = judge(cfg, start, end, prompts, fixtures, reward_model_at(rm_path, cfg), args.samples, measured)
        return {"arm": arm, "outcomes": outcomes, "live": LiveState(cfg.data_dir).current().version, **result}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--project", type=Path, required=True, help="a `make run` project (its daily adapter, reward model and pairs)"
    )
    ap.add_argument("--adapter", help="the daily adapter live at the start (default: the newest built)")
    ap.add_argument(
        "--arms",
        nargs="+",
        default=["control", "more", "less"],
        choices=["control", "more", "less", "more-strong", "less-strong"],
        help="-strong: the nudge under --strong's online.nudges settings instead of the config's",
    )
    ap.add_argument(
        "--strong",
        default='{"strength": 4.0, "max_factor": 8.0, "pair_share": 0.5}',
        help="online.nudges settings of the -strong arms (JSON)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=int, default=12)
    ap.add_argument("--share", type=float, default=0.5, help="share of a round's replies nudged")
    ap.add_argument("--dimension", default="empathy")
    ap.add_argument(
        "--extra-prompts",
        type=int,
        default=0,
        help="judge on this many of the contrast fixtures' prompts too, beside the held-out ones (more "
        "prompts, smaller errors)",
    )
    ap.add_argument(
        "--samples",
        type=int,
        default=4,
        help="sampled replies per held-out prompt, scored by the reward model beside the greedy one; 0: greedy only",
    )
    args = ap.parse_args()
    if args.extra_prompts < 0:
        ap.error(
            f"--extra-prompts {args.extra_prompts}: a count of fixture prompts, 0 or more (0: the "
            "held-out prompts only)"
        )

    rows, measured = [], {}  # measured: the start adapter's figures, common to the arms
    for arm in args.arms:
        started = time.monotonic()
        rows.append(run_arm(args.project.resolve(), args.adapter, arm, args, measured))
        print(
            f"{arm}: {time.monotonic() - started:.0f} s\n{json.dumps(rows[-1], default=str)}", flush=True
        )  # each arm's row as it ends
    dims = list(rows[0]["dimensions"])
    print(
        f"\nthe end adapter minus the start, on the held-out prompts (reward model; mean ± standard error); "
        f"{args.dimension} fixtures' implicit reward change (nats); facts lost"
    )
    print(
        f"{'arm':12s} " + " ".join(f"{d[:12]:>16s}" for d in dims) + f" {'fixtures':>16s} {'facts lost':>10s}  updates"
    )
    for r in rows:
        print(
            f"{r['arm']:12s} "
            + " ".join(f"{m:+7.3f} ± {s:5.3f}" for m, s in r["dimensions"].values())
            + f" {r['fixture_move'][0]:+7.2f} ± {r['fixture_move'][1]:5.2f} {r['facts_lost']:>10}  "
            f"{', '.join(r['outcomes'])}"
        )
    if rows[0]["sampled"]:
        print(
            f"\nthe same, {args.samples} sampled replies per prompt (the server's sampling; per prompt "
            "their mean vector)"
        )
        for r in rows:
            print(f"{r['arm']:12s} " + " ".join(f"{m:+7.3f} ± {s:5.3f}" for m, s in r["sampled"].values()))
    by = {r["arm"]: r for r in rows}
    if (
        "control" in by and len(rows) > 1
    ):  # paired by prompt: the arms share the start and the seeds, so their ends differ by what the nudges did
        print(
            "\neach arm minus control, paired by prompt (its end minus control's end; mean ± standard "
            "error); greedy rows end with the fixtures'"
        )
        for kind in ("greedy", "sampled"):
            for r in rows:
                if r["arm"] == "control" or not r["per_prompt"][kind]:
                    continue
                d, f = against_control(r, by["control"], kind), against_control(r, by["control"], "fixtures")
                print(
                    f"{r['arm']:12s} {kind:8s} "
                    + " ".join(f"{d[:, j].mean():+7.3f} ± {paired_se(d[:, j]):5.3f}" for j in range(d.shape[1]))
                    + (f" {f.mean():+7.2f} ± {paired_se(f):5.2f}" if kind == "greedy" and len(f) else "")
                )
        j = dims.index(args.dimension)
        for arm, sign in (("more", 1), ("less", -1), ("more-strong", 1), ("less-strong", -1)):
            if arm in by:  # on the kind of reply that has more of them (sampled, else greedy), paired by prompt
                kind = "sampled" if by[arm]["per_prompt"]["sampled"] else "greedy"
                d = against_control(by[arm], by["control"], kind)
                m, s = float(d[:, j].mean()), paired_se(d[:, j])
                others = [x for k, x in enumerate(dims) if k != j and d[:, k].mean() < -paired_se(d[:, k])]
                print(
                    f"{arm}: {args.dimension} {m:+.3f} ± {s:.3f} against control on the {kind} replies "
                    f"({'the asked way' if sign * m > 0 else 'NOT the asked way'}); "
                    f"other dimensions falling beyond one standard error: {others or 'none'}; facts lost "
                    f"{by[arm]['facts_lost']}"
                )


if __name__ == "__main__":
    main()
