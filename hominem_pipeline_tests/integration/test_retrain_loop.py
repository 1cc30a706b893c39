"""The loop closes by itself: people's choices given to `hominem serve` over HTTP cross the reward
threshold, the real `dagster-daemon`'s own sensor tick launches the retrain on the project's instance,
the run carries the feedback to a new adapter through the live gate, and the running server either
answers with it (hot-swap) or keeps the old one while data/live/history.json says why."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import yaml

from hominem_pipeline.core.config.loader import deep_merge, load_config
from hominem_pipeline.testing.services import stop_group
from hominem_pipeline_tests.conftest import make_project
from hominem_pipeline_tests.serving.conftest import start, stop

HOMINEM = str(Path(sys.executable).parent / "hominem")
CHOICES = 4
LOOP = {
    "retrain": {
        "reward_pairs": CHOICES,
        "memory_conversations": 1000,
        "combined_fraction": 1.0,
        "sensor_interval_seconds": 5,
    },
    "health": {
        "deploy_threshold": 0.0,
        "win_rate_margin": None,
        "people_margin": None,
    },  # the tiny adapters may go live
}


def served_adapter(url: str) -> str | None:
    return next(m["adapter"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"] if m["id"] == "hominem")


def test_choices_over_http_make_the_daemons_sensor_retrain_and_the_gate_decide(tmp_path, tiny_student, tiny_encoder):
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.pipeline.lineage import lineage

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    tiny = yaml.safe_load((project / "config" / "tiny.yaml").read_text())
    (project / "config" / "loop.yaml").write_text(yaml.safe_dump(deep_merge(tiny, LOOP)))
    cfg = load_config(project / "config" / "loop.yaml", root=project)
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    first = subprocess.run(
        [HOMINEM, "run", "--config", "config/loop.yaml"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    state = LiveState(cfg.data_dir)
    before = state.current().version

    server = start(
        project, "--config", "config/loop.yaml", "--reward-model", "none", "--set", "serving.live_poll_seconds=0.2"
    )
    home = cfg.data_dir / "dagster"
    daemon = None
    try:
        url = server.url
        assert served_adapter(url) == state.current().adapter
        for i in range(CHOICES):  # distinct pairs, each asked in its own conversation
            prompt = f"Something happened to me today, number {i}."
            a, b = (
                httpx.post(f"{url}/turns", json={"prompt": prompt, "reply": reply}, timeout=30).json()["turn"]
                for reply in ("That sounds hard. What happened?", "Okay.")
            )
            assert (
                httpx.post(
                    f"{url}/feedback",
                    json={"kind": "choice", "chosen": a, "rejected": b, "strength": "clear"},
                    timeout=30,
                ).status_code
                == 200
            )
        daemon_env = {**env, "DAGSTER_HOME": str(home), "HOMINEM_CONFIG": str(project / "config" / "loop.yaml")}
        daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-m", "hominem_pipeline.definitions"],
            cwd=home,
            env=daemon_env,
            stdout=open(tmp_path / "daemon.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 900
        with DagsterInstance.from_config(str(home)) as instance:
            run = None
            while time.monotonic() < deadline:
                runs = instance.get_runs(filters=RunsFilter(tags={"hominem/trigger": "data_threshold"}))
                if runs and runs[0].status in (
                    DagsterRunStatus.SUCCESS,
                    DagsterRunStatus.FAILURE,
                    DagsterRunStatus.CANCELED,
                ):
                    run = runs[0]
                    break
                assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
                time.sleep(2)
            assert run is not None, (tmp_path / "daemon.log").read_text()[-3000:]
            assert len(runs) == 1 and run.status == DagsterRunStatus.SUCCESS, (tmp_path / "daemon.log").read_text()[
                -3000:
            ]
            assert run.job_name == "hominem_retrain" and run.tags["hominem/new_choice"] == str(CHOICES)
            assert run.tags["hominem/reason"] == f"reward channel: {CHOICES} new preference pairs >= {CHOICES}"

        data = lineage(cfg)
        day = run.tags["dagster/partition"]
        model = data.newest("reward_model", day)[0]
        assert (
            model.manifest["metadata"]["people_pairs_by_day"][day]["feedback"] == CHOICES
        )  # the choices reached the reward model
        adapter = data.newest("lora_adapter", day)[0]
        assert adapter.manifest["mlflow_run_id"] and adapter.version != before
        decision = next(
            e
            for e in reversed(state.history())
            if e.get("version") == adapter.version and e["action"] in ("promote", "refuse")
        )
        if decision["action"] == "promote":  # the gate let it through: the running server swaps to it
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and served_adapter(url) != state.current().adapter:
                time.sleep(0.2)
            assert state.current().version == adapter.version and served_adapter(url) == state.current().adapter
            reply = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "hominem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                timeout=60,
            ).json()
            assert (
                next(e for e in server.events() if e["id"] == reply["choices"][0]["turn"])["adapter"]
                == state.current().adapter
            )
        else:  # refused: the reason is kept, and the old adapter keeps answering
            assert (
                decision["reason"]
                and state.current().version == before
                and served_adapter(url) == state.current().adapter
            )

        deadline = time.monotonic() + 60  # the next tick reports the run it started
        while time.monotonic() < deadline and not (
            (json.loads((cfg.data_dir / "live" / "retrain_sensor.json").read_text()).get("last_run") or {}).get(
                "ended"
            )
        ):
            time.sleep(1)
        status = subprocess.run(
            [HOMINEM, "live", "status", "--config", "config/loop.yaml"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        text = " ".join(status.stdout.split())
        assert (
            "last retrain: " in text and f"retrain job for {day}" in text and f"run {run.run_id[:8]} success" in text
        ), text
        # no pair since the retrain; the chats after it (the swap's check) are conversations of their own
        assert re.search(r"since the last retrain: \d+/1000 conversations, 0/4 preference pairs", text), text
    finally:
        stop_group(daemon, timeout=30)
        stop(server.proc)
