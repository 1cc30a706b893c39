"""The live loop on the default offline models: how long from a person's N-th feedback event to the new
adapter answering, how long a hot-swap takes with clients chatting through it, and how long a rollback.

In a scratch project (the repo's config, `data/` linked to this project's built versions, its own live
state, log and MLflow store, so the project's own are untouched) the daily adapter is made live and
`hominem serve` started (its own process group, loopback). Then:

1. Once the server's next update process has loaded (`/admin/live`'s `ready`: a person's N events
   take minutes, in which it loads), `--events` feedback events (`online.every_events`) over HTTP: the hand-written
   pairs people agree on (config/human/hominem-contrast-pairs.jsonl) recorded as turns (/turns), a choice between
   each pair and a thumb each, until the N-th; the scheduler starts an update (short `dual` on a replay batch, the
   fast-loop gate); the clock runs from the N-th event's acknowledgement until a chat reply comes from the new
   version (goal: under 120 s on 2 cores). The update's own figures (train, gate, partial RHI, win rate over the
   live adapter) are printed. In `--updates` rounds. The scratch starts as `make run` leaves a project: the daily
   adapter made live by the daily gate (its replies kept), the base's log-probabilities of its training pairs cached
   (`--cold`: made live by hand, every cache empty).
2. `--clients` chat clients (the `openai` client) talk without pause while the live pointer is moved
   twice (to the adapter live before, then back): each swap's time as the engine measured it (goal:
   under 1 s), and every request's status (goal: none failed).
3. A rollback through the admin endpoint: from the request until its answer, the swap included.

    .venv/bin/python benchmarks/live_loop.py
    .venv/bin/python benchmarks/live_loop.py --adapter data/lora_adapter/2026-11-26/<version> --events 20

Needs `make run` (a daily adapter, with its reward model and preference pairs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import scratch_project
from hominem_pipeline.testing.service import start_serve, stop_serve

MESSAGES = [
    "I failed my driving test again.",
    "My sister never calls me back.",
    "I got the job I wanted!",
    "How do I stop procrastinating?",
    "My dog is sick and I am scared.",
    "Is it okay to say no to my boss?",
    "I can't sleep before exams.",
    "My name is Ana, by the way.",
    "What should I cook for friends tonight?",
    "I feel lonely in a new city.",
    "Can you help me plan a hard conversation?",
    "I keep losing my keys.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--project", type=Path, default=ROOT, help="the project whose built versions are used (default: this repo)"
    )
    ap.add_argument(
        "--adapter", help="the daily adapter live at the start (default: the newest built under the config)"
    )
    ap.add_argument(
        "--events", type=int, default=None, help="feedback events before an update (default: online.every_events)"
    )
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48, help="tokens per chat reply")
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for each update")
    ap.add_argument(
        "--updates",
        type=int,
        default=2,
        help="rounds of --events feedback events, each followed by the update it starts",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="start with every cache empty (the daily adapter made live by hand), not as `make run` leaves a project",
    )
    args = ap.parse_args()

    import httpx2 as httpx

    tmp, cfg, state = scratch_project(
        args.project.resolve(), args.adapter, {"online": {"every_minutes": None}}, like_make_run=not args.cold
    )
    events = args.events or cfg.online.every_events
    sets = [
        f"online.every_events={events}",
        "online.every_minutes=null",
        f"serving.max_new_tokens={args.max_tokens}",
        "serving.live_poll_seconds=0.2",
    ]
    data, scratch = cfg.data_dir, cfg.root
    print(f"an update after {events} feedback events")

    env = {"HOMINEM_HOME": str(scratch)}
    proc, url, ready = start_serve(
        [*(f"--set={s}" for s in sets)], scratch, env=env, timeout=600, stdout=open(tmp / "serve.log", "w")
    )
    print(f"hominem serve answered after {ready:.1f} s ({url})")
    report: dict = {"events": events, "clients": args.clients}
    try:
        with httpx.Client(timeout=600) as http:

            def label():
                return next(m["adapter"] for m in http.get(f"{url}/v1/models").json()["data"] if m["id"] == "hominem")

            # 1. feedback until the N-th event: hand-written pairs people agree on, recorded as turns, a
            # choice and a thumb each; then the time until a reply comes from the new version. Each round
            # sends the next pairs; the first update finds the caches empty, later ones find what it kept.
            pairs = [
                json.loads(line)
                for line in (ROOT / "config" / "human" / "hominem-contrast-pairs.jsonl").read_text().splitlines()
                if line.strip()
            ]
            k = 0
            report["updates"] = []
            for round_ in range(args.updates):
                # a person's N events take minutes, in which the server's next update process loads (libraries,
                # reward model): the round starts once it has, as the N-th event would find it
                waited = time.monotonic()
                while not http.get(f"{url}/admin/live").json()["updates"]["ready"]:
                    if time.monotonic() - waited > 300:
                        raise SystemExit(
                            "the server's update process did not get ready in 300 s; see its log in <log_dir>/updates/"
                        )
                    time.sleep(0.5)
                print(
                    f"round {round_ + 1}: the server's next update process was ready after "
                    f"{time.monotonic() - waited:.1f} s"
                )
                sent = 0
                while sent < events:
                    pair, messages = (
                        pairs[k % len(pairs)],
                        [{"role": "user", "content": pairs[k % len(pairs)]["prompt"]}],
                    )
                    a, b = (
                        http.post(
                            f"{url}/turns", json={"messages": messages, "reply": pair[side], "author": "benchmark"}
                        ).json()["turn"]
                        for side in ("chosen", "rejected")
                    )
                    for body in (
                        {"kind": "choice", "chosen": a, "rejected": b, "strength": "clear"},
                        {"kind": "thumb", "turn": a, "value": "up"},
                        {"kind": "thumb", "turn": b, "value": "down"},
                    ):
                        if sent == events:
                            break
                        assert http.post(f"{url}/feedback", json=body).status_code == 200
                        sent += 1
                    k += 1
                nth = time.monotonic()
                before = label()
                print(
                    f"round {round_ + 1}: {events} feedback events sent ({k} hand-written pairs people "
                    "agree on so far); waiting for the update"
                )
                status: dict = {}
                answered: tuple[float, str, str] | None = None  # (seconds, label, reply) once the new version answers

                def answer_now() -> tuple[float, str, str]:
                    reply = http.post(
                        f"{url}/v1/chat/completions",
                        json={"model": "hominem", "messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 8},
                    ).json()
                    return time.monotonic() - nth, label(), reply["choices"][0]["message"]["content"]

                # the server swaps as soon as the live pointer moves, before the update process has recorded the
                # promotion in MLflow's registry and exited: the clock stops at the first reply from the new version
                while time.monotonic() - nth < args.timeout:
                    if answered is None and label() != before:
                        answered = answer_now()
                    status = http.get(f"{url}/admin/live").json()["updates"]
                    if status["updates"] > round_ and status["last"] is not None:
                        break
                    time.sleep(0.5)
                decided = time.monotonic() - nth
                last = status.get("last") or {}
                kept = ("outcome", "version", "reason", "partial_rhi", "items", "seconds", "stages_s")
                row = {k2: last.get(k2) for k2 in kept} | {"decided_s": round(decided, 1)}
                print(f"update {last.get('outcome')} {decided:.1f} s after the {events}th event: {last.get('reason')}")
                print(f"  its stages (s): {last.get('stages_s')}")
                if last.get("outcome") == "promoted":
                    while answered is None:
                        answered = answer_now() if label() != before else None
                        time.sleep(0.05)
                    row["answering_s"] = round(answered[0], 1)
                    print(
                        f"the new adapter {answered[1]} answered {row['answering_s']:.1f} s after the {events}th "
                        f"event (goal < 120 s): {answered[2]!r}"
                    )
                else:
                    print("the gate kept the old adapter live")
                report["updates"].append(row)
            live_label = label()

            # 2. swaps under load: the pointer moved to the adapter live before and back (a rollback, then one to the
            # newer version)
            outcomes: list[int] = []
            stop = threading.Event()

            def chat(c: int) -> None:
                import openai

                client = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0, timeout=600)
                r = 0
                while not stop.is_set():
                    try:
                        client.chat.completions.create(
                            model="hominem",
                            messages=[{"role": "user", "content": MESSAGES[(c + r) % len(MESSAGES)]}],
                            max_tokens=args.max_tokens,
                            seed=r,
                        )
                        outcomes.append(200)
                    except openai.APIStatusError as exc:
                        outcomes.append(exc.status_code)
                    except openai.APIConnectionError:
                        outcomes.append(-1)
                    r += 1

            threads = [threading.Thread(target=chat, args=(c,)) for c in range(args.clients)]
            for t in threads:
                t.start()
            time.sleep(5)
            audit = data / cfg.serving.log_dir / "audit.jsonl"
            start_swaps = sum(1 for _ in open(audit))
            current = state.current().version
            state.rollback(reason="benchmark: a swap under load", by="benchmark")
            while label() == live_label:
                time.sleep(0.05)
            time.sleep(3)
            state.rollback(current, reason="benchmark: back again", by="benchmark")
            while label() != live_label:
                time.sleep(0.05)
            time.sleep(3)
            # 3. a rollback through the admin endpoint, timed from the request to its answer (the swap included)
            t = time.monotonic()
            rolled = http.post(f"{url}/admin/live/rollback", json={"reason": "benchmark: rollback time"})
            report["rollback_s"] = round(time.monotonic() - t, 3)
            time.sleep(2)
            stop.set()
            for th in threads:
                th.join()
            swaps = [json.loads(line) for line in list(open(audit))[start_swaps:]]
            report["swap_s"] = [s["seconds"] for s in swaps if s["action"] == "live_swap"]
            report["requests"] = len(outcomes)
            report["failed"] = sum(o != 200 for o in outcomes)
            print(
                f"swaps with {args.clients} clients chatting: "
                f"{', '.join(f'{s:.3f} s' for s in report['swap_s'])} (goal < 1 s); "
                f"{report['requests']} requests, {report['failed']} failed"
            )
            print(
                f"rollback through /admin/live/rollback: {report['rollback_s']:.3f} s (answer "
                f"{rolled.status_code}: {rolled.json()})"
            )
    finally:
        log = stop_serve(proc)
        del log
    print(json.dumps(report, indent=1, default=str))
    if os.environ.get("KEEP_SCRATCH") is None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
