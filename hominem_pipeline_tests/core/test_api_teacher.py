"""The API teacher through the official `anthropic` and `openai` clients, against the local wire-format
server (hominem_pipeline/testing/wire_server.py) on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import multiprocessing
import sqlite3
import time

import pytest

from hominem_pipeline.core.common.schema import Prompt
from hominem_pipeline.core.config import ConfigError
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.teacher.api import APITeacher
from hominem_pipeline.core.teacher.call_cache import CallCache
from hominem_pipeline.core.teacher.providers import (
    FatalProviderError,
    MissingKeyError,
    parse_retry_after,
)
from hominem_pipeline.testing.wire_server import Fault, WireServer, judge
from hominem_pipeline_tests.conftest import make_project

KEY = "sk-test-SECRET-0123456789"
PROMPTS = [
    Prompt(
        prompt_id="p-friend",
        text="My best friend forgot my birthday and I feel invisible.",
        category="emotional_support",
        difficulty=2,
    ),
    Prompt(
        prompt_id="p-boss",
        text="My boss takes credit for my work. Should I say something?",
        category="disagreement_conflict",
        difficulty=3,
    ),
]


@pytest.fixture
def server():
    with WireServer(api_key=KEY) as s:
        yield s


def api_cfg(project, server, provider="openai", *, structured=None, **client):
    base = server.url if provider == "anthropic" else server.url + "/v1"
    api = {
        "model": "claude-sonnet-4-6" if provider == "anthropic" else "gpt-4o-mini",
        "base_url": base,
        "api_key_env": "HOMINEM_TEST_KEY",
    }
    if structured:
        api["structured_output"] = structured
    overrides = {
        "teacher": {
            "provider": provider,
            "api": api,
            "prices": {
                api["model"]: {"input": 3.0, "output": 15.0}
            },  # the test's own figures, for the cost arithmetic
            "client": {
                "concurrency": 4,
                "requests_per_minute": None,
                "tokens_per_minute": None,
                "timeout_seconds": 5,
                "max_retries": 3,
                "backoff_seconds": 0.01,
                "max_backoff_seconds": 0.05,
                "cache_path": str(project / "data" / "cache" / "calls.sqlite"),
                **client,
            },
        }
    }
    return load_config(project / "config" / "tiny.yaml", root=project, overrides=overrides)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("HOMINEM_TEST_KEY", KEY)


def sample_and_rate(cfg):
    teacher = APITeacher(cfg)
    try:
        sampled = teacher.sample(PROMPTS, cfg.teacher.candidate_styles(), 32, seed=3)
        rated = teacher.rate(sampled.items)
    finally:
        teacher.close()
    return sampled, rated


@pytest.mark.parametrize(
    "provider, structured, stream",
    [
        ("anthropic", None, False),
        ("anthropic", None, True),
        ("openai", None, False),
        ("openai", None, True),
        ("openai_compatible", None, False),
        ("anthropic", "prompt", False),
    ],
)
def test_labels_come_back_structured_for_every_provider(project, server, provider, structured, stream):
    cfg = api_cfg(project, server, provider, structured=structured, stream=stream)
    sampled, rated = sample_and_rate(cfg)
    dims = cfg.dimension_names
    assert len(sampled.items) == len(PROMPTS) * cfg.teacher.candidates_per_prompt
    assert [t.style for t in sampled.items[:3]] == ["warm", "curt", "hot"]
    assert sampled.items[1].response == "Just deal with it."  # the curt system prompt reached the server
    assert rated.failed == [] and rated.rejected == []
    by_id = {t.trajectory_id: t for t in sampled.items}
    for label in rated.items:
        expected = judge(by_id[label.trajectory_id].response, dims)
        assert label.vector == expected["vector"] and label.scalar == expected["scalar"]
        assert label.rationale == expected["rationale"] and label.safety_score == expected["safety_score"]
    rate_bodies = [r["body"] for r in server.requests if "Record your judgement" in json.dumps(r["body"])]
    mode = cfg.teacher.api.resolved_structured_output(provider)
    if mode == "tool":
        assert all(
            b["tool_choice"] == {"type": "tool", "name": "record_label", "disable_parallel_tool_use": True}
            for b in rate_bodies
        )
    elif mode == "json_schema":
        assert all(b["response_format"]["type"] == "json_schema" for b in rate_bodies)
    else:
        assert all(
            "JSON Schema:" in json.dumps(b["messages"]) and "tools" not in b and "response_format" not in b
            for b in rate_bodies
        )
    if provider == "anthropic":  # the API rejects sampling parameters since 2026-10-21
        assert all("temperature" not in r["body"] and "top_p" not in r["body"] for r in server.requests)
    else:
        assert {r["body"].get("temperature") for r in server.requests if "Record" not in json.dumps(r["body"])} == {
            0.7,
            0.8,
            1.3,
        }
    assert all(
        bool(r["body"].get("stream")) == (stream and "Record" not in json.dumps(r["body"])) for r in server.requests
    )
    usage = rated.usage
    assert usage["api_calls"] == len(rate_bodies) and usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    price = cfg.teacher.prices[cfg.teacher.api.model]
    assert usage["cost_usd"] == pytest.approx(
        (usage["input_tokens"] * price.input + usage["output_tokens"] * price.output) / 1e6
    )


def test_invalid_output_is_reasked_once_then_quarantined_with_the_raw_text(project, server):
    cfg = api_cfg(project, server, "anthropic")
    teacher = APITeacher(cfg)
    sampled = teacher.sample(PROMPTS[:1], cfg.teacher.candidate_styles(), 32, seed=3)
    warm, curt, hot = sampled.items
    server.add_fault(Fault("invalid", match="Just deal with it.", times=None))  # always invalid for the curt reply
    server.add_fault(Fault("garbage", match=warm.response[:30], times=1))  # invalid once for the warm one
    before = server.count()
    rated = teacher.rate(sampled.items)
    teacher.close()
    assert sorted(lab.trajectory_id for lab in rated.items) == sorted([warm.trajectory_id, hot.trajectory_id])
    (rejected,) = rated.rejected
    assert rejected["trajectory_id"] == curt.trajectory_id and rejected["check"] == "invalid_output"
    assert (
        "vector.empathy: 7.5000 outside [-1.0, 1.0]" in rejected["reason"]
        and "safety_score: missing" in rejected["reason"]
    )
    assert json.loads(rejected["row"])["vector"]["empathy"] == 7.5  # the raw answer is kept
    assert server.count() - before == 5  # 3 first asks + 2 re-asks
    reasks = [r["body"] for r in server.requests[before:] if len(r["body"]["messages"]) == 3]
    assert len(reasks) == 2 and all("That label is invalid" in r["messages"][2]["content"] for r in reasks)


def test_rate_limits_and_server_errors_are_retried_honouring_retry_after(project, server):
    cfg = api_cfg(project, server, "openai", concurrency=1)
    server.add_fault(Fault("status", status=429, retry_after=0.3, times=1))
    server.add_fault(Fault("status", status=500, times=1))
    server.add_fault(Fault("drop", times=1))
    teacher = APITeacher(cfg)
    out = teacher.sample(PROMPTS[:1], cfg.teacher.candidate_styles(), 32, seed=3)
    teacher.close()
    assert out.failed == [] and len(out.items) == 3
    assert out.usage["retries"] == 3 and out.usage["api_calls"] == 6
    limited = server.requests[0]  # the first request got the 429; its retry waited as long as retry-after said
    retry = next(r for r in server.requests[1:] if r["body"] == limited["body"])
    assert retry["at"] - limited["at"] >= 0.3


def test_a_call_that_keeps_timing_out_is_recorded_as_failed(project, server):
    cfg = api_cfg(project, server, "openai", timeout_seconds=0.3, max_retries=1)
    server.add_fault(Fault("hang", match="boss takes credit", seconds=1.5, times=None))
    teacher = APITeacher(cfg)
    out = teacher.sample(PROMPTS, cfg.teacher.candidate_styles(), 32, seed=3)
    teacher.close()
    assert len(out.items) == 3 and {t.prompt_id for t in out.items} == {"p-friend"}
    assert sorted(f["id"] for f in out.failed) == ["p-boss-c0", "p-boss-c1", "p-boss-c2"]
    assert all(f["attempts"] == 2 and "timed out" in f["error"] for f in out.failed)
    assert out.usage["failed_calls"] == 3


def test_a_second_run_is_served_entirely_from_the_cache(project, server):
    cfg = api_cfg(project, server, "anthropic")
    first = sample_and_rate(cfg)
    calls = server.count()
    second = sample_and_rate(cfg)
    assert server.count() == calls
    assert second[0].usage["api_calls"] == 0 and second[1].usage["api_calls"] == 0
    assert second[1].usage["cache_hits"] == len(first[1].items)
    assert [t.response for t in second[0].items] == [t.response for t in first[0].items]
    assert [lab.model_dump() for lab in second[1].items] == [lab.model_dump() for lab in first[1].items]
    assert second[1].usage["cost_saved_by_cache_usd"] == pytest.approx(first[1].usage["cost_usd"])


def test_an_answer_that_failed_to_parse_is_replayed_with_its_re_ask(project, server):
    cfg = api_cfg(project, server, "openai")
    teacher = APITeacher(cfg)
    sampled = teacher.sample(PROMPTS[:1], cfg.teacher.candidate_styles(), 32, seed=3)
    warm = sampled.items[0]
    server.add_fault(Fault("garbage", match=warm.response[:30], times=1))  # one 200 answer that is not JSON
    first = teacher.rate(sampled.items)
    teacher.close()
    assert len(first.items) == 3 and first.usage["api_calls"] == 4  # 3 asks + the warm reply's re-ask
    cached = [
        row[0] for row in sqlite3.connect(cfg.path(cfg.teacher.client.cache_path)).execute("SELECT answer FROM calls")
    ]
    assert (
        sum("I cannot rate that" in answer for answer in cached) == 1
    )  # the unreadable answer is kept: the re-ask quotes it
    before = server.count()
    again = APITeacher(cfg)
    rebuilt = again.rate(sampled.items)  # a later run replays the whole exchange: no call, the same labels
    again.close()
    assert server.count() == before and rebuilt.usage["cache_hits"] == 4
    assert [lab.model_dump() for lab in rebuilt.items] == [lab.model_dump() for lab in first.items]


def test_a_day_built_through_faults_is_rebuilt_from_its_call_cache_elsewhere_with_no_call(
    project, tiny_student, tiny_encoder, tmp_path
):
    """A teacher that fails now and then (429, 500, a dropped connection, an answer that is not JSON, labels
    out of range) and never says the same thing twice: a fresh project with only the call cache rebuilds
    the day's prompts, candidates, labels and quarantine without a call, row for row."""
    import shutil

    import pandas as pd

    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    day = "2026-03-05"
    stages = ["prompts", "teacher_trajectories", "teacher_labels"]
    with WireServer(api_key=KEY, drift=True) as drifting:
        cfg = api_cfg(project, drifting, "openai_compatible", concurrency=1)
        built = {}
        for name in stages:
            if name == "teacher_trajectories":
                for fault in (
                    Fault("status", status=429, retry_after=0.05),
                    Fault("status", status=500),
                    Fault("drop"),
                ):
                    drifting.add_fault(fault)
            if (
                name == "teacher_labels"
                # one reply's label is not JSON once (then re-asked); another's is out of range every time
                # (quarantined)
            ):
                replies = list(
                    pd.read_parquet(built["teacher_trajectories"].ref.file("trajectories.parquet"))["response"]
                )
                drifting.add_fault(Fault("garbage", match=json.dumps(replies[0])[1:-1][:40], times=1))
                drifting.add_fault(Fault("invalid", match=json.dumps(replies[1])[1:-1][:40], times=None))
            built[name] = run_stage(STAGES_BY_NAME[name], cfg, day)
        assert (
            built["teacher_trajectories"].metrics["retries"] == 3
            and built["teacher_labels"].metrics["quarantined"] == 1
        )
        assert built["teacher_labels"].metrics["api_calls"] == len(replies) + 2  # one ask each, and two re-asks
        assert all(out.metadata.get("missing", 0) == 0 for out in built.values())
        asked = drifting.count()

        elsewhere = make_project(
            tmp_path / "elsewhere", tiny_student, tiny_encoder
        )  # another folder, no data of the first
        (elsewhere / "data" / "cache").mkdir(parents=True)
        shutil.copy(cfg.path(cfg.teacher.client.cache_path), elsewhere / "data" / "cache" / "calls.sqlite")
        again_cfg = api_cfg(elsewhere, drifting, "openai_compatible", concurrency=1)
        rebuilt = {name: run_stage(STAGES_BY_NAME[name], again_cfg, day) for name in stages}
        assert drifting.count() == asked  # not one call
    assert rebuilt["teacher_labels"].metrics["api_calls"] == 0
    for name, table in (
        ("prompts", "prompts.parquet"),
        ("teacher_trajectories", "trajectories.parquet"),
        ("teacher_labels", "labels.parquet"),
    ):
        pd.testing.assert_frame_equal(
            pd.read_parquet(rebuilt[name].ref.file(table)), pd.read_parquet(built[name].ref.file(table))
        )
    quarantined = [
        sorted((project / "data" / "quarantine" / "teacher_labels" / day).rglob("*.parquet"))[-1],
        sorted((elsewhere / "data" / "quarantine" / "teacher_labels" / day).rglob("*.parquet"))[-1],
    ]
    pd.testing.assert_frame_equal(*(pd.read_parquet(p) for p in quarantined))


