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
    env = {**os.environ, "HOMINEM_HOME": str(project)}
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
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 2  # dagster dev and mlflow server, each leading its own group
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert f"Dagster UI: http://127.0.0.1:{dagster_port}" in out and f"MLflow UI:  http://127.0.0.1:{mlflow_port}" in out
        assert "stopped Dagster and MLflow" in out
        assert not any(group_alive(int(pid)) for pid in children)
        assert not answers(dagster_port) and not answers(mlflow_port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
