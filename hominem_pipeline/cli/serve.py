"""`hominem serve`: chat with the student, score replies, collect feedback (the page at /)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from hominem_pipeline.cli.common import ConfigOpt, SetOpt, app, fail, load, setup_logging


@app.command()
def serve(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    adapter: Annotated[Optional[str], typer.Option("--adapter", "-a", help="Adapter to serve: a folder, `latest` or `none` (default: serving.adapter).")] = None,
    reward_model: Annotated[Optional[str], typer.Option("--reward-model", "-m", help="Reward model: a folder, `adapter`, `latest` or `none` (default: serving.reward_model).")] = None,
    host: Annotated[Optional[str], typer.Option(help="Address to bind (default: serving.host; beyond loopback, tokens are required).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (default: serving.port; 0: any free port).")] = None,
) -> None:
    """Serve the student (OpenAI-compatible /v1, /generate, /reward, /feedback) and the feedback page;
    every turn and piece of feedback goes to the interaction log. Ctrl-C stops it."""
    setup_logging()
    from hominem_pipeline.core.models import ModelNotAvailable, prepare_student
    from hominem_pipeline.serving.auth import AccessError
    from hominem_pipeline.serving.server import ServeError, resolve_adapter, resolve_reward_model, serve as run_server

    cfg = load(config, [*(sets or []), *([f"serving.host={host}"] if host else []), *([f"serving.port={port}"] if port is not None else [])], persist=False)
    try:
        student = prepare_student(cfg)
        adapter_path = resolve_adapter(cfg, adapter if adapter is not None else cfg.serving.adapter)
        reward_path = resolve_reward_model(cfg, reward_model if reward_model is not None else cfg.serving.reward_model, adapter_path)
        run_server(cfg, adapter_path, reward_path, student)
    except (ModelNotAvailable, ServeError, AccessError) as exc:
        fail(str(exc))