def test_the_same_exchange_twice_is_rated_once_so_a_rebuild_gives_the_same_labels(project, server):
    cfg = api_cfg(project, server, "anthropic")
    teacher = APITeacher(cfg)
    sampled = teacher.sample(PROMPTS[:1], cfg.teacher.candidate_styles(), 32, seed=3)
    twin = sampled.items[0].model_copy(
        update={"trajectory_id": "p-friend-twin", "candidate_index": 9}
    )  # the same prompt and reply again
    live = teacher.rate([*sampled.items, twin])
    teacher.close()
    assert live.usage["api_calls"] == 3 and [lab.trajectory_id for lab in live.items] == [
        *(t.trajectory_id for t in sampled.items),
        "p-friend-twin",
    ]
    assert live.items[3].model_dump(exclude={"trajectory_id"}) == live.items[0].model_dump(exclude={"trajectory_id"})
    again = APITeacher(cfg)
    rebuilt = again.rate([*sampled.items, twin])
    again.close()
    assert rebuilt.usage["api_calls"] == 0 and [lab.model_dump() for lab in rebuilt.items] == [
        lab.model_dump() for lab in live.items
    ]


def test_a_wrong_key_stops_the_run_without_showing_the_key(project, server, monkeypatch):
    monkeypatch.setenv("HOMINEM_TEST_KEY", "sk-wrong-key-42")
    cfg = api_cfg(project, server, "openai")
    teacher = APITeacher(cfg)
    with pytest.raises(FatalProviderError, match=r"HTTP 401.*\$HOMINEM_TEST_KEY") as err:
        teacher.sample(PROMPTS[:1], cfg.teacher.candidate_styles(), 8, seed=1)
    teacher.close()
    assert "sk-wrong-key-42" not in str(err.value)


