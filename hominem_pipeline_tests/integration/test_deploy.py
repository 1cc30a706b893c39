"""Beyond one machine: the project against real servers it starts itself (hominem_pipeline/testing/services.py):
Postgres, and MLflow's tracking server on it with proxied artifacts. A second clone that has never seen
the first one's folder loads the registered models through the tracking server alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hominem_pipeline.core.config.loader import deep_merge
from hominem_pipeline.testing.services import MlflowServer, PostgresServer
from hominem_pipeline_tests.conftest import REPO, make_project

DAY = "2026-11-20"
HOMINEM = str(Path(sys.executable).parent / "hominem")
SENSOR_CHOICES = 3  # the deployment's retrain threshold (retrain.reward_pairs)
LENIENT = {
    "deploy_threshold": 0.0,
    "win_rate_margin": None,
    "people_margin": None,
}  # the tiny adapter goes live: the registry's champion moves


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with PostgresServer() as pg, MlflowServer(pg.url, tmp_path_factory.mktemp("mlflow-artifacts")) as mlflow_server:
        yield {"postgres": pg, "mlflow": mlflow_server}


def clone(root: Path, tiny_student: Path, tiny_encoder: Path, tracking: str) -> Path:
    """A project with its own copies of the models (as `hominem setup` makes them) and an overlay on the tracking
    server."""
    models = root / "data" / "models"
    shutil.copytree(tiny_student, models / "student")
    shutil.copytree(tiny_encoder, models / "encoder")
    project = make_project(root, models / "student", models / "encoder")
    tiny = yaml.safe_load((project / "config" / "tiny.yaml").read_text())
    (project / "config" / "server.yaml").write_text(
        yaml.safe_dump(deep_merge(tiny, {"tracking": {"mlflow_uri": tracking}, "health": LENIENT}))
    )
    return project


def run(project: Path, args: list[str], places: Path, timeout: int = 900, **extra: str) -> subprocess.CompletedProcess:
    """A command in the project as its user would run it, on a machine whose list of model folders is `places`."""
    env = {**os.environ, "HOMINEM_HOME": str(project), "HOMINEM_MODEL_PLACES": str(places), "COLUMNS": "200", **extra}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


SCORE = """
import json, sys
import mlflow.pyfunc, pandas as pd
model = mlflow.pyfunc.load_model("models:/hominem-reward-model@champion")
replies = ["That is rough. What happened?", "Try harder."]
frame = pd.DataFrame({"prompt": ["I failed my driving test again."] * 2, "response": replies})
print(json.dumps(model.predict(frame).round(6).to_dict(orient="list")))
"""


def test_a_second_clone_loads_the_champion_models_through_the_tracking_server_alone(
    servers, tmp_path, tiny_student, tiny_encoder
):
    tracking = servers["mlflow"].url
    first = clone(tmp_path / "first", tiny_student, tiny_encoder, tracking)
    run(first, [HOMINEM, "run", "--config", "config/server.yaml", "--date", DAY], tmp_path / "first-places.json")
    live = json.loads((first / "data" / "live" / "current.json").read_text())
    assert live["version"], live  # the day's adapter went live through the gate: champion moved in the registry
    env_score = [sys.executable, "-c", SCORE]
    os.environ["MLFLOW_TRACKING_URI"] = tracking
    try:
        there = json.loads(run(first, env_score, tmp_path / "first-places.json").stdout.strip().splitlines()[-1])
        shutil.rmtree(first)  # the second clone has no access to the first one's folder

        second = clone(tmp_path / "second", tiny_student, tiny_encoder, tracking)
        places = tmp_path / "second-places.json"  # another machine: it has built nothing
        here = json.loads(run(second, env_score, places).stdout.strip().splitlines()[-1])
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    assert here == there and set(here) >= {"scalar", "empathy", "safety_score"}

    chat = run(
        second,
        [
            HOMINEM,
            "chat",
            "--config",
            "config/server.yaml",
            "--adapter",
            "models:/hominem-lora-adapter@champion",
            "-p",
            "Hello there",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
        ],
        places,
    )
    downloaded = list((second / "data" / "cache" / "registry" / "hominem-lora-adapter").rglob("adapter_config.json"))
    assert (
        len(downloaded) == 1
        and json.loads(downloaded[0].read_text())["base_model_name_or_path"] == "tiny/random-llama"
    )  # the hub id, not a path
    assert chat.stdout.strip() and str(tmp_path / "first") not in chat.stdout + chat.stderr


class Processes:
    """Servers the test starts, each in its own process group, stopped by that id."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], env: dict, cwd: Path, log: Path) -> subprocess.Popen:
        proc = subprocess.Popen(
            args, env=env, cwd=cwd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        import signal

        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def graphql(url: str, query: str) -> dict:
    import urllib.request

    request = urllib.request.Request(
        f"{url}/graphql", data=json.dumps({"query": query}).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def wait_for(url: str, seconds: float = 180) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {seconds:.0f}s")


def wait_for_line(log: Path, text: str, proc: subprocess.Popen, seconds: float = 240) -> None:
    """Wait until a server's log holds `text`; fail with the log's tail if it exits or the time runs out."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(1)
    raise AssertionError(
        f"{log.name} never said {text!r} (exit {proc.poll()}):\n{log.read_text(errors='replace')[-3000:]}"
    )


def test_the_daily_chain_runs_through_the_queue_on_celery_workers_with_postgres_storage(
    servers, tmp_path, tiny_student, tiny_encoder, monkeypatch
):
    """The deployment profile (deploy/): Dagster's storage in Postgres, `hominem run` submitting to the run
    queue, the daemon launching, the steps on two Celery workers over Redis, MLflow's server on Postgres;
    the UI's GraphQL lists the run; two days launched at once both finish, each in its own partition."""
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.testing.services import RedisServer, free_port

    pg, tracking = servers["postgres"], servers["mlflow"].url
    dagster_url = pg.create_database("dagster")
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    processes = Processes()
    with RedisServer() as redis:
        project = clone(tmp_path / "project", tiny_student, tiny_encoder, tracking)
        shutil.copy(REPO / "deploy" / "workspace.yaml", project / "workspace.yaml")
        server = yaml.safe_load((project / "config" / "server.yaml").read_text())
        runtime = {"dagster_home": str(home), "launch": "queue", "executor": "celery", "celery_broker": redis.url}
        retrain = {
            "reward_pairs": SENSOR_CHOICES,
            "memory_conversations": 1000,
            "combined_fraction": 1.0,
            "sensor_interval_seconds": 5,
        }
        (project / "config" / "deploy.yaml").write_text(
            yaml.safe_dump(deep_merge(server, {"runtime": runtime, "retrain": retrain}))
        )
        env = {
            **os.environ,
            "HOMINEM_HOME": str(project),
            "HOMINEM_CONFIG": str(project / "config" / "deploy.yaml"),
            "DAGSTER_HOME": str(home),
            "HOMINEM_DAGSTER_PG_URL": dagster_url,
            "HOMINEM_MODEL_PLACES": str(tmp_path / "places.json"),
            "OMP_NUM_THREADS": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }  # dagster-celery starts `celery` from the PATH
        (tmp_path / "celery.yaml").write_text(
            yaml.safe_dump({"execution": {"config": {"broker": redis.url, "backend": redis.url}}})
        )
        bindir = Path(sys.executable).parent
        ui = f"http://127.0.0.1:{free_port()}"
        # the instance's schema made once, before the daemon, the webserver and two workers start: each would create
        # it on first use, and racing to do so can leave the daemon dead ("type snapshots already exists")
        from dagster import DagsterInstance

        monkeypatch.setenv("HOMINEM_DAGSTER_PG_URL", dagster_url)
        with DagsterInstance.from_config(str(home)):
            pass
        try:
            processes.start(
                [str(bindir / "dagster-daemon"), "run", "-w", "workspace.yaml"], env, project, tmp_path / "daemon.log"
            )
            workers = []
            for i in range(2):
                workers.append(
                    processes.start(
                        [
                            str(bindir / "dagster-celery"),
                            "worker",
                            "start",
                            "-A",
                            "dagster_celery.app",
                            "-y",
                            str(tmp_path / "celery.yaml"),
                            "-n",
                            f"hominem-{i}@%h",
                            "--",
                            "--concurrency",
                            "1",
                        ],
                        env,
                        project,
                        tmp_path / f"worker{i}.log",
                    )
                )
            processes.start(
                [
                    str(bindir / "dagster-webserver"),
                    "-w",
                    "workspace.yaml",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    ui.rsplit(":", 1)[1],
                ],
                env,
                project,
                tmp_path / "webserver.log",
            )
            wait_for(ui)
            for i, worker in enumerate(workers):  # both consume the queue before the run is queued
                wait_for_line(tmp_path / f"worker{i}.log", " ready.", worker)
            done = run(
                project,
                [HOMINEM, "run", "--config", "config/deploy.yaml", "--date", DAY],
                tmp_path / "places.json",
                timeout=900,
                HOMINEM_DAGSTER_PG_URL=dagster_url,
            )
            assert "run queued" in done.stdout and "run success" in done.stdout, done.stdout[-3000:]
            runs = graphql(ui, "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }")[
                "data"
            ]["runsOrError"]["results"]
            assert [r["status"] for r in runs] == ["SUCCESS"] and {"key": "dagster/partition", "value": DAY} in runs[
                0
            ]["tags"]
            cfg = load_config(project / "config" / "deploy.yaml", root=project)
            # the run in the Postgres instance: every asset and asset check of the definitions, as the embedded run has
            # them
            from dagster import DagsterEventType, DagsterInstance

            from hominem_pipeline.defs import build_definitions

            monkeypatch.setenv("HOMINEM_DAGSTER_PG_URL", dagster_url)
            defs = build_definitions(str(project / "config" / "deploy.yaml"), root=project)
            with DagsterInstance.from_config(str(home)) as instance:
                events = [e.dagster_event for e in instance.all_logs(runs[0]["runId"]) if e.dagster_event is not None]
            made = {
                e.asset_key.to_user_string() for e in events if e.event_type == DagsterEventType.ASSET_MATERIALIZATION
            }
            checked = {
                (e.event_specific_data.asset_key.to_user_string(), e.event_specific_data.check_name)
                for e in events
                if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
            }
            assert made == {a.key.to_user_string() for a in defs.assets} - {
                "human_preferences"
            }  # filled by imports, not `hominem run`
            assert checked == {
                (k.asset_key.to_user_string(), k.name)
                for c in [*defs.assets, *defs.asset_checks]
                for k in c.check_keys
            }
            assert (
                lineage(cfg).require("attunement", DAY) is not None
            )  # the last stage, built by the workers into the project's folder
            logs = [(tmp_path / f"worker{i}.log").read_text(errors="replace") for i in range(2)]
            assert all("succeeded" in log for log in logs), "\n\n".join(log[-2000:] for log in logs)  # both took steps
            from mlflow import MlflowClient

            from hominem_pipeline.core.pipeline.tracking import TAG_ASSET, TAG_DAGSTER_RUN

            client = MlflowClient(
                tracking
            )  # lineage and the registry on the tracking server, as the embedded run keeps them
            [experiment] = [e for e in client.search_experiments() if e.name == cfg.tracking.experiment]
            tracked = client.search_runs([experiment.experiment_id], max_results=500)
            assert {r.data.tags.get(TAG_ASSET) for r in tracked} == made | {
                "live"
            }  # an MLflow run per asset, and the live gate's
            # this run's adapter (the tracking server also holds the other test's day), its inputs' versions as tags
            [adapter_run] = [
                r
                for r in tracked
                if r.data.tags.get(TAG_ASSET) == "lora_adapter"
                and r.data.tags.get(TAG_DAGSTER_RUN) == runs[0]["runId"]
            ]
            assert (
                adapter_run.data.tags[f"input.reward_model.{DAY}"] == lineage(cfg).require("reward_model", DAY).version
            )
            assert client.get_model_version_by_alias("hominem-reward-model", "current").tags
            assert any(
                e["action"] in ("promote", "refuse")
                for e in json.loads((project / "data" / "live" / "history.json").read_text())
            )  # the live gate's check ran

            # people's choices in the log: the daemon's sensor launches the retrain, which runs on the workers too
            from hominem_pipeline_tests.core.test_retrain import write_choices_by_hand

            write_choices_by_hand(cfg.data_dir / cfg.serving.log_dir / "log", DAY, SENSOR_CHOICES)
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:
                runs = graphql(
                    ui, "{ runsOrError { ... on Runs { results { runId status jobName tags { key value } } } } }"
                )["data"]["runsOrError"]["results"]
                sensed = [r for r in runs if {"key": "hominem/trigger", "value": "data_threshold"} in r["tags"]]
                if sensed and sensed[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                    break
                time.sleep(3)
            assert (
                len(sensed) == 1 and sensed[0]["status"] == "SUCCESS" and sensed[0]["jobName"] == "hominem_retrain"
            ), sensed
            assert (
                lineage(cfg)
                .newest("reward_model", DAY)[0]
                .manifest["metadata"]["people_pairs_by_day"][DAY]["feedback"]
                == SENSOR_CHOICES
            )
            assert any(
                e.get("by") == f"dagster:{sensed[0]['runId']}"
                for e in json.loads((project / "data" / "live" / "history.json").read_text())
            )  # gated

            later = "2026-11-21"
            both = [
                subprocess.Popen(
                    [
                        HOMINEM,
                        "run",
                        "--config",
                        "config/deploy.yaml",
                        "--date",
                        day,
                        "--select",
                        "prompts,teacher_trajectories",
                    ],
                    cwd=project,
                    env={k: v for k, v in env.items() if k != "DAGSTER_HOME"},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for day in (DAY, later)
            ]
            outputs = [p.communicate(timeout=1800)[0] for p in both]
            assert [p.returncode for p in both] == [0, 0], outputs
            runs = graphql(ui, "{ runsOrError { ... on Runs { results { status tags { key value } } } } }")["data"][
                "runsOrError"
            ]["results"]
            assert sorted(
                next(t["value"] for t in r["tags"] if t["key"] == "dagster/partition") for r in runs[:2]
            ) == [DAY, later]
            assert all(r["status"] == "SUCCESS" for r in runs)
            store = lineage(cfg).store
            assert {ref.partition for ref in store.versions("teacher_trajectories", later)} == {later}
        finally:
            processes.stop()
            for log in sorted(tmp_path.glob("*.log")):
                print(log.name, log.read_text()[-2000:])
