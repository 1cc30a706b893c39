"""Tokens per second through `hominem serve`: one chat client against eight at once, beside plain
`generate` in this process at batch 1 and 8 (the ceiling the server's batching can reach).

Starts `hominem serve` (the config's adapter and reward model; its own process group, loopback),
reports how long after start it answered its first chat request (goal: 30 s), then for 1 and for 8
concurrent clients (the official `openai` client, `--rounds` requests each, `--max-tokens` per reply,
sampled at the config's temperature) counts completion tokens per second of wall time. Goal: 8
clients at least 2.5x one. The plain-`generate` baseline runs after the server is stopped, on the
same student and prompts.

    .venv/bin/python benchmarks/serve_throughput.py
    .venv/bin/python benchmarks/serve_throughput.py --adapter none --rounds 2

Needs `make setup` (and `make run` for an adapter to serve).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.testing.service import HOMINEM, free_port, stop_serve

PROMPTS = [
    "I failed my driving test again. What should I do?",
    "Can you explain how vaccines train the immune system?",
    "My friend keeps cancelling our plans. Should I say something?",
    "Write a short poem about autumn rain.",
    "What is a good way to start learning to cook?",
    "I feel nervous about a job interview tomorrow.",
    "How do I politely decline a wedding invitation?",
    "Why is the sky blue?",
]


def first_answer(url: str, proc: subprocess.Popen, started: float) -> float:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0, timeout=120)
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"hominem serve exited with {proc.returncode}")
        try:
            client.chat.completions.create(model="hominem", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
            return time.monotonic() - started
        except (openai.APIConnectionError, openai.APIStatusError):
            time.sleep(0.1)


def through_server(url: str, clients: int, rounds: int, max_tokens: int) -> tuple[int, float]:
    import openai

    def client_loop(c: int) -> int:
        client = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0, timeout=600)
        tokens = 0
        for r in range(rounds):
            reply = client.chat.completions.create(
                model="hominem",
                messages=[{"role": "user", "content": PROMPTS[(c + r) % len(PROMPTS)]}],
                max_tokens=max_tokens,
                seed=c * 100 + r,
            )
            tokens += reply.usage.completion_tokens
        return tokens

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(client_loop, range(clients)))
    return tokens, time.monotonic() - started


def plain_generate(cfg, adapter: Path | None, batch: int, rounds: int, max_tokens: int) -> tuple[int, float]:
    from hominem_pipeline.core.lm.generation import chat_text, generate
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.lora import load_policy

    model, tokenizer = load_policy(student_path(cfg), adapter)
    s = cfg.serving
    tokens, started = 0, time.monotonic()
    for r in range(rounds):
        texts = [chat_text(tokenizer, PROMPTS[(c + r) % len(PROMPTS)]) for c in range(batch)]
        out = generate(
            model,
            tokenizer,
            texts,
            max_new_tokens=max_tokens,
            seed=r,
            temperature=s.temperature,
            top_p=s.top_p,
            repetition_penalty=s.repetition_penalty,
        )
        tokens += sum(g.new_tokens for g in out)
    return tokens, time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--adapter", default=None, help="what to serve (default: serving.adapter): a folder, latest or none"
    )
    ap.add_argument("--rounds", type=int, default=3, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.serving.server import resolve_adapter

    cfg = load_config(None)
    adapter = resolve_adapter(cfg, args.adapter or cfg.serving.adapter)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            HOMINEM,
            "serve",
            "--port",
            str(port),
            "--reward-model",
            "none",
            "--adapter",
            str(adapter) if adapter else "none",
        ],
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # not start_serve: timed to the first chat answer
    results = {}
    try:
        ready = first_answer(url, proc, started)
        print(
            f"hominem serve answered its first chat request {ready:.1f} s after start (goal: 30 s); "
            f"adapter {adapter or 'none'}",
            flush=True,
        )
        for clients in (1, 8):
            tokens, seconds = through_server(url, clients, args.rounds, args.max_tokens)
            results[f"server, {clients} client(s)"] = tokens / seconds
            print(
                f"server, {clients} concurrent client(s): {tokens} tokens in {seconds:.1f} s = "
                f"{tokens / seconds:.1f} tok/s",
                flush=True,
            )
    finally:
        stop_serve(proc)
    for batch in (1, 8):
        tokens, seconds = plain_generate(cfg, adapter, batch, args.rounds, args.max_tokens)
        results[f"generate, batch {batch}"] = tokens / seconds
        print(
            f"plain generate, batch {batch}: {tokens} tokens in {seconds:.1f} s = {tokens / seconds:.1f} tok/s",
            flush=True,
        )
    ratio = results["server, 8 client(s)"] / results["server, 1 client(s)"]
    print(
        f"8 clients / 1 client through the server: {ratio:.2f}x (goal >= 2.5x); server / plain generate: "
        f"{results['server, 1 client(s)'] / results['generate, batch 1']:.2f}x at 1, "
        f"{results['server, 8 client(s)'] / results['generate, batch 8']:.2f}x at 8"
    )


if __name__ == "__main__":
    main()