def test_a_missing_key_names_the_variable(project, server, monkeypatch):
    monkeypatch.delenv("HOMINEM_TEST_KEY")
    with pytest.raises(MissingKeyError, match="HOMINEM_TEST_KEY"):
        APITeacher(api_cfg(project, server, "anthropic"))


def test_api_provider_settings_are_checked(project):
    with pytest.raises(ConfigError, match="needs `teacher.api.model`"):
        load_config(project / "config" / "tiny.yaml", root=project, overrides={"teacher": {"provider": "openai"}})
    with pytest.raises(ConfigError, match="needs `teacher.api.base_url`"):
        load_config(
            project / "config" / "tiny.yaml",
            root=project,
            overrides={"teacher": {"provider": "openai_compatible", "api": {"model": "m"}}},
        )
    with pytest.raises(ConfigError, match="structured_output 'tool' is the Anthropic"):
        load_config(
            project / "config" / "tiny.yaml",
            root=project,
            overrides={"teacher": {"provider": "openai", "api": {"model": "m", "structured_output": "tool"}}},
        )
    with pytest.raises(ConfigError, match="no style has `weak: true`"):
        load_config(
            project / "config" / "tiny.yaml",
            root=project,
            overrides={"teacher": {"weak_share": 0.5, "styles": [{"name": "a", "temperature": 1.0, "top_p": 1.0}]}},
        )


