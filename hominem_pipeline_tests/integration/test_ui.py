"""`hominem ui` starts both UIs on localhost, lists the CLI's runs under their job, and Ctrl-C (SIGINT)
stops both, children included."""

import json
import os
import signal
import subprocess
import time
import urllib.request

from hominem_pipeline.testing.service import HOMINEM, free_port


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def group_alive(pgid: int) -> bool:
    """Any running member of the process group (zombies waiting for a reaper do not count)."""
    rows = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.split("\n")
    return any(r.split()[0] == str(pgid) and not r.split()[1].startswith("Z") for r in rows if r.strip())


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())["data"]


RUNS_AND_JOBS = """{
  runsOrError { ... on Runs { results { runId pipelineName
    repositoryOrigin { repositoryLocationName repositoryName } } } }
  workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError {
    ... on RepositoryLocation { repositories { name pipelines { name } } } } } } }
}"""


def test_ui_starts_both_lists_the_cli_runs_under_their_job_and_ctrl_c_stops_both(project):
    dagster_port, mlflow_port = free_port(), free_port()
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(
        [HOMINEM, "run", "--select", "human_feedback", "--date", "2026-11-19"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    proc = subprocess.Popen(
        [HOMINEM, "ui", "--dagster-port", str(dagster_port), "--mlflow-port", str(mlflow_port)],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not (answers(dagster_port) and answers(mlflow_port)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the UIs did not come up within 3 minutes"
            time.sleep(2)
        from hominem_pipeline.core.config.loader import load_config
        from hominem_pipeline.core.pipeline.tracking import experiment_url
        from hominem_pipeline.testing.browser import chromium, wait_for

        # the CLI's run is the UI's job's run: its origin names the UI's code location, repository and job,
        # which is how the Overview's timeline and the job's page find their runs
        deadline = time.monotonic() + 120
        while not (found := graphql(dagster_port, RUNS_AND_JOBS))["workspaceOrError"]["locationEntries"][0][
            "locationOrLoadError"
        ]:
            assert time.monotonic() < deadline, "the code location did not load within 2 minutes"
            time.sleep(2)
        [run] = found["runsOrError"]["results"]
        jobs = {
            (entry["name"], repo["name"], job["name"])
            for entry in found["workspaceOrError"]["locationEntries"]
            for repo in entry["locationOrLoadError"]["repositories"]
            for job in repo["pipelines"]
        }
        origin = run["repositoryOrigin"]
        assert (
            origin is not None
            and (origin["repositoryLocationName"], origin["repositoryName"], run["pipelineName"]) in jobs
        )
        cfg = load_config(None, root=project)
        runs = experiment_url(
            cfg.mlflow_uri,
            cfg.tracking.experiment,
            cfg.path(cfg.tracking.artifact_root),
            f"http://127.0.0.1:{mlflow_port}",
        )
        driver = chromium(1400, 900)
        try:
            driver.get(f"http://127.0.0.1:{dagster_port}/overview/activity/timeline")
            page = wait_for(
                driver,
                lambda d: (lambda text: text if "hominem_daily" in text else False)(
                    d.find_element("tag name", "body").text
                ),
                timeout=60,
            )
            assert "No runs" not in page
            # the link opens MLflow on the model-training view (Runs, Models), not its GenAI overview
            driver.get(runs)
            page = wait_for(
                driver,
                lambda d: (lambda text: text if "Model registry" in text else False)(
                    d.find_element("tag name", "body").text
                ),
                timeout=60,
            )
            assert "Runs" in page and "Evaluation runs" not in page
        finally:
            driver.quit()
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 2  # dagster dev and mlflow server, each leading its own group
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert (
            f"Dagster UI: http://127.0.0.1:{dagster_port}" in out
            and f"MLflow UI:  http://127.0.0.1:{mlflow_port}" in out
        )
        assert f"the runs: {runs}" in out  # printed whole: COLUMNS is wide enough
        assert "stopped Dagster and MLflow" in out
        assert not any(group_alive(int(pid)) for pid in children)
        assert not answers(dagster_port) and not answers(mlflow_port)
    finally:
        if proc.poll() is None:  # a failed assertion: its two servers lead groups of their own, stopped first
            for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
                try:
                    os.killpg(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.killpg(proc.pid, signal.SIGKILL)
