"""`hominem serve` as a user runs it (its own process, real HTTP), with the official openai client."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess

import httpx2 as httpx
import openai
import pytest

from hominem_pipeline.testing.service import HOMINEM
from hominem_pipeline_tests.serving.conftest import ADMIN_TOKEN, RATER_TOKEN, Served, start, stop


def chat(served: Served, **kwargs):
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused-on-loopback", max_retries=0)
    return client.chat.completions.create(
        **{"messages": [{"role": "user", "content": "How was your day?"}], "max_tokens": 8, "temperature": 0, **kwargs}
    )


def test_the_openai_client_chats_with_the_served_adapter_streaming_and_not(served):
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused-on-loopback")
    assert [m.id for m in client.models.list().data] == ["hominem", "hominem-base"]
    reply = chat(served, model="hominem")
    text = reply.choices[0].message.content
    assert text and reply.usage.completion_tokens == 8 and reply.choices[0].finish_reason == "length"
    streamed = chat(served, model="hominem", stream=True, stream_options={"include_usage": True})
    chunks = list(streamed)
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    )  # greedy: the same reply, token by token
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
    generated = httpx.post(
        served.url + "/generate",
        json={"prompt": "I lost my keys again.", "n": 2, "max_tokens": 6, "session": "s1"},
        timeout=60,
    ).json()
    a, b = generated["replies"]
    assert (
        set(a["reward"]) == {"vector", "scalar", "reward_intensity", "safety_score", "uncertainty"}
        and len(a["reward"]["vector"]) == 7
    )
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
    assert (choice["chosen"], choice["rejected"], choice["strength"], choice["note"], choice["rater"]) == (
        a["turn"],
        b["turn"],
        "strong",
        "A listens",
        "local",
    )
    assert by_id[answers[1].json()["id"]]["dimension"] == "empathy"
    turn = by_id[a["turn"]]
    assert (
        turn["session"] == "s1"
        and turn["reward"]["scalar"] == pytest.approx(a["reward"]["scalar"])
        and turn["reward_model"] == str(served.project / "reward")
    )
    assert httpx.get(served.url + "/feedback/consistency").json()["choices"] >= 1


def test_bad_input_gets_a_4xx_naming_the_field_and_writes_nothing(served):
    turn = httpx.post(
        served.url + "/generate", json={"prompt": "hi", "max_tokens": 3, "score": False}, timeout=60
    ).json()["replies"][0]["turn"]
    before = len(served.events())
    cases = [
        (
            "/v1/chat/completions",
            {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]},
            404,
            "model",
            "not served",
        ),
        (
            "/v1/chat/completions",
            {"model": "hominem", "messages": [{"role": "user", "content": "  "}]},
            422,
            "messages",
            "empty",
        ),
        (
            "/v1/chat/completions",
            {"model": "hominem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100_000},
            422,
            "max_tokens",
            "serving.max_new_tokens",
        ),
        (
            "/feedback",
            {"kind": "choice", "chosen": turn, "rejected": turn, "strength": "huge"},
            422,
            "strength",
            "'slight', 'clear' or 'strong'",
        ),
        ("/feedback", {"kind": "thumb", "turn": "no-such-turn", "value": "up"}, 404, "turn", "not a turn"),
        (
            "/feedback",
            {"kind": "nudge", "turn": turn, "dimension": "humour", "direction": "more"},
            422,
            "dimension",
            "use one of: empathy",
        ),
        (
            "/feedback",
            {"kind": "thumb", "turn": turn, "value": "up", "strength": "clear"},
            422,
            "strength",
            "does not apply",
        ),
        ("/reward", {"prompt": "hi", "response": " "}, 422, "response", "blank"),
    ]
    for path, body, status, field, words in cases:
        answer = httpx.post(served.url + path, json=body, timeout=30)
        error = answer.json()["error"]
        assert (answer.status_code, error["param"]) == (status, field) and words in error["message"], (
            path,
            body,
            answer.text,
        )
    huge = httpx.post(
        served.url + "/feedback",
        content=b"{" + b" " * 300_000 + b"}",
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert huge.status_code == 413 and "serving.max_body_bytes" in huge.json()["error"]["message"]
    broken = httpx.post(
        served.url + "/feedback",
        content=b'{"kind": "thumb" "value": "up"}',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    error = broken.json()["error"]
    assert broken.status_code == 400 and error["param"] == "body" and error["code"] == "invalid_json", broken.text
    assert "not JSON: Expecting ',' delimiter at line 1, column 18 (character 17)" in error["message"]
    assert len(served.events()) == before


def test_concurrent_chats_share_batches(served):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        replies = list(
            pool.map(lambda i: chat(served, model="hominem", seed=i, temperature=0.8, max_tokens=64), range(4))
        )  # long enough to overlap
    assert all(r.choices[0].message.content for r in replies)
    assert httpx.get(served.url + "/healthz").json()["largest_batch"] >= 2


def test_beyond_loopback_needs_tokens(tmp_path, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    refused = subprocess.run(
        [
            HOMINEM,
            "serve",
            "--config",
            "config/tiny.yaml",
            "--host",
            "0.0.0.0",
            "--adapter",
            "none",
            "--reward-model",
            "none",
        ],
        cwd=project,
        env={**os.environ, "HOMINEM_HOME": str(project)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    message = " ".join(refused.stderr.split())
    assert (
        refused.returncode == 2
        and "'0.0.0.0' is reachable beyond this machine, and no token is configured" in message
        and "serving.tokens_file" in message
    )


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
        reply = httpx.post(
            server.url + "/generate",
            headers=rater,
            json={"prompt": "Write to me at jo@example.com or +1 555 123 4567", "max_tokens": 3},
            timeout=60,
        )
        assert reply.status_code == 200 and reply.json()["reward_model"] is None
        assert httpx.get(server.url + "/admin/audit", headers=rater, timeout=30).status_code == 403
        audit = httpx.get(
            server.url + "/admin/audit", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
        ).json()["entries"]
        assert [e["action"] for e in audit] == ["start", "unauthorized", "unauthorized", "forbidden", "read_audit"]
        assert {audit[1]["path"], audit[2]["path"]} == {"/generate", "/v1/models"} and audit[2][
            "header"
        ] == "unknown token"
        [turn] = [e for e in server.events() if e["kind"] == "turn"]
        assert turn["rater"].startswith("r-") and RATER_TOKEN not in json.dumps(turn)
        assert turn["messages"][0]["content"] == "Write to me at [email] or [phone]"
        assert len(server.events()) == 1  # the refused calls wrote nothing
    finally:
        stop(server.proc)


def test_a_full_queue_answers_503_with_retry_after_and_writes_nothing_for_it(tmp_path, tiny_student, tiny_encoder):
    import threading
    import time

    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    server = start(
        project,
        "--adapter",
        "none",
        "--reward-model",
        "none",
        "--set",
        "serving.max_queue=1",
        "--set",
        "serving.max_batch_size=1",
        "--set",
        "serving.max_new_tokens=900",
    )
    answers: dict[str, httpx.Response] = {}

    def ask(name: str, max_tokens: int = 8) -> threading.Thread:
        body = {"prompt": f"Tell me a long story, {name}.", "max_tokens": max_tokens, "seed": 1}
        thread = threading.Thread(
            target=lambda: answers.__setitem__(name, httpx.post(server.url + "/generate", json=body, timeout=120))
        )
        thread.start()
        return thread

    def until(field: str, value: int) -> None:
        deadline = time.monotonic() + 60
        while httpx.get(server.url + "/healthz", timeout=10).json()[field] != value:
            assert time.monotonic() < deadline, f"/healthz never showed {field} = {value}"
            time.sleep(0.005)

    try:
        threads = [ask("generating", 900)]  # a long reply holds the only batch row
        until("running", 1)
        threads.append(ask("waiting"))
        until("waiting", 1)  # the queue (max_queue 1) is full now
        threads += [ask(f"turned away {i}") for i in range(4)]
        for thread in threads:
            thread.join()
        assert (
            answers["generating"].json()["replies"][0]["finish_reason"] == "length"
        )  # it was still generating when the rest came
        assert answers["waiting"].status_code == 200
        for busy in (answers[f"turned away {i}"] for i in range(4)):
            assert (
                busy.status_code == 503
                and int(busy.headers["retry-after"]) >= 1
                and busy.json()["error"]["code"] == "overloaded"
            )
        assert len([e for e in server.events() if e["kind"] == "turn"]) == 2  # a refused request wrote nothing
    finally:
        stop(server.proc)


def test_replies_written_elsewhere_are_recorded_and_compared_into_a_training_pair(served):
    from hominem_pipeline.core.online.feedback import feedback_tables

    post = lambda path, body: httpx.post(served.url + path, json=body, timeout=60)  # noqa: E731
    kind = post(
        "/turns",
        {"prompt": "My cat died today.", "reply": "I'm so sorry. How long did you have her?", "author": "hh-rlhf"},
    ).json()["turn"]
    curt = post("/turns", {"prompt": "My cat died today.", "reply": "Get another one.", "author": "hh-rlhf"}).json()[
        "turn"
    ]
    other = post("/turns", {"prompt": "Something else entirely.", "reply": "ok", "author": "hh-rlhf"}).json()["turn"]
    assert (
        post("/feedback", {"kind": "choice", "chosen": kind, "rejected": curt, "strength": "clear"}).status_code == 200
    )
    mixed = post("/feedback", {"kind": "choice", "chosen": kind, "rejected": other, "strength": "clear"})
    assert mixed.status_code == 422 and "different conversations" in mixed.json()["error"]["message"]
    assert post("/turns", {"prompt": "hi", "reply": "   "}).status_code == 422
    pairs = feedback_tables(served.events()).pairs
    [pair] = pairs[pairs["chosen_turn"] == kind].to_dict("records")
    assert (pair["prompt"], pair["chosen"], pair["rejected"], pair["weight"]) == (
        "My cat died today.",
        "I'm so sorry. How long did you have her?",
        "Get another one.",
        1.0,
    )


def test_every_route_declares_its_response_model_so_the_docs_show_it():
    """Every route the OpenAPI schema lists has a response model (serving/protocol.py), so /docs is the contract."""
    from fastapi.routing import APIRoute

    from hominem_pipeline.serving.routes import admin, dashboard, feedback, openai

    routes = [r for m in (admin, dashboard, feedback, openai) for r in m.router.routes if isinstance(r, APIRoute)]
    listed = [r for r in routes if r.include_in_schema]
    assert len(listed) >= 25
    assert [f"{sorted(r.methods)} {r.path}" for r in listed if r.response_model is None] == []


def test_two_raters_each_asking_every_route_for_the_others_words_get_403_or_nothing(
    tmp_path, tiny_student, tiny_encoder
):
    """Ana's conversation is hers: Ben's token cannot give feedback on her turns (so no repeat or question brings
    them back to him), and the dashboard shows him every figure but only his own pairs' words. An admin sees all."""
    import signal

    import pandas as pd

    from hominem_pipeline.serving.auth import rater_id
    from hominem_pipeline.testing.service import stop_serve
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    ana_token, ben_token = "ana-token-0123456789", "ben-token-0123456789"
    ana, ben = rater_id(ana_token), rater_id(ben_token)
    attunement = project / "data" / "attunement" / "2026-11-20" / "v"
    attunement.mkdir(parents=True)
    (attunement / "manifest.json").write_text(json.dumps({"partition": "2026-11-20", "version": "v", "metrics": {}}))
    (attunement / "attunement.json").write_text(json.dumps({"drift": {"drifted": [], "reference": [], "recent": []}}))
    example = {"pair_id": "p", "prompt": "Ana's secret worry", "chosen": "x", "rejected": "y", "p_chosen": 0.2}
    pd.DataFrame(
        [
            {
                "cluster": 0,
                "name": "worries",
                "size": 2,
                "examples": [example | {"rater": ana}, example | {"rater": ben, "prompt": "Ben's own worry"}],
            }
        ]
    ).to_parquet(attunement / "clusters.parquet")
    env = {"HOMINEM_TOKENS": f"rater {ana_token}, rater {ben_token}, admin {ADMIN_TOKEN}"}
    server = start(project, "--adapter", "none", "--reward-model", "none", env=env)
    as_ana, as_ben = ({"Authorization": f"Bearer {t}"} for t in (ana_token, ben_token))
    walked = []
    try:
        turns = [
            httpx.post(
                server.url + "/turns", headers=as_ana, json={"prompt": "Ana's secret worry", "reply": r}, timeout=60
            ).json()["turn"]
            for r in ("Ana's first secret reply", "Ana's second secret reply")
        ]
        choice = {"kind": "choice", "chosen": turns[0], "rejected": turns[1], "strength": "clear"}
        assert httpx.post(server.url + "/feedback", headers=as_ana, json=choice, timeout=30).status_code == 200
        refused = [
            httpx.post(server.url + "/feedback", headers=as_ben, json=body, timeout=30)
            for body in (choice, {"kind": "thumb", "turn": turns[0], "value": "up"})
        ]
        assert [r.status_code for r in refused] == [403, 403] and "another person's" in refused[0].json()["error"][
            "message"
        ]
        seen_by_ben = [
            httpx.get(server.url + path, headers=as_ben, timeout=60)
            for path in (
                "/feedback/repeat",
                "/feedback/next",
                "/feedback/consistency",
                "/dashboard/api/drift",
                "/dashboard/api/timeline",
                "/me/data",
                "/admin/raters",
                "/admin/audit",
            )
        ]
        assert [r.status_code for r in seen_by_ben][-2:] == [403, 403]
        assert not any("Ana's" in r.text for r in seen_by_ben)
        assert "Ben's own worry" in seen_by_ben[3].text
        assert seen_by_ben[5].status_code == 200 and seen_by_ben[5].json()["pairs"] == []
        # every route of the app's OpenAPI schema, as Ben, with no input: an answer, a refusal, never Ana's words
        for path, methods in httpx.get(server.url + "/openapi.json", timeout=30).json()["paths"].items():
            for method in methods:
                answer = httpx.request(method.upper(), server.url + path, headers=as_ben, json={}, timeout=120)
                walked.append((method, path, answer.status_code))
                assert "Ana's" not in answer.text, (method, path, answer.text[:300])
        assert len(walked) >= 25 and ("get", "/me/data", 200) in walked
        mine = httpx.get(server.url + "/me/data", headers=as_ana, timeout=60).json()
        assert [p["chosen"] for p in mine["pairs"]] == ["Ana's first secret reply"] and len(mine["turns"]) == 2
        taste = httpx.get(server.url + "/me/taste", headers=as_ana, timeout=60).json()  # her one choice, text alone
        assert taste["choices"] == 1 and taste["said"].startswith("from 1 choice:") and "length" in taste["features"]
        assert httpx.get(server.url + "/me/taste", headers=as_ben, timeout=60).json()["choices"] == 0
        assert "Ana's secret worry" in httpx.get(server.url + "/dashboard/api/drift", headers=as_ana, timeout=60).text
        admin = httpx.get(server.url + "/dashboard/api/drift", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert "Ana's secret worry" in admin.text and "Ben's own worry" in admin.text
        audit = httpx.get(server.url + "/admin/audit", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).json()
        assert [e.get("turn") for e in audit["entries"] if e["action"] == "forbidden"][:2] == [turns[0], turns[0]]
        # `hominem history` through the service: each rater their own rows; another's only with an admin token
        hist = server.url + "/history/choices"
        assert httpx.get(hist, headers=as_ben, timeout=60).json()["total"] == 0
        assert httpx.get(hist, headers=as_ben, params={"rater": ana}, timeout=60).status_code == 403
        assert httpx.get(hist, headers=as_ana, timeout=60).json()["rows"][0]["message"] == "Ana's secret worry"
        base = {"version": "base"}
        assert httpx.get(server.url + "/history/turns", headers=as_ben, params=base, timeout=60).json()["total"] == 0
        as_admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert httpx.get(server.url + "/history/turns", headers=as_admin, params=base, timeout=60).json()["total"] == 2
        cli = subprocess.run(
            [HOMINEM, "history", "choices", "--server", server.url, "--json"],
            env={**os.environ, "HOMINEM_TOKEN": ana_token, "HOMINEM_HOME": str(project)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0 and "Ana's secret worry" in cli.stdout, cli.stdout + cli.stderr
        # Ana takes her data back: nothing of hers is left under data/, and the service no longer knows her turns
        gone = httpx.delete(server.url + "/me/data", headers=as_ana, timeout=120)
        assert gone.status_code == 200 and gone.json()["events"] == 3, gone.text
        assert gone.json()["removed"] == ["attunement/2026-11-20/v"] and gone.json()["left"] == [], gone.text
        assert httpx.get(server.url + "/me/data", headers=as_ana, timeout=60).json()["turns"] == []
        assert httpx.post(server.url + "/feedback", headers=as_ana, json=choice, timeout=30).status_code == 404
        assert [p for p in (project / "data").rglob("*") if p.is_file() and b"secret" in p.read_bytes()] == []
    finally:
        stop_serve(server.proc, signal.SIGKILL)  # a crash: every refusal answered is in the audit log, chained
    from hominem_pipeline.core.online.audit import AuditLog

    log = AuditLog(project / "data" / "online" / "audit.jsonl")
    forbidden = [e for e in log.entries() if e["action"] == "forbidden"]
    refusals = 5 + sum(code == 403 for _, _, code in walked)  # 2 feedback posts, 2 admin routes, history, the walk's
    assert len(forbidden) == refusals and {e["who"] for e in forbidden} == {ben}
    assert [e["rater"] for e in log.entries() if e["action"] == "forget_own_data"] == [ben, ana]
    assert log.verify().intact


def test_a_person_sees_what_the_service_learned_of_their_taste(tmp_path, tiny_student, tiny_encoder):
    """GET /me/taste: after a person chose, eight times, the reply that asks them something back over one that
    does not, the service says in plain words that they prefer replies that end by asking something back, how sure
    it is, and from how many choices; the features it read are named."""
    from hominem_pipeline.core.attune.personal import TEXT_FEATURES
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    server = start(project, "--adapter", "none", "--reward-model", "none")
    try:
        for n in range(8):
            said = f"I walked {n + 2} miles today."
            a, b = (
                httpx.post(server.url + "/turns", json={"prompt": said, "reply": r}, timeout=60).json()["turn"]
                for r in (
                    f"Well done on {n + 2} miles. Where did you go?",
                    f"Well done on {n + 2} miles. You went very far.",
                )
            )
            choice = {"kind": "choice", "chosen": a, "rejected": b, "strength": "clear"}
            assert httpx.post(server.url + "/feedback", json=choice, timeout=30).status_code == 200
        taste = httpx.get(server.url + "/me/taste", timeout=60).json()
        assert taste["choices"] == 8 and taste["features"] == list(TEXT_FEATURES)  # no reward model served
        first = taste["leanings"][0]
        assert first["feature"] == "asks_back" and first["weight"] > 0 and first["sure"] > 0.9
        assert taste["said"].startswith("from 8 choices: prefers replies that end by asking something back (sure")
        # with a taste model to go on, a pair is picked from serving.pair_pool replies: two are shown and logged
        pair = httpx.post(server.url + "/generate", json={"prompt": "I swam today.", "n": 2, "seed": 3}, timeout=120)
        shown = pair.json()["replies"]
        assert len(shown) == 2 and shown[0]["turn"] != shown[1]["turn"]
        logged = [
            e for e in server.events() if e["kind"] == "turn" and e["messages"][-1]["content"] == "I swam today."
        ]
        assert sorted(e["id"] for e in logged) == sorted(r["turn"] for r in shown)
        assert {e["sampling"]["temperature"] for e in logged} <= {0.7, 1.05}
        assert taste["update"] is None  # no update was trained on her taste yet
        # an update that learned her taste and lost the student's facts, refused: the page tells her so, in words
        said = _refused_for_facts(project / "data", taste["rater"])
        taste = httpx.get(server.url + "/me/taste", timeout=60).json()
        assert taste["update"]["said"] == said and not taste["update"]["live"] and taste["update"]["learned"]
        assert "learned your taste" in said and "it cost what the student knew (general facts" in said
        from hominem_pipeline.testing.browser import chromium, wait_for

        driver = chromium()
        try:
            driver.get(server.url + "/")
            shown = wait_for(driver, lambda d: d.find_element("css selector", "#taste-update").text or None, 60)
            flagged = "error" in driver.find_element("css selector", "#taste-update").get_attribute("class")
        finally:
            driver.quit()
        assert shown == said and flagged
        (project / "data" / "live" / "history.json").write_text("{torn")  # a hand edit: the rest is still said
        taste = httpx.get(server.url + "/me/taste", timeout=60)
        assert taste.status_code == 200 and taste.json()["update"] is None and taste.json()["choices"] == 8
    finally:
        stop(server.proc)


def _refused_for_facts(data_dir, rater: str) -> str:
    """The gate's refusal of an update that learned `rater`'s taste but answered half the facts the live adapter
    answers, recorded in the live history as the gate records it; returns what the person is told."""
    from hominem_pipeline.core.evaluation.noise import NoiseRule, paired_check
    from hominem_pipeline.core.online.gate import GateReport
    from hominem_pipeline.core.online.gate_person import taste_verdict
    from hominem_pipeline.core.online.live import LiveState

    rule = NoiseRule(0.05, 0.95, 0.8)
    taste = paired_check(f"taste:{rater}", "their taste", [0.8, 0.7] * 10, [0.5] * 20, rule, "a tie")
    facts = paired_check("facts", "general facts answered", [1.0, 0.0] * 10, [1.0] * 20, rule, "the live adapter")
    report = GateReport(False, [facts.reason()], {"checks": {c.name: c.as_dict() for c in (taste, facts)}})
    state = LiveState(data_dir)
    state.refuse("u1", data_dir / "online" / "u1", None, gate=report.as_dict(), reason=facts.reason(), by="test")
    return taste_verdict(state.history(), rater, None)["said"]