def test_retry_after_header_forms():
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("1500", milliseconds=True) == 1.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: no wait
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def _hammer(path: str, worker: int, n: int) -> None:
    cache = CallCache(path)
    for i in range(n):
        key = f"k{i}"  # both workers write the same keys, interleaved with reads
        cache.put(key, {"text": f"w{worker}-{i}"}, provider="p", model="m", purpose="sample")
        assert cache.get(key)["text"] in (f"w0-{i}", f"w1-{i}")  # its own answer, or the other's if that came first
    cache.close()


def test_the_cache_is_safe_for_two_processes(tmp_path):
    path = str(tmp_path / "calls.sqlite")
    CallCache(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(path, w, 300)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = CallCache(path)
    assert len(cache) == 300
    assert cache.get("k7")["text"] in ("w0-7", "w1-7")  # the first answer stored wins
    cache.close()


def test_no_secret_reaches_logs_mlflow_or_artifacts(project, server, caplog):
    """The teacher stages end to end on an API provider, with every logger at DEBUG."""
    from mlflow.tracking import MlflowClient

    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    cfg = api_cfg(project, server, "openai")
    server.add_fault(Fault("status", status=429, retry_after=0.05, times=2))
    caplog.set_level(logging.DEBUG)
    for stage in ("prompts", "teacher_trajectories", "teacher_labels"):
        result = run_stage(STAGES_BY_NAME[stage], cfg, "2026-03-02")
    assert result.metrics["labels"] > 0 and result.metadata["teacher"]["provider"] == "openai"
    assert KEY not in caplog.text
    assert any("authorization" in r["headers"] for r in server.requests)  # the key was sent, to the server only
    client = MlflowClient(cfg.mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id])
    assert len(runs) == 3
    for run in runs:
        assert KEY not in json.dumps(run.data.params) and KEY not in json.dumps(run.data.tags)
    for path in (project / "data").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".parquet", ".yaml", ".txt", ".sqlite"):
            assert KEY.encode() not in path.read_bytes(), path


