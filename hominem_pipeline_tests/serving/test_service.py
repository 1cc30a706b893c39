"""`hominem serve` as a user runs it (its own process, real HTTP), with the official openai client."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import openai
import pandas as pd
import pytest

from hominem_pipeline.core.online.log import InteractionLog

HOMINEM = str(Path(sys.executable).parent / "hominem")
RATER_TOKEN, ADMIN_TOKEN = "rater-token-0123456789abcdef", "admin-token-0123456789abcdef"


@dataclass
class Served:
    url: str
    project: Path
    proc: subprocess.Popen

    def events(self) -> list[dict]:
        log = InteractionLog(self.project / "data" / "online" / "log")
        return [e for day in log.days() for e in log.read(day)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(project: Path, *args: str, env: dict | None = None) -> Served:
    port = free_port()
    proc = subprocess.Popen([HOMINEM, "serve", "--config", "config/tiny.yaml", "--port", str(port), *args], cwd=project,
                            env={**os.environ, "HOMINEM_HOME": str(project), **(env or {})}, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"hominem serve exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return Served(url, project, proc)
        except httpx.TransportError:
            time.sleep(0.3)
    stop(proc)
    raise AssertionError("hominem serve did not answer /healthz within 120 s")


def stop(proc: subprocess.Popen) -> str:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


def make_adapter(student: Path, out: Path) -> Path:
    """A real PEFT adapter with random (not zero) LoRA weights, so its replies differ from the base's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(student), LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    model.save_pretrained(out)
    return out


def make_reward_model(encoder: Path, dimensions: list[str], out: Path) -> Path:
    from hominem_pipeline.core.config_loader import load_config
    from hominem_pipeline.core.reward.training import train_reward_model
    from hominem_pipeline_tests.conftest import REPO

    rows = [{"prompt_id": f"p{i}", "prompt": f"Something sad happened, number {i}.", "response": reply, "vector": {d: value for d in dimensions},
             "scalar": value, "reward_intensity": 0.5, "safety_score": 0.9}
            for i in range(6) for reply, value in [("I am so sorry, that sounds hard. Tell me more?", 0.8), ("Whatever.", -0.8)]]
    cfg = load_config(REPO / "config" / "reward" / "encoder.yaml", root=REPO,
                      overrides={"reward_model": {"epochs": 2, "batch_size": 4, "max_length": 48, "val_fraction": 0.34, "uncertainty": {"method": "none"}}}).reward_model
    train_reward_model(pd.DataFrame(rows), dimensions=dimensions, backbone_path=encoder, cfg=cfg, out_dir=out, seed=0, data_digest="t", date="2026-11-25")
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_student, tiny_encoder):
    from hominem_pipeline.core.config_loader import load_config
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path_factory.mktemp("serve") / "project", tiny_student, tiny_encoder)
    dims = load_config(project / "config" / "tiny.yaml", root=project).dimension_names
    adapter = make_adapter(tiny_student, project / "adapter")
    reward = make_reward_model(tiny_encoder, dims, project / "reward")
    server = start(project, "--adapter", str(adapter), "--reward-model", str(reward))
    yield server
    stop(server.proc)


def chat(served: Served, **kwargs):
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused-on-loopback", max_retries=0)
    return client.chat.completions.create(**{"messages": [{"role": "user", "content": "How was your day?"}], "max_tokens": 8, "temperature": 0, **kwargs})


def test_the_openai_client_chats_with_the_served_adapter_streaming_and_not(served):
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused-on-loopback")
    assert [m.id for m in client.models.list().data] == ["hominem", "hominem-base"]
    reply = chat(served, model="hominem")
    text = reply.choices[0].message.content
    assert text and reply.usage.completion_tokens == 8 and reply.choices[0].finish_reason == "length"
    streamed = chat(served, model="hominem", stream=True, stream_options={"include_usage": True})
    chunks = list(streamed)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text  # greedy: the same reply, token by token
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert chunks[-1].usage.completion_tokens == 8
    base = chat(served, model="hominem-base").choices[0].message.content
    assert base != text  # the adapter really changes the student, and the base is served beside it
    turns = {e["id"]: e for e in served.events() if e["kind"] == "turn"}
    mine = turns[reply.choices[0].turn]
    assert mine["reply"] == text and mine["adapter"] == str(served.project / "adapter") and mine["model"] == "hominem"
    assert mine["messages"] == [{"role": "user", "content": "How was your day?"}]
    assert {t["reply"] for t in turns.values()} >= {text, base}


