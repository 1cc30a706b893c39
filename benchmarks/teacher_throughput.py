"""Teacher throughput against the local wire-format server: N prompts x 4 candidates, then a rating of
each candidate, with a fixed latency per call, through the real `anthropic` / `openai` clients, the
dispatcher (bounded concurrency, retries, limiter off) and the call cache.

Prints wall time, calls, and the ratio to the ideal (calls x latency / concurrency); the goal is a
ratio of at most 1.25. A second run over the same prompts must make 0 calls (all from the cache).

    .venv/bin/python benchmarks/teacher_throughput.py                 # 1,000 prompts, 100 ms, concurrency 32
    .venv/bin/python benchmarks/teacher_throughput.py --prompts 200 --provider anthropic
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.common.schema import Prompt
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.teacher.api import APITeacher
from hominem_pipeline.core.teacher.prompts import load_seed_prompts


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    """The server in its own process (and process group), so it does not share this one's GIL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hominem_pipeline.testing.wire_server",
            "--latency",
            str(latency),
            "--api-key",
            "bench-key",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        raise RuntimeError(f"the wire server did not start (printed {url!r})")
    return proc, url


def run_once(cfg, prompts: list[Prompt]) -> dict[str, float]:
    teacher = APITeacher(cfg)
    started = time.monotonic()
    sampled = teacher.sample(prompts, cfg.teacher.candidate_styles(), cfg.teacher.max_new_tokens, seed=7)
    rated = teacher.rate(sampled.items)
    wall = time.monotonic() - started
    teacher.close()
    calls = sampled.usage["api_calls"] + rated.usage["api_calls"]
    hits = sampled.usage["cache_hits"] + rated.usage["cache_hits"]
    return {
        "wall": wall,
        "calls": calls,
        "hits": hits,
        "retries": sampled.usage["retries"] + rated.usage["retries"],
        "failed": len(sampled.failed) + len(rated.failed),
        "labels": len(rated.items),
        "rejected": len(rated.rejected),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per call at the server")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--provider", choices=["openai", "anthropic"], default="openai")
    parser.add_argument("--stream", action="store_true", help="stream the candidate responses")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    proc, url = start_server(args.latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["HOMINEM_BENCH_KEY"] = "bench-key"
            cfg = load_config(
                root=ROOT,
                overrides={
                    "teacher": {
                        "provider": args.provider,
                        "candidates_per_prompt": 4,
                        "api": {
                            "model": "bench-model",
                            "base_url": url + ("/v1" if args.provider == "openai" else ""),
                            "api_key_env": "HOMINEM_BENCH_KEY",
                        },
                        "client": {
                            "concurrency": args.concurrency,
                            "stream": args.stream,
                            "requests_per_minute": None,
                            "tokens_per_minute": None,
                            "cache_path": str(Path(tmp) / "calls.sqlite"),
                        },
                    }
                },
            )
            seeds = load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories)
            prompts = [
                Prompt(
                    prompt_id=f"bench-{i}",
                    text=f"{seeds[i % len(seeds)].text} (case {i})",
                    category=seeds[i % len(seeds)].category,
                    difficulty=seeds[i % len(seeds)].difficulty,
                )
                for i in range(args.prompts)
            ]
            first = run_once(cfg, prompts)
            second = run_once(cfg, prompts)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)

    ideal = first["calls"] * args.latency / args.concurrency
    print(
        f"provider={args.provider} prompts={args.prompts} candidates=4 "
        f"latency={args.latency * 1000:.0f}ms concurrency={args.concurrency} stream={args.stream}"
    )
    print(
        f"first run:  wall {first['wall']:.1f}s  calls {first['calls']:.0f}  ideal {ideal:.1f}s  ratio "
        f"{first['wall'] / ideal:.3f}  "
        f"labels {first['labels']}  rejected {first['rejected']}  failed {first['failed']}  retries "
        f"{first['retries']:.0f}"
    )
    print(
        f"second run: wall {second['wall']:.1f}s  calls {second['calls']:.0f}  cache hits {second['hits']:.0f}  "
        f"({first['wall'] / max(second['wall'], 1e-9):.0f}x faster)"
    )
    ok = first["wall"] / ideal <= 1.25 and second["calls"] == 0
    print("goal (ratio <= 1.25, second run 0 calls):", "met" if ok else "NOT met")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
