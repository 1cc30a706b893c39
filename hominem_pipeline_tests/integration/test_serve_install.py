"""The inference-only install (`make install-serve`, `pip install -e '.[serve]'`): a venv of its own without Dagster,
MLflow, TRL or datasets serves the page and the OpenAI endpoints with an adapter, exports it, and a command that
needs the pipeline says so in one line."""

import subprocess
import sys

import httpx2 as httpx

from hominem_pipeline.testing.service import start_serve, stop_serve
from hominem_pipeline_tests.conftest import REPO, make_project
from hominem_pipeline_tests.serving.conftest import make_adapter

PIPELINE = ("dagster", "mlflow", "trl", "datasets")


def test_the_inference_only_install_serves_chats_and_exports_without_the_pipeline(
    tmp_path, tiny_student, tiny_encoder
):
    venv = tmp_path / "serve-venv"
    built = subprocess.run(
        ["make", "-C", str(REPO), "install-serve", f"VENV={venv}", f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    python, hominem = str(venv / "bin" / "python"), str(venv / "bin" / "hominem")
    for name in PIPELINE:
        assert subprocess.run([python, "-c", f"import {name}"], capture_output=True).returncode == 1, name
    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    adapter = make_adapter(tiny_student, tmp_path / "adapter")
    env = {"HOMINEM_HOME": str(project), "COLUMNS": "200"}
    proc, url, _ = start_serve(
        ["--config", "config/tiny.yaml", "--adapter", str(adapter), "--reward-model", "none"],
        project,
        env=env,
        hominem=hominem,
        timeout=300,
    )
    try:
        assert "<html" in httpx.get(url + "/", timeout=30).text.lower()  # the page
        reply = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "hominem", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4},
            timeout=120,
        )
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["role"] == "assistant"
        assert httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"] == "hominem"
    finally:
        stop_serve(proc)
    run_env = {**env, "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}
    out = tmp_path / "student.gguf"
    done = subprocess.run(
        [hominem, "export", "--adapter", str(adapter), "--base", str(tiny_student), "--gguf", str(out)],
        cwd=project,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and out.is_file(), done.stdout + done.stderr
    refused = subprocess.run([hominem, "run"], cwd=project, env=run_env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "this command needs the pipeline" in refused.stderr, refused.stderr
