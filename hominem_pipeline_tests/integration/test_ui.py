"""`hominem ui` starts both UIs on localhost and Ctrl-C (SIGINT) stops both, children included."""

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


def test_ui_starts_both_and_ctrl_c_stops_both(project):
    dagster_port, mlflow_port = free_port(), free_port()
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [HOMINEM, "ui", "--dagster-port", str(dagster_port), "--mlflow-port", str(mlflow_port)],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not (answers(dagster_port) and answers(mlflow_port)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the UIs did not come up within 3 minutes"
            time.sleep(2)
        from hominem_pipeline.core.config_loader import load_config
        from hominem_pipeline.core.tracking import experiment_url
        from hominem_pipeline.testing.browser import chromium, wait_for

        cfg = load_config(None, root=project)
        runs = experiment_url(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root), f"http://127.0.0.1:{mlflow_port}")
        driver = chromium(1400, 900)
        try:  # the link opens MLflow on the model-training view (Runs, Models), not its GenAI overview
            driver.get(runs)
            page = wait_for(driver, lambda d: (lambda text: text if "Model registry" in text else False)(d.find_element("tag name", "body").text), timeout=60)
            assert "Runs" in page and "Evaluation runs" not in page
        finally:
            driver.quit()
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 2  # dagster dev and mlflow server, each leading its own group
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert f"Dagster UI: http://127.0.0.1:{dagster_port}" in out and f"MLflow UI:  http://127.0.0.1:{mlflow_port}" in out
        assert f"the runs: {runs}" in out  # printed whole: COLUMNS is wide enough
        assert "stopped Dagster and MLflow" in out
        assert not any(group_alive(int(pid)) for pid in children)
        assert not answers(dagster_port) and not answers(mlflow_port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
