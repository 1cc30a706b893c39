"""Beyond one machine: the project against real servers it starts itself (hominem_pipeline/testing/services.py):
Postgres, and MLflow's tracking server on it with proxied artifacts. A second clone that has never seen
the first one's folder loads the registered models through the tracking server alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hominem_pipeline.core.config_loader import deep_merge
from hominem_pipeline.testing.services import MlflowServer, PostgresServer
from hominem_pipeline_tests.conftest import make_project

DAY = "2026-11-20"
HOMINEM = str(Path(sys.executable).parent / "hominem")
LENIENT = {"deploy_threshold": 0.0, "min_win_rate": 0.0, "people_tolerance": None}  # the tiny adapter goes live: the registry's champion moves


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with PostgresServer() as pg, MlflowServer(pg.url, tmp_path_factory.mktemp("mlflow-artifacts")) as mlflow_server:
        yield {"postgres": pg, "mlflow": mlflow_server}


def clone(root: Path, tiny_student: Path, tiny_encoder: Path, tracking: str) -> Path:
    """A project with its own copies of the models (as `hominem setup` makes them) and an overlay on the tracking server."""
    models = root / "data" / "models"
    shutil.copytree(tiny_student, models / "student")
    shutil.copytree(tiny_encoder, models / "encoder")
    project = make_project(root, models / "student", models / "encoder")
    tiny = yaml.safe_load((project / "config" / "tiny.yaml").read_text())
    (project / "config" / "server.yaml").write_text(yaml.safe_dump(deep_merge(tiny, {"tracking": {"mlflow_uri": tracking}, "health": LENIENT})))
    return project


def run(project: Path, args: list[str], places: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """A command in the project as its user would run it, on a machine whose list of model folders is `places`."""
    env = {**os.environ, "HOMINEM_HOME": str(project), "HOMINEM_MODEL_PLACES": str(places), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


SCORE = """
import json, sys
import mlflow.pyfunc, pandas as pd
model = mlflow.pyfunc.load_model("models:/hominem-reward-model@champion")
frame = pd.DataFrame({"prompt": ["I failed my driving test again."] * 2, "response": ["That is rough. What happened?", "Try harder."]})
print(json.dumps(model.predict(frame).round(6).to_dict(orient="list")))
"""


def test_a_second_clone_loads_the_champion_models_through_the_tracking_server_alone(servers, tmp_path, tiny_student, tiny_encoder):
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

    chat = run(second, [HOMINEM, "chat", "--config", "config/server.yaml", "--adapter", "models:/hominem-lora-adapter@champion", "-p", "Hello there",
                        "--max-tokens", "6", "--temperature", "0"], places)
    downloaded = list((second / "data" / "cache" / "registry" / "hominem-lora-adapter").rglob("adapter_config.json"))
    assert len(downloaded) == 1 and json.loads(downloaded[0].read_text())["base_model_name_or_path"] == "tiny/random-llama"  # the hub id, not a path
    assert chat.stdout.strip() and str(tmp_path / "first") not in chat.stdout + chat.stderr
