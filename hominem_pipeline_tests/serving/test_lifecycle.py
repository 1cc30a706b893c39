"""Starting and stopping `hominem serve` as people do: a busy port, `kill` (SIGTERM) and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx2 as httpx
import psutil

from hominem_pipeline.testing.service import HOMINEM
from hominem_pipeline_tests.serving.conftest import start


def _audit(project) -> list[dict]:
    path = project / "data" / "online" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_a_busy_port_is_refused_before_anything_loads_and_sigterm_stops_as_cleanly_as_ctrl_c(
    tmp_path, tiny_student, tiny_encoder
):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    server = start(project)  # follows the live adapter: an update process waits beside it, loaded
    port = server.url.rsplit(":", 1)[1]
    updates = project / "data" / "online" / "updates"
    deadline = time.monotonic() + 300
    while not httpx.get(f"{server.url}/admin/live", timeout=30).json()["updates"]["ready"]:  # its files all written
        assert time.monotonic() < deadline, "the update process kept ready never said it was loaded"
        time.sleep(0.5)
    children = psutil.Process(server.proc.pid).children(recursive=True)
    waiting = [c for c in children if "update" in c.cmdline() and "--ready" in c.cmdline()]
    assert (
        len(waiting) == 1 and waiting[0].nice() == 10
    )  # it trains on what the server's replies leave (online.update_nice)
    before = sorted(p.name for p in updates.iterdir()) if updates.is_dir() else []

    env = {**os.environ, "HOMINEM_HOME": str(project)}
    second = subprocess.run(
        [HOMINEM, "serve", "--config", "config/tiny.yaml", "--port", port],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = " ".join(second.stderr.split())
    assert (
        second.returncode == 2
        and f"cannot listen on 127.0.0.1:{port} (Address already in use); pass another --port" in said
    ), said
    assert [a["action"] for a in _audit(project)].count(
        "start"
    ) == 1  # the second one audited nothing: it stopped before loading
    assert (
        sorted(p.name for p in updates.iterdir()) if updates.is_dir() else []
    ) == before  # no update process of its own, no files left

    os.kill(server.proc.pid, signal.SIGTERM)  # `kill PID`: the server alone, not its process group
    out, _ = server.proc.communicate(timeout=60)
    assert server.proc.returncode == 0 and "hominem serve: stopped" in out, out
    assert _audit(project)[-1]["action"] == "stop" and _audit(project)[-1]["port"] == int(port)
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [p.cmdline() for p in alive]  # the update process it kept ready went with it
    left = sorted(p.name for p in updates.iterdir()) if updates.is_dir() else []
    assert not [n for n in left if n.endswith((".json", ".ready"))], (
        left
    )  # and no result or ready file of an update that never ran