def test_an_incomplete_partition_is_rebuilt_and_only_the_missing_calls_are_made(project, server):
    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    cfg = api_cfg(project, server, "openai", max_retries=0)
    run_stage(STAGES_BY_NAME["prompts"], cfg, "2026-03-03")
    server.add_fault(Fault("status", status=503, times=2))
    first = run_stage(STAGES_BY_NAME["teacher_trajectories"], cfg, "2026-03-03")
    assert "-partial-" in first.ref.version and first.metadata["missing"] == 2 and first.metrics["missing"] == 2
    assert len(json.loads(first.ref.file("failed_calls.json").read_text())) == 2
    before = server.count()
    second = run_stage(STAGES_BY_NAME["teacher_trajectories"], cfg, "2026-03-03")
    assert server.count() - before == 2  # the answered calls came from the cache
    assert "-partial-" not in second.ref.version and second.metadata["missing"] == 0
    assert second.metrics["trajectories"] == first.metrics["trajectories"] + 2
    third = run_stage(STAGES_BY_NAME["teacher_trajectories"], cfg, "2026-03-03")
    assert third.cache_hit and third.ref.version == second.ref.version


def test_a_failed_prompt_writing_call_leaves_the_prompts_partial_and_is_made_again(project, server):
    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    cfg = api_cfg(project, server, "openai", max_retries=0)
    server.add_fault(Fault("status", status=503, times=1))  # the first writing call fails for good
    first = run_stage(STAGES_BY_NAME["prompts"], cfg, "2026-03-04")
    assert "-partial-" in first.ref.version and first.metrics["missing"] == 1
    [failed] = json.loads(first.ref.file("failed_calls.json").read_text())
    assert failed["purpose"] == "write"
    assert "teacher call failed" in {
        d["reason"].split(": ")[1] for d in first.metadata["generators_dropped"]
    }  # not "unusable teacher output"
    before = server.count()
    second = run_stage(STAGES_BY_NAME["prompts"], cfg, "2026-03-04")
    assert server.count() - before == 1 and "-partial-" not in second.ref.version and second.metrics["missing"] == 0


