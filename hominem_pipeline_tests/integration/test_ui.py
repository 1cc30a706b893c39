"""`hominem ui` starts both UIs on localhost, lists the CLI's runs under their job, and Ctrl-C (SIGINT)
stops both, children included."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
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


# How long the UIs and the proxy may take to answer: no measure of their start (tests time nothing), a bound on a
# hang. On an idle machine they answer within a minute; beside the suite's other worker running a whole deployment
# (Postgres, Celery, the daemon) they once took over three.
UP_WITHIN = 600


def start_ui(project, env, dagster_port: int, mlflow_port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [HOMINEM, "ui", "--dagster-port", str(dagster_port), "--mlflow-port", str(mlflow_port)],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def kill_ui(proc: subprocess.Popen) -> None:
    """After a failed assertion: its two servers lead groups of their own, stopped first, then it."""
    if proc.poll() is None:
        for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(proc.pid, signal.SIGKILL)


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
    proc = start_ui(project, env, dagster_port, mlflow_port)
    try:
        deadline = time.monotonic() + UP_WITHIN
        while not (answers(dagster_port) and answers(mlflow_port)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, f"the UIs did not come up within {UP_WITHIN} s"
            time.sleep(2)
        from hominem_pipeline.core.config.loader import load_config
        from hominem_pipeline.core.pipeline.tracking import experiment_url
        from hominem_pipeline.testing.browser import chromium, wait_for

        # the CLI's run is the UI's job's run: its origin names the UI's code location, repository and job,
        # which is how the Overview's timeline and the job's page find their runs
        deadline = time.monotonic() + UP_WITHIN
        while not (found := graphql(dagster_port, RUNS_AND_JOBS))["workspaceOrError"]["locationEntries"][0][
            "locationOrLoadError"
        ]:
            assert time.monotonic() < deadline, f"the code location did not load within {UP_WITHIN} s"
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
        kill_ui(proc)


def page_text(driver) -> str:
    """The page's text now (a page being replaced has none yet)."""
    return driver.execute_script("return document.body ? document.body.innerText : ''") or ""


def status(url: str, headers: dict | None = None) -> tuple[int, str]:
    """The status and body of a GET, redirects not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:  # nothing listens yet
        return 0, str(exc)


def test_with_tokens_both_uis_admit_an_admin_alone_and_a_browser_signs_in_once(project):
    """With the service's tokens, `hominem ui` puts Dagster and MLflow behind its proxy: no token or a rater's is
    refused (and audited), an admin's bearer token is served, and a browser signs in once for both UIs, through
    Dagster's websocket too. Beyond loopback without tokens it does not start."""

    from hominem_pipeline.testing.browser import chromium, wait_for

    admin, rater = "admin-token-0123456789", "rater-token-0123456789"
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    refused = subprocess.run(
        [HOMINEM, "ui", "--host", "0.0.0.0"], cwd=project, env=env, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "--host '0.0.0.0' is reachable beyond this machine" in refused.stderr
    dagster_port, mlflow_port = free_port(), free_port()
    env["HOMINEM_TOKENS"] = f"admin {admin}, rater {rater}"
    proc = start_ui(project, env, dagster_port, mlflow_port)
    as_admin = {"Authorization": f"Bearer {admin}"}
    try:
        deadline = time.monotonic() + UP_WITHIN
        while not all(status(f"http://127.0.0.1:{p}/", as_admin)[0] == 200 for p in (dagster_port, mlflow_port)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, f"the UIs did not come up behind the proxy within {UP_WITHIN} s"
            time.sleep(2)
        for port in (dagster_port, mlflow_port):
            assert status(f"http://127.0.0.1:{port}/")[0] == 401
            assert status(f"http://127.0.0.1:{port}/", {"Authorization": f"Bearer {rater}"})[0] == 401
            assert status(f"http://127.0.0.1:{port}/graphql", {"Accept": "text/html"})[0] == 303  # to the sign-in
        code, _ = status(f"http://127.0.0.1:{dagster_port}/server_info", as_admin)
        assert code == 200
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        url = f"ws://127.0.0.1:{dagster_port}/graphql"
        with connect(url, additional_headers=as_admin, subprotocols=["graphql-ws"], open_timeout=30) as ws:
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))  # Dagster's live updates
            assert json.loads(ws.recv(timeout=30))["type"] == "connection_ack"
        try:
            connect(url, subprotocols=["graphql-ws"], open_timeout=30)
            raise AssertionError("a websocket without a token was let through")
        except InvalidStatus as exc:
            assert exc.response.status_code == 401
        driver = chromium(1400, 900)
        try:
            driver.get(f"http://127.0.0.1:{dagster_port}/jobs")
            wait_for(driver, lambda d: d.find_elements("name", "token"), timeout=60)  # the sign-in page
            assert "/_hominem/login" in driver.current_url
            driver.find_element("name", "token").send_keys(admin)
            driver.find_element("css selector", "input[type=submit]").click()
            wait_for(driver, lambda d: "hominem_daily" in page_text(d), timeout=90)
            assert driver.current_url.endswith("/jobs")  # back where the browser was going
            driver.get(f"http://127.0.0.1:{mlflow_port}/")  # the same sign-in: a cookie of this host
            wait_for(driver, lambda d: "Experiments" in page_text(d), timeout=60)
        finally:
            driver.quit()
        from hominem_pipeline.core.online.audit import AuditLog

        entries = AuditLog(project / "data" / "online" / "audit.jsonl").entries()
        assert sum(e["action"] == "forbidden" and "ui" in e for e in entries) >= 6
        assert [e["ui"] for e in entries if e["action"] == "ui_sign_in"] == ["Dagster"]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert "behind the service's tokens" in out and proc.returncode == 0
    finally:
        kill_ui(proc)


def test_a_deployment_s_servers_go_behind_ui_proxy_and_it_refuses_to_run_open(project, tmp_path):
    """`hominem ui-proxy` guards servers it did not start: an admin's token reaches them, nothing else does; with no
    token configured it does not start at all."""
    (tmp_path / "index.html").write_text("the guarded server")
    upstream = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(inner := free_port()), "-b", "127.0.0.1", "-d", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + UP_WITHIN
    while status(f"http://127.0.0.1:{inner}/") != (200, "the guarded server"):  # ours, listening
        assert upstream.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    args = [HOMINEM, "ui-proxy", "--mlflow", f"http://127.0.0.1:{inner}", "--mlflow-port", str(port := free_port())]
    refused = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=UP_WITHIN)
    assert refused.returncode == 2 and "reachable beyond this machine, and no token is configured" in refused.stderr
    env["HOMINEM_TOKENS"] = "admin admin-token-0123456789"
    proxy = subprocess.Popen(args, cwd=project, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + UP_WITHIN
        while status(f"http://127.0.0.1:{port}/")[0] == 0:
            assert proxy.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        assert status(f"http://127.0.0.1:{port}/")[0] == 401
        assert status(f"http://127.0.0.1:{port}/", {"Authorization": "Bearer admin-token-0123456789"}) == (
            200,
            "the guarded server",
        )
    finally:
        os.killpg(upstream.pid, signal.SIGKILL)  # a stand-in; whether it stops on SIGTERM is not what is tested
        upstream.wait(30)
        os.killpg(proxy.pid, signal.SIGTERM)
        try:
            proxy.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proxy.pid, signal.SIGKILL)
            raise
    assert proxy.returncode == 0  # SIGTERM stops it as Ctrl-C does, whatever disposition it inherited
