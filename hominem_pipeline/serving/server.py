"""`hominem serve`: resolve what to serve from the config, load it, and run the app under uvicorn."""

from __future__ import annotations

import gc
import logging
import signal
import socket
import sys
import threading
from pathlib import Path

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.online.ledger import Ledger
from hominem_pipeline.core.online.log import InteractionLog
from hominem_pipeline.serving.auth import Access
from hominem_pipeline.serving.journal import Journal
from hominem_pipeline.serving.tastes import ServedTastes

log = logging.getLogger(__name__)
REMEMBER_DAYS = 2  # days of the log whose turns feedback may refer to, and whose ids a retry is checked against


class ServeError(ValueError):
    """What to serve cannot be resolved; the message says what to build or pass."""


def _built(cfg: HominemConfig, asset: str) -> Path | None:
    from hominem_pipeline.core.pipeline.lineage import lineage

    ref, note = lineage(cfg).newest(asset)
    if ref is not None and note:
        log.info("%s", note)
    return None if ref is None else ref.path


def _latest_or_folder(cfg: HominemConfig, asset: str, choice: str, marker: str, without: str) -> Path | None:
    """`latest`: the newest `asset` under this config (None, with a warning saying `without`, when none
    is built); anything else: a folder holding `marker`, or a ServeError naming it."""
    if choice == "latest":
        path = _built(cfg, asset)
        if path is None:
            log.warning(
                "no %s is built under this config in %s: %s (build one with `make run`)", asset, cfg.data_dir, without
            )
        return path
    path = cfg.path(choice)
    if not (path / marker).is_file():
        raise ServeError(
            f"{asset} {choice!r}: {path} has no {marker}, so it is not a {asset} folder; pass "
            f"data/{asset}/<day>/<version>, "
            "`latest`, or `none`"
        )
    return path


def _from_registry(cfg: HominemConfig, uri: str, marker: str) -> Path:
    from hominem_pipeline.core.pipeline.registry import RegistryError, fetch

    try:
        return fetch(cfg, uri, marker)
    except RegistryError as exc:
        raise ServeError(str(exc)) from None


def resolve_adapter(cfg: HominemConfig, choice: str | None) -> Path | None:
    """`live` (what data/live/current.json names: the adapter that passed the gate; the base when none
    has), `latest` (the newest lora_adapter under this config, passed or not; None with a warning when
    there is none), a folder, a registry model (models:/hominem-lora-adapter@champion, downloaded once),
    or None / `none` / `base` (the base alone)."""
    from hominem_pipeline.core.pipeline.registry import is_registry_uri

    if choice is None or choice in ("none", "base"):
        return None
    if is_registry_uri(choice):
        return _from_registry(cfg, choice, "adapter_config.json")
    if choice == "live":
        from hominem_pipeline.core.online.live import LiveState
        from hominem_pipeline.core.online.promotion import gate_lines, why_base

        state = LiveState(cfg.data_dir)
        path = state.adapter_path()
        if path is None:
            log.warning("serving the base student alone: %s", why_base(cfg.data_dir))
        elif not path.is_dir():
            raise ServeError(
                f"the live adapter {path} (named by {state.current_path}) is gone; `hominem live "
                "rollback` to one that is there"
            )
        for line in gate_lines(cfg.data_dir):
            log.info("%s", line)
        return path
    return _latest_or_folder(cfg, "lora_adapter", choice, "adapter_config.json", "serving the base alone")


def resolve_reward_model(cfg: HominemConfig, choice: str | None, adapter: Path | None) -> Path | None:
    """`adapter` (the one the served adapter was trained with, else the newest), `latest`, a folder, a
    registry model (models:/hominem-reward-model@champion), or None / `none` (replies are not scored)."""
    from hominem_pipeline.core.pipeline.registry import is_registry_uri
    from hominem_pipeline.core.policy.lora import adapter_reward_model

    if choice is None or choice == "none":
        return None
    if is_registry_uri(choice):
        return _from_registry(cfg, choice, "METADATA.json")
    if (
        choice == "adapter"
        and adapter is not None
        and (own := adapter_reward_model(adapter, cfg.data_dir)) is not None
        and own.is_dir()
    ):
        return own
    return _latest_or_folder(
        cfg, "reward_model", "latest" if choice == "adapter" else choice, "METADATA.json", "replies are not scored"
    )


def label(cfg: HominemConfig, path: Path | None) -> str | None:
    from hominem_pipeline.core.pipeline.artifacts import data_label

    return None if path is None else data_label(cfg.data_dir, path)


