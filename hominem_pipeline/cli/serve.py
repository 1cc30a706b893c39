"""`hominem serve`: chat with the student, score replies, collect feedback (the page at /); `hominem chat`: talk to
it in the terminal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Optional

import typer

from hominem_pipeline.cli.common import ConfigOpt, SetOpt, app, err, fail, load, setup_logging


@app.command()
def serve(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    adapter: Annotated[
        Optional[str],
        typer.Option(
            "--adapter",
            "-a",
            help="Adapter to serve: `live` (the one that passed the gate), `latest`, a folder, a registry "
            "alias it follows (models:/hominem-lora-adapter@champion) or `none` (default: "
            "serving.adapter).",
        ),
    ] = None,
    reward_model: Annotated[
        Optional[str],
        typer.Option(
            "--reward-model",
            "-m",
            help="Reward model: a folder, `adapter`, `latest`, a registry model "
            "(models:/hominem-reward-model@champion) or `none` (default: serving.reward_model).",
        ),
    ] = None,
    host: Annotated[
        Optional[str],
        typer.Option(help="Address to bind (default: serving.host; beyond loopback, tokens are required)."),
    ] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (default: serving.port; 0: any free port).")] = None,
) -> None:
    """Serve the student (OpenAI-compatible /v1, /generate, /reward, /feedback) and the feedback page;
    every turn and piece of feedback goes to the interaction log. Ctrl-C stops it."""
    setup_logging()
    from hominem_pipeline.core.lm.models import ModelNotAvailable, prepare_student
    from hominem_pipeline.serving.auth import AccessError
    from hominem_pipeline.serving.server import ServeError, resolve_adapter, resolve_reward_model
    from hominem_pipeline.serving.server import serve as run_server

    cfg = load(
        config,
        [
            *(sets or []),
            *([f"serving.host={host}"] if host else []),
            *([f"serving.port={port}"] if port is not None else []),
        ],
        persist=False,
    )
    try:
        student = prepare_student(cfg)
        choice = adapter if adapter is not None else cfg.serving.adapter
        adapter_path = resolve_adapter(cfg, choice)
        reward_path = resolve_reward_model(
            cfg, reward_model if reward_model is not None else cfg.serving.reward_model, adapter_path
        )
        from hominem_pipeline.core.pipeline.registry import is_registry_uri

        run_server(
            cfg,
            adapter_path,
            reward_path,
            student,
            follow_live=choice == "live",
            follow_registry=choice if is_registry_uri(choice) and "@" in choice else None,
            config_args=[
                *(["--config", str(config.resolve())] if config else []),
                *(f"--set={a}" for a in sets or []),
            ],
        )
    except (ModelNotAvailable, ServeError, AccessError) as exc:
        fail(str(exc))


ChatAdapterOpt = Annotated[
    Optional[str],
    typer.Option(
        "--adapter",
        "-a",
        help="Adapter to talk to: `live`, `latest`, a folder, a registry model "
        "(models:/hominem-lora-adapter@champion) or `none` for the base (default: serving.adapter).",
    ),
]
MessageOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--message",
        "-p",
        help="Say this, print the reply and go on to the next --message; without it, read what you type (repeatable).",
    ),
]
SystemOpt = Annotated[Optional[str], typer.Option(help="A system message the conversation starts with.")]
MaxTokensOpt = Annotated[
    Optional[int], typer.Option(min=1, help="Tokens per reply at most (default: serving.max_new_tokens).")
]
TemperatureOpt = Annotated[
    Optional[float],
    typer.Option(min=0.0, max=2.0, help="Sampling temperature, 0 for greedy (default: serving.temperature)."),
]
SeedOpt = Annotated[int, typer.Option(help="Sampling seed of the first reply; each later reply uses the next.")]


def _said(message: list[str] | None, interactive: bool) -> Iterator[str]:
    """What the person says: each --message, else each line typed (or read from stdin)."""
    import sys

    if message is not None:
        yield from message
        return
    while True:
        try:
            line = input("you> ") if interactive else sys.stdin.readline()
        except EOFError:
            return
        if not interactive and not line:
            return
        yield line.strip()


def _reply(model, tokenizer, history: list[dict[str, str]], s, decoding: dict, name: str) -> str:
    """The student's reply to the conversation, printed as it is written."""
    import sys

    from hominem_pipeline.core.lm.generation import stream_reply
    from hominem_pipeline.core.online.facts import with_stated_facts

    sys.stdout.write(f"{name}> ")
    pieces = []
    heard = with_stated_facts(history) if s.recall_facts else history
    for piece in stream_reply(model, tokenizer, heard, **decoding):
        pieces.append(piece)
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return "".join(pieces).strip()


@app.command()
def chat(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    adapter: ChatAdapterOpt = None,
    message: MessageOpt = None,
    system: SystemOpt = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Chat with the student in the terminal, the base or an adapter, each reply printed as it is
    written. Type /reset to start over, /quit (or Ctrl-D) to leave. Nothing is logged: for feedback
    that teaches the reward model, use `hominem serve` and its page."""
    import sys

    setup_logging()
    from hominem_pipeline.core.lm.models import ModelNotAvailable, prepare_student
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline.serving.server import ServeError, label, resolve_adapter

    cfg = load(config, sets, persist=False)
    s = cfg.serving
    try:
        student = prepare_student(cfg)
        adapter_path = resolve_adapter(cfg, adapter if adapter is not None else s.adapter)
        model, tokenizer = load_policy(student, adapter_path)
    except (ModelNotAvailable, ServeError, ValueError) as exc:
        fail(str(exc))
    name = "adapter" if adapter_path else "base"
    temp = s.temperature if temperature is None else temperature
    interactive = message is None and sys.stdin.isatty()
    if interactive:
        err.print(
            f"Talking to the {name} ({label(cfg, adapter_path) or student}). /reset starts over, /quit "
            "or Ctrl-D leaves."
        )
    decoding = {
        "max_new_tokens": max_tokens or s.max_new_tokens,
        "temperature": temp if temp > 0 else None,
        "top_p": s.top_p,
        "repetition_penalty": s.repetition_penalty,
        "plain_start": s.plain_start,
    }
    history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    turn = 0
    for text in _said(message, interactive):
        if text in ("/quit", "/exit"):
            break
        if text == "/reset":
            history = history[:1] if system else []
            err.print("(a new conversation)")
            continue
        if not text:
            continue
        history.append({"role": "user", "content": text})
        reply = _reply(model, tokenizer, history, s, decoding | {"seed": seed + turn}, name)
        history.append({"role": "assistant", "content": reply})
        turn += 1