def test_a_partial_run_says_so_in_its_exit_status_and_summary(project, server):
    import os
    import subprocess
    import sys
    from pathlib import Path

    (project / "config" / "hosted.yaml").write_text(
        "extends: config/tiny.yaml\nteacher:\n  provider: openai\n  api: {model: gpt-4o-mini, base_url: '"
        + server.url
        + "/v1', api_key_env: HOMINEM_TEST_KEY}\n"
        "  client: {max_retries: 0, backoff_seconds: 0.01, requests_per_minute: null, tokens_per_minute: null}\n"
    )
    server.add_fault(Fault("status", status=503, times=1))  # one writing call fails for good
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "hominem"),
            "run",
            "--config",
            "config/hosted.yaml",
            "--date",
            "2026-03-05",
            "--select",
            "prompts",
        ],
        cwd=project,
        env={**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        "prompts is partial: 1 teacher call(s) failed after every retry" in said
        and "run the same command again" in said
    )
    [row] = [line for line in done.stdout.splitlines() if line.lstrip("│ ").startswith("prompts")]
    assert "-partial-" in row and "partial (1 calls failed)" in row  # the whole version id, marked


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound once by this process, then let go)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_address_where_nothing_listens_stops_at_the_first_call_naming_it(project, provider):
    url = f"http://127.0.0.1:{closed_port()}" + ("/v1" if provider == "openai" else "")
    overrides = {
        "teacher": {
            "provider": provider,
            "api": {"model": "m", "base_url": url, "api_key_env": "HOMINEM_TEST_KEY"},
            "client": {
                "max_retries": 5,
                "backoff_seconds": 5.0,
                "requests_per_minute": None,
                "tokens_per_minute": None,
            },
        }
    }
    cfg = load_config(project / "config" / "tiny.yaml", root=project, overrides=overrides)
    teacher = APITeacher(cfg)
    try:
        with pytest.raises(
            FatalProviderError
        ) as err:  # raised, not five retries 5 s apart and a failed call: nothing will ever answer there
            teacher.sample(PROMPTS, cfg.teacher.candidate_styles(), 8, seed=1)
    finally:
        teacher.close()
    said = str(err.value)
    assert (
        f"cannot reach the teacher at {url}: connection refused" in said
        and "teacher.api.base_url" in said
        and "\n" not in said
    ), said