def build_service(
    cfg: HominemConfig,
    adapter: Path | None,
    reward_model: Path | None,
    student: Path,
    follow_live: bool = False,
    config_args: list[str] | None = None,
    follow_registry: str | None = None,
):
    """The service; with `follow_live`, it hot-swaps to whatever data/live/current.json names from now on
    and runs online updates of the live adapter (`config_args`: the --config / --set the update runs under);
    with `follow_registry` (a models:/NAME@ALIAS URI), to whatever version that alias names."""
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.serving.common import Service
    from hominem_pipeline.serving.engine import Engine, EngineSettings

    s = cfg.serving
    folder = cfg.data_dir / s.log_dir
    access = Access.from_settings(
        cfg.path(s.tokens_file) if s.tokens_file else None, s.tokens_env, folder / "audit.jsonl", repo=cfg.root
    )
    access.check_bind(s.host)
    interaction_log = InteractionLog(folder / "log", remember_days=REMEMBER_DAYS)
    if cfg.privacy.retention_days is not None:
        from hominem_pipeline.core.online.retention import expire

        if (gone := expire(cfg, interaction_log=interaction_log)).days:
            access.audit("expire", days=gone.days, events=gone.events, versions=gone.versions)
    ledger = Ledger(cfg.dimension_names)
    ledger.load(interaction_log.remembered)
    settings = EngineSettings(
        max_batch_size=s.max_batch_size,
        batch_wait_ms=s.batch_wait_ms,
        max_queue=s.max_queue,
        repetition_penalty=s.repetition_penalty,
        plain_start=s.plain_start,
        recall_facts=s.recall_facts,
    )
    engine = Engine(
        student,
        adapter,
        reward_model,
        settings,
        adapter_label=label(cfg, adapter),
        device=resolve_device(cfg.runtime.device),
    )
    if (
        engine.reward is not None
    ):  # a reply scored once (a question of the pool, a shipped pair) is not read by the frozen networks again
        from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES

        engine.reward.use_feature_cache(cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES))
    service = Service(s, engine, Journal(interaction_log), ledger, access, label(cfg, reward_model), config=cfg)
    from hominem_pipeline.serving.questions import QuestionDesk

    service.questions, service.tastes = QuestionDesk(cfg, engine, ledger), ServedTastes(engine, ledger)
    if follow_live:
        from hominem_pipeline.core.online.live import LiveState
        from hominem_pipeline.serving.live import LiveWatcher
        from hominem_pipeline.serving.updates import UpdateScheduler

        service.live = LiveWatcher(
            LiveState(cfg.data_dir), engine, access.audit, lambda path: label(cfg, path), s.live_poll_seconds
        )
        service.updates = UpdateScheduler(
            cfg.online,
            config_args or [],
            folder / "updates",
            access.audit,
            service.live.follow,
            auto=cfg.online.scheduler,
        )
    if follow_registry:
        from hominem_pipeline.serving.live import RegistryWatcher

        service.registry = RegistryWatcher(
            cfg, follow_registry, engine, access.audit, lambda path: label(cfg, path), s.registry_poll_seconds
        )
    return service


def serve(
    cfg: HominemConfig,
    adapter: Path | None,
    reward_model: Path | None,
    student: Path,
    follow_live: bool = False,
    config_args: list[str] | None = None,
    follow_registry: str | None = None,
) -> None:
    """Bind, load, print the address, and serve until SIGINT / SIGTERM. The port is taken first, so a
    busy one is said at once, before any model loads or update process starts."""
    import uvicorn

    from hominem_pipeline.serving.app import create_app

    host, port = cfg.serving.host, cfg.serving.port
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they are
    # TCP, and with Nagle on, every keep-alive response after the first waits ~40 ms for a delayed ACK
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pass another --port (0: any free one)"
        ) from exc
    bound = sock.getsockname()[1]
    try:
        service = build_service(cfg, adapter, reward_model, student, follow_live, config_args, follow_registry)
    except BaseException:
        sock.close()
        raise
    service.access.audit(
        "start", host=host, port=bound, adapter=service.adapter_label, reward_model=service.reward_label
    )
    url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}"
    print(
        f"hominem serve: {url}  (page {url}/ , OpenAI base_url {url}/v1 , API docs {url}/docs)\n"
        f"  adapter {service.adapter_label or 'none (the base)'}; reward model {service.reward_label or 'none'}; "
        f"log {service.journal.log.folder}; {'open on loopback' if service.access.open else 'bearer tokens required'}",
        flush=True,
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(service), log_level="warning", access_log=False, timeout_graceful_shutdown=30)
    )
    # What is loaded now (torch, transformers, the models: ~500k objects) lives as long as the server.
    # Moved out of the collector's reach, a full collection no longer walks it: one took ~340 ms here,
    # stalling every request in flight (the 99th percentile of a feedback storm).
    gc.collect()
    gc.freeze()
    # uvicorn shuts down gracefully on SIGINT and SIGTERM alike, then raises the signal again for the
    # handler it found. Python's own SIGTERM handler ends the process there, before the cleanup below
    # (the update process kept ready, the audit's stop line); this one ends it as Ctrl-C does.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main else None
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, Terminated):
        pass  # the graceful shutdown is done; what the server started stops below
    finally:
        if service.updates is not None:
            service.updates.close()
        if service.live is not None:
            service.live.close()
        if service.registry is not None:
            service.registry.close()
        service.engine.close()
        if service.history is not None:
            service.history.close()
        service.journal.log.close()
        service.access.audit("stop", port=bound)
        print("hominem serve: stopped", file=sys.stderr, flush=True)
        if in_main:
            signal.signal(signal.SIGTERM, previous)


class Terminated(Exception):
    """SIGTERM arrived (`kill`, a service manager): the server stops as after Ctrl-C."""


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one, during the cleanup, ends the process at once
    raise Terminated()