def test_feedback_on_generated_replies_lands_in_the_log_once(served):
    generated = httpx.post(served.url + "/generate", json={"prompt": "I lost my keys again.", "n": 2, "max_tokens": 6, "session": "s1"}, timeout=60).json()
    a, b = generated["replies"]
    assert set(a["reward"]) == {"vector", "scalar", "reward_intensity", "safety_score", "uncertainty"} and len(a["reward"]["vector"]) == 7
    posts = [
        {"kind": "choice", "chosen": a["turn"], "rejected": b["turn"], "strength": "strong", "note": "A listens"},
        {"kind": "nudge", "turn": b["turn"], "dimension": "empathy", "direction": "more"},
        {"kind": "thumb", "turn": a["turn"], "value": "up"},
        {"kind": "emotion", "turn": a["turn"], "valence": 2, "tags": ["high_social_broadcast"]},
        {"id": "client-chosen-id", "kind": "thumb", "turn": b["turn"], "value": "down"},
    ]
    answers = [httpx.post(served.url + "/feedback", json=p, timeout=30) for p in posts]
    assert [r.status_code for r in answers] == [200] * 5 and all(r.json()["written"] for r in answers)
    retry = httpx.post(served.url + "/feedback", json=posts[-1], timeout=30).json()
    assert retry == {"id": "client-chosen-id", "written": False}  # a retry is acknowledged, not written again
    events = served.events()
    ids = [e["id"] for e in events]
    assert len(ids) == len(set(ids)) and ids.count("client-chosen-id") == 1
    by_id = {e["id"]: e for e in events}
    choice = by_id[answers[0].json()["id"]]
    assert (choice["chosen"], choice["rejected"], choice["strength"], choice["note"], choice["rater"]) == (a["turn"], b["turn"], "strong", "A listens", "local")
    assert by_id[answers[1].json()["id"]]["dimension"] == "empathy"
    turn = by_id[a["turn"]]
    assert turn["session"] == "s1" and turn["reward"]["scalar"] == pytest.approx(a["reward"]["scalar"]) and turn["reward_model"] == str(served.project / "reward")
    assert httpx.get(served.url + "/feedback/consistency").json()["choices"] >= 1


def test_bad_input_gets_a_4xx_naming_the_field_and_writes_nothing(served):
    turn = httpx.post(served.url + "/generate", json={"prompt": "hi", "max_tokens": 3, "score": False}, timeout=60).json()["replies"][0]["turn"]
    before = len(served.events())
    cases = [
        ("/v1/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}, 404, "model", "not served"),
        ("/v1/chat/completions", {"model": "hominem", "messages": [{"role": "user", "content": "  "}]}, 422, "messages", "empty"),
        ("/v1/chat/completions", {"model": "hominem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100_000}, 422, "max_tokens", "serving.max_new_tokens"),
        ("/feedback", {"kind": "choice", "chosen": turn, "rejected": turn, "strength": "huge"}, 422, "strength", "'slight', 'clear' or 'strong'"),
        ("/feedback", {"kind": "thumb", "turn": "no-such-turn", "value": "up"}, 404, "turn", "not a turn"),
        ("/feedback", {"kind": "nudge", "turn": turn, "dimension": "humour", "direction": "more"}, 422, "dimension", "use one of: empathy"),
        ("/feedback", {"kind": "thumb", "turn": turn, "value": "up", "strength": "clear"}, 422, "strength", "does not apply"),
        ("/reward", {"prompt": "hi", "response": " "}, 422, "response", "blank"),
    ]
    for path, body, status, field, words in cases:
        answer = httpx.post(served.url + path, json=body, timeout=30)
        error = answer.json()["error"]
        assert (answer.status_code, error["param"]) == (status, field) and words in error["message"], (path, body, answer.text)
    huge = httpx.post(served.url + "/feedback", content=b"{" + b" " * 300_000 + b"}", headers={"content-type": "application/json"}, timeout=30)
    assert huge.status_code == 413 and "serving.max_body_bytes" in huge.json()["error"]["message"]
    assert len(served.events()) == before


def test_concurrent_chats_share_batches(served):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda i: chat(served, model="hominem", seed=i, temperature=0.8, max_tokens=16), range(4)))
    assert all(r.choices[0].message.content for r in replies)
    assert httpx.get(served.url + "/healthz").json()["largest_batch"] >= 2


def test_beyond_loopback_needs_tokens(tmp_path, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    refused = subprocess.run([HOMINEM, "serve", "--config", "config/tiny.yaml", "--host", "0.0.0.0", "--adapter", "none", "--reward-model", "none"],
                             cwd=project, env={**os.environ, "HOMINEM_HOME": str(project)}, capture_output=True, text=True, timeout=120)
    message = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and "'0.0.0.0' is reachable beyond this machine, and no token is configured" in message and "serving.tokens_file" in message


def test_tokens_name_raters_pseudonymously_and_unauthorised_calls_are_audited(tmp_path, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    env = {"HOMINEM_TOKENS": f"rater {RATER_TOKEN}, admin {ADMIN_TOKEN}"}
    server = start(project, "--adapter", "none", "--reward-model", "none", "--set", "serving.redact=true", env=env)
    try:
        nobody = httpx.post(server.url + "/generate", json={"prompt": "hi"}, timeout=30)
        wrong = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer not-a-token"}, timeout=30)
        assert (nobody.status_code, wrong.status_code) == (401, 401) and nobody.headers["www-authenticate"] == "Bearer"
        rater = {"Authorization": f"Bearer {RATER_TOKEN}"}
        reply = httpx.post(server.url + "/generate", headers=rater, json={"prompt": "Write to me at jo@example.com or +1 555 123 4567", "max_tokens": 3}, timeout=60)
        assert reply.status_code == 200 and reply.json()["reward_model"] is None
        assert httpx.get(server.url + "/admin/audit", headers=rater, timeout=30).status_code == 403
        audit = httpx.get(server.url + "/admin/audit", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30).json()["entries"]
        assert [e["action"] for e in audit] == ["start", "unauthorized", "unauthorized", "forbidden", "read_audit"]
        assert {audit[1]["path"], audit[2]["path"]} == {"/generate", "/v1/models"} and audit[2]["header"] == "unknown token"
        [turn] = [e for e in server.events() if e["kind"] == "turn"]
        assert turn["rater"].startswith("r-") and RATER_TOKEN not in json.dumps(turn)
        assert turn["messages"][0]["content"] == "Write to me at [email] or [phone]"
        assert len(server.events()) == 1  # the refused calls wrote nothing
    finally:
        stop(server.proc)