def test_a_run_whose_teacher_cannot_be_reached_stops_before_it_starts_in_one_line(project):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from hominem_pipeline.core.pipeline.lineage import lineage

    url = f"http://127.0.0.1:{closed_port()}/v1"
    (project / "config" / "nowhere.yaml").write_text(
        "extends: config/tiny.yaml\nteacher:\n  provider: openai\n  api: {model: gpt-4o-mini, base_url: '"
        + url
        + "', api_key_env: HOMINEM_TEST_KEY}\n"
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "hominem"),
            "run",
            "--config",
            "config/nowhere.yaml",
            "--date",
            "2026-03-05",
            "--select",
            "prompts",
        ],
        cwd=project,
        env={**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = [line for line in done.stderr.splitlines() if "cannot reach the teacher" in line]
    assert done.returncode != 0 and len(said) == 1 and f"{url}: connection refused" in said[0], (
        done.stdout + done.stderr
    )
    assert "APITimeoutError" not in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr
    assert "failed at prompts" not in done.stderr  # checked before any run starts: no failed run to look at
    cfg = load_config(project / "config" / "nowhere.yaml", root=project)
    assert lineage(cfg).newest("prompts")[0] is None  # no partial version of the prompts it had before the calls


def test_the_limiter_holds_requests_and_tokens_per_minute():
    import asyncio

    from hominem_pipeline.core.teacher.dispatch import RateLimiter

    async def requests() -> float:
        limiter = RateLimiter(requests_per_minute=1200, tokens_per_minute=None)  # 20/s, one second's burst
        started = time.monotonic()
        for _ in range(30):
            await limiter.acquire(10)
        return time.monotonic() - started

    async def tokens() -> tuple[float, float]:
        limiter = RateLimiter(requests_per_minute=None, tokens_per_minute=60_000)  # 1,000/s
        started = time.monotonic()
        await limiter.acquire(1500)  # goes at once, 500 into debt
        limiter.settle(1500, 1000)  # it used fewer: 500 back, out of debt
        await limiter.acquire(100)
        quick = time.monotonic() - started
        await limiter.acquire(1000)  # 100 left after the last one, so this goes at once too, 900 into debt
        await limiter.acquire(10)  # waits out the debt: about 0.9 s
        return quick, time.monotonic() - started

    assert asyncio.run(requests()) >= 0.4  # the 10 beyond the burst waited at 20 per second
    quick, total = asyncio.run(tokens())
    assert quick < 0.2 and total >= 0.8


@pytest.mark.parametrize("name", ["anthropic", "openai", "lmstudio"])
def test_the_example_overlays_are_valid(project, name):
    from hominem_pipeline_tests.conftest import REPO

    cfg = load_config(REPO / "config" / "examples" / f"{name}.yaml", root=project)
    assert cfg.teacher.provider != "local" and cfg.teacher.api.model
    assert (
        cfg.teacher.key_env() == {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "lmstudio": None}[name]
    )


def test_workers_on_two_hosts_share_the_call_cache_in_a_database(
    project, tiny_student, tiny_encoder, tmp_path, server
):
    """teacher.client.cache_url: a Postgres every worker reaches. What one project (one host) asked, another
    with none of its files is answered from there, without a call, the same rows."""
    from hominem_pipeline.testing.services import PostgresServer

    with PostgresServer() as pg:
        first = sample_and_rate(api_cfg(project, server, "openai", cache_url=pg.url))
        asked = server.count()
        elsewhere = make_project(tmp_path / "other-host", tiny_student, tiny_encoder)
        again = sample_and_rate(api_cfg(elsewhere, server, "openai", cache_url=pg.url))
        assert server.count() == asked and again[1].usage["api_calls"] == 0
        assert [lab.model_dump() for lab in again[1].items] == [lab.model_dump() for lab in first[1].items]
        assert not (elsewhere / "data" / "cache" / "calls.sqlite").exists()  # the database, not a file, answered
