"""The retrain loop on the default offline models: from the choice that crosses the threshold to the new
adapter answering in the server, with each step's share.

Run it in a project where `make run` finished for today (a fresh clone: it changes that project's log,
its live pointer and its Dagster instance, as a person using it would). It

1. starts `hominem serve` and `dagster-daemon` on the project's instance, as `make ui` runs it, under an
   overlay that only ticks the sensor every 5 s (`retrain.sensor_interval_seconds`; the thresholds are the
   config's: `retrain.reward_pairs`, 200); the server's own online updates are off (`online.scheduler`: on 2
   cores they would train beside the retrain; `--with-fast-loop` keeps them);
2. gives `--choices` distinct choices over HTTP (default 220): the hand-written contrast pairs
   (config/human/hominem-contrast-pairs.jsonl) recorded as turns (/turns), a choice between each pair
   (/feedback), each in its own conversation; the clock starts at the acknowledgement of the choice that
   crosses the threshold;
3. follows the run the daemon's sensor launches: the wait for the tick, the launch, each step (from
   Dagster's own step stats), the live gate's decision, and, when the adapter passes, the hot-swap and the
   first chat reply from it.

The goal: the whole loop within the daily job's own time (15 minutes on 2 cores).

    .venv/bin/python benchmarks/retrain_loop.py --project /path/to/fresh/clone
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.testing.service import start_serve, stop_serve
from hominem_pipeline.testing.services import stop_group

GOAL_MINUTES = 15.0
OVERLAY = "retrain_loop.yaml"


def pairs(project: Path) -> list[dict]:
    with open(project / "config" / "human" / "hominem-contrast-pairs.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, required=True, help="a project where `make run` finished for today")
    ap.add_argument("--choices", type=int, default=220)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the run and the swap")
    ap.add_argument(
        "--with-fast-loop",
        action="store_true",
        help="keep the server's online updates on (online.scheduler), training beside the retrain",
    )
    args = ap.parse_args()

    import httpx2 as httpx
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.live import LiveState

    project = args.project.resolve()
    (project / "config" / OVERLAY).write_text(
        "retrain:\n  sensor_interval_seconds: 5   # the benchmark's tick; the thresholds are the config's\n"
    )
    cfg = load_config(project / "config" / OVERLAY, root=project)
    threshold = cfg.retrain.reward_pairs
    if args.choices < threshold:
        raise SystemExit(
            f"--choices {args.choices} is below retrain.reward_pairs {threshold}: no run would start; "
            f"give at least {threshold}"
        )
    state = LiveState(cfg.data_dir)
    before = state.current()
    print(
        f"project {project}; live at the start: {before.version or 'base'}; threshold: {threshold} pairs", flush=True
    )
    env = {**os.environ, "HOMINEM_HOME": str(project)}
    env.pop("DAGSTER_HOME", None)
    bindir = Path(sys.executable).parent
    home = cfg.data_dir / "dagster"
    server, daemon = None, None
    try:
        fast = [] if args.with_fast_loop else ["--set", "online.scheduler=false"]
        server, url, seconds = start_serve(
            ["--config", f"config/{OVERLAY}", "--set", "serving.live_poll_seconds=0.5", *fast],
            project,
            env=env,
            timeout=600,
        )
        print(f"server up in {seconds:.0f} s", flush=True)
        log = open(project / "data" / "retrain_loop_daemon.log", "wb")
        daemon = subprocess.Popen(
            [str(bindir / "dagster-daemon"), "run", "-m", "hominem_pipeline.definitions"],
            cwd=home,
            env={**env, "DAGSTER_HOME": str(home), "HOMINEM_CONFIG": str(project / "config" / OVERLAY)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        time.sleep(20)  # the daemon's first tick sees what was there before (nothing new)
        started = time.time()
        crossed = None
        texts = pairs(project)
        with httpx.Client(timeout=60) as http:
            for i in range(args.choices):
                p = texts[i % len(texts)]
                prompt = f"{p['prompt']} ({i})" if i >= len(texts) else p["prompt"]
                a = http.post(f"{url}/turns", json={"prompt": prompt, "reply": p["chosen"]}).json()["turn"]
                b = http.post(f"{url}/turns", json={"prompt": prompt, "reply": p["rejected"]}).json()["turn"]
                assert (
                    http.post(
                        f"{url}/feedback", json={"kind": "choice", "chosen": a, "rejected": b, "strength": "clear"}
                    ).status_code
                    == 200
                )
                if i + 1 == threshold:
                    crossed = time.time()
        print(f"{args.choices} choices given; the {threshold}th crossed the threshold", flush=True)

        deadline = time.monotonic() + args.timeout
        with DagsterInstance.from_config(str(home)) as instance:
            run = None
            while time.monotonic() < deadline:
                runs = [
                    r
                    for r in instance.get_run_records(filters=RunsFilter(tags={"hominem/trigger": "data_threshold"}))
                    if r.create_timestamp.timestamp() >= started
                ]  # this benchmark's, oldest last
                runs = [r.dagster_run for r in runs]
                if runs and runs[-1].status in (
                    DagsterRunStatus.SUCCESS,
                    DagsterRunStatus.FAILURE,
                    DagsterRunStatus.CANCELED,
                ):
                    run = runs[-1]
                    break
                time.sleep(2)
            if run is None:
                raise SystemExit("no sensor-launched run ended in time; see data/retrain_loop_daemon.log")
            if len(runs) != 1:
                print(
                    f"note: {len(runs)} runs were launched by the sensor "
                    f"({[r.run_id[:8] for r in runs]}); the first is measured",
                    flush=True,
                )
            record = instance.get_run_record_by_id(run.run_id)
            stats = instance.get_run_stats(run.run_id)
            steps = sorted(instance.get_run_step_stats(run.run_id), key=lambda s: s.start_time or 0)
        print(
            f"run {run.run_id[:8]} ({run.job_name}, {run.tags['dagster/partition']}): "
            f"{run.status.value}; {run.tags['hominem/reason']}",
            flush=True,
        )
        created = record.create_timestamp.timestamp()
        phases = [
            ("sensor tick (from the crossing choice to the run's creation)", created - crossed),
            ("launch (the run created to its first step)", (stats.start_time or created) - created),
        ]
        phases += [(f"step {s.step_key}", (s.end_time or 0) - (s.start_time or 0)) for s in steps]
        ended = stats.end_time or time.time()
        decision = next(
            (
                e
                for e in reversed(state.history())
                if e.get("by") == f"dagster:{run.run_id}" and e["action"] in ("promote", "refuse")
            ),
            None,
        )
        swapped = None
        if decision is not None and decision["action"] == "promote":
            while time.monotonic() < deadline:
                served = next(
                    m["adapter"]
                    for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
                    if m["id"] == "hominem"
                )
                if served == state.current().adapter:
                    break
                time.sleep(0.2)
            reply = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "hominem", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16},
                timeout=120,
            )
            swapped = time.time()
            phases.append(("hot-swap and the first reply from the new adapter", swapped - ended))
            assert reply.status_code == 200
        total = (swapped or ended) - crossed
        print(f"\n{'phase':<70} {'seconds':>8} {'share':>6}")
        for name, s in phases:
            print(f"{name:<70} {s:8.1f} {100 * s / total:5.1f}%")
        print(f"{'total':<70} {total:8.1f}")
        outcome = (
            f"promoted: the server answers with {state.current().version}"
            if swapped
            else f"refused by the gate: {decision['reason'] if decision else '(no decision recorded)'}; the "
            f"server keeps {before.version or 'base'}"
        )
        print(f"\nthe gate: {outcome}")
        print(
            f"goal (the loop within {GOAL_MINUTES:.0f} min): "
            f"{'met' if total / 60 <= GOAL_MINUTES else 'NOT met'} ({total / 60:.1f} min"
            + ("" if swapped else ", to the gate's decision")
            + ")"
        )
    finally:
        stop_group(daemon, timeout=60)
        if server is not None:
            stop_serve(server)


if __name__ == "__main__":
    main()
