"""Feedback under load, and after a crash: is every acknowledged event in the log, once?

Starts `hominem serve` in its own process group on loopback with a throwaway log folder, asks it for
a few replies (the turns the feedback refers to), then:

1. a storm: `--clients` concurrent clients each post `--posts` feedback events (thumbs, choices with
   strength and note, nudges, emotion labels, each with the client's own id) one after another; prints
   errors and the latency percentiles (goal: 0 errors, p99 under 200 ms);
2. a crash: a second storm, and `--kill-after` seconds into it the server is killed with SIGKILL; it is
   restarted on the same log, every client retries the posts that got no answer (same ids), and the log
   is read back: every event the server acknowledged must be there, and no id twice.

    .venv/bin/python benchmarks/feedback_load.py                    # 200 clients x 50 posts
    .venv/bin/python benchmarks/feedback_load.py --clients 20 --posts 10

Needs `make setup` (the student folder); the served model only writes the few turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx2 as httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.testing.service import ServeFailed, free_port, start_serve, stop_serve

DIMENSIONS = ["empathy", "curiosity", "agency_support", "harm_avoidance"]


def start_server(data: Path, port: int) -> tuple[subprocess.Popen, float]:
    try:
        proc, _, ready = start_serve(
            [
                "--adapter",
                "none",
                "--reward-model",
                "none",
                "--set",
                f"serving.log_dir={data}",
                "--set",
                "serving.max_new_tokens=8",
            ],
            ROOT,
            port=port,
        )
    except ServeFailed as exc:
        raise SystemExit(str(exc)) from None
    return proc, ready


def feedback(rng: random.Random, pairs: list[tuple[str, str]], client: int, k: int, storm: str) -> dict:
    a, b = rng.choice(pairs)
    kind = rng.choice(["thumb", "choice", "nudge", "emotion"])
    body: dict = {"id": f"{storm}-{client}-{k}", "kind": kind}
    if kind == "thumb":
        body |= {"turn": a, "value": rng.choice(["up", "down"])}
    elif kind == "choice":
        body |= {
            "chosen": a,
            "rejected": b,
            "strength": rng.choice(["slight", "clear", "strong"]),
            "note": f"client {client} post {k}",
        }
    elif kind == "nudge":
        body |= {"turn": b, "dimension": rng.choice(DIMENSIONS), "direction": rng.choice(["more", "less"])}
    else:
        body |= {"turn": a, "valence": rng.randint(-2, 2), "tags": ["high_arousal"]}
    return body


class Connection:
    """One keep-alive HTTP/1.1 connection, written by hand: a general client (httpx) spends more CPU per
    request than the server under test, on the same two cores, and would measure itself."""

    def __init__(self, port: int):
        self.port, self.reader, self.writer = port, None, None

    async def post(self, path: str, body: dict) -> tuple[int, dict]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        data = json.dumps(body).encode()
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), len(data), data)
        )
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionResetError("the server closed the connection")
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return int(status_line.split()[1]), json.loads(await self.reader.readexactly(length))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def storm(port: int, pairs: list[tuple[str, str]], clients: int, posts: int, name: str) -> dict:
    """Each client posts its events in order on its own connection. Returns latencies, errors, the
    acknowledged ids and the events that got no answer (the connection refused or reset: the server died)."""
    acknowledged: set[str] = set()
    unanswered: list[dict] = []
    latencies: list[float] = []
    errors: Counter = Counter()

    async def one(client: int) -> None:
        rng = random.Random(client)
        conn = Connection(port)
        try:
            for k in range(posts):
                body = feedback(rng, pairs, client, k, name)
                started = time.perf_counter()
                try:
                    status, answer = await conn.post("/feedback", body)
                except (OSError, asyncio.IncompleteReadError):
                    unanswered.extend([body] + [feedback(rng, pairs, client, j, name) for j in range(k + 1, posts)])
                    return
                latencies.append(time.perf_counter() - started)
                if status == 200:
                    acknowledged.add(answer["id"])
                else:
                    errors[f"{status}: {json.dumps(answer)[:120]}"] += 1
        finally:
            conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(clients)))
    return {
        "latencies": np.array(latencies),
        "errors": errors,
        "acknowledged": acknowledged,
        "unanswered": unanswered,
        "seconds": time.perf_counter() - started,
    }


def report(name: str, result: dict) -> None:
    lat = result["latencies"] * 1000
    print(
        f"{name}: {len(lat):,} answered in {result['seconds']:.1f} s "
        f"({len(lat) / result['seconds']:,.0f}/s), errors {sum(result['errors'].values())}, "
        f"latency p50 {np.percentile(lat, 50):.1f} ms, p90 {np.percentile(lat, 90):.1f} ms, p99 "
        f"{np.percentile(lat, 99):.1f} ms, max {lat.max():.1f} ms",
        flush=True,
    )
    for message, count in result["errors"].most_common(3):
        print(f"  {count} x {message}")


def read_log(folder: Path) -> list[dict]:
    events = []
    for path in sorted((folder / "log").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--posts", type=int, default=50, help="feedback posts per client")
    ap.add_argument("--turns", type=int, default=8, help="replies (pairs of turns) the feedback refers to")
    ap.add_argument(
        "--kill-after",
        type=float,
        default=None,
        help="seconds into the second storm to SIGKILL the server (default: a third of the first storm's time)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "online"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc, ready = start_server(data, port)
        print(f"hominem serve answered /healthz {ready:.1f} s after start; log in {data}", flush=True)
        try:
            pairs = []
            for i in range(args.turns):
                replies = httpx.post(
                    url + "/generate",
                    json={"prompt": f"Tell me something about day {i}.", "n": 2, "max_tokens": 4},
                    timeout=120,
                ).json()["replies"]
                pairs.append((replies[0]["turn"], replies[1]["turn"]))
            first = asyncio.run(storm(port, pairs, args.clients, args.posts, "storm1"))
            report(f"storm 1 ({args.clients} clients x {args.posts} posts)", first)
            kill_after = args.kill_after if args.kill_after is not None else first["seconds"] / 3

            async def second_storm() -> dict:
                task = asyncio.create_task(storm(port, pairs, args.clients, args.posts, "storm2"))
                await asyncio.sleep(kill_after)
                await asyncio.to_thread(stop_serve, proc, signal.SIGKILL)
                return await task

            second = asyncio.run(second_storm())
            print(
                f"storm 2: SIGKILL after {kill_after:.1f} s: {len(second['acknowledged']):,} "
                f"acknowledged before, {len(second['unanswered']):,} without an answer",
                flush=True,
            )
            proc, ready = start_server(data, port)
            print(
                f"restarted on the same log in {ready:.1f} s; the clients retry what got no answer (same ids)",
                flush=True,
            )
            retried_ack: set[str] = set()
            with httpx.Client(base_url=url, timeout=60) as http:
                for body in second["unanswered"]:
                    answer = http.post("/feedback", json=body)
                    if answer.status_code == 200:
                        retried_ack.add(body["id"])
        finally:
            stop_serve(proc)
        events = read_log(data)
        ids = Counter(e["id"] for e in events)
        acknowledged = first["acknowledged"] | second["acknowledged"] | retried_ack
        missing = acknowledged - set(ids)
        twice = {i for i, n in ids.items() if n > 1}
        print(
            f"log: {len(events):,} events; acknowledged {len(acknowledged):,}; missing {len(missing)}; "
            f"written twice {len(twice)}",
            flush=True,
        )
        ok = not first["errors"] and not missing and not twice and np.percentile(first["latencies"], 99) < 0.2
        print(
            "PASS"
            if ok
            else "FAIL: "
            + ", ".join(
                x
                for x, bad in [
                    ("errors", first["errors"]),
                    ("missing events", missing),
                    ("duplicates", twice),
                    ("p99 >= 200 ms", np.percentile(first["latencies"], 99) >= 0.2),
                ]
                if bad
            )
        )


if __name__ == "__main__":
    main()
