"""The preference history index over a real interaction log: sqlite embedded, and a real Postgres
(started by hominem_pipeline/testing/services.py, stopped after)."""

from __future__ import annotations

import pytest

from hominem_pipeline.core.online.events import EVENT, context_digest
from hominem_pipeline.core.online.history import HistoryIndex, index_url
from hominem_pipeline.core.online.log import InteractionLog
from hominem_pipeline.testing.services import PostgresServer

DAY = "2026-11-20"
DOMAINS = {"exam": "study", "mother": "family", "boss": "work"}


def domain_of(prompts):
    return [next((d for word, d in DOMAINS.items() if word in p), "other") for p in prompts]


def turn(i, text, adapter="lora_adapter/2026-11-19/abc123", rater="ana", day=DAY):
    messages = [{"role": "user", "content": text}]
    return EVENT.validate_python(
        {
            "kind": "turn",
            "id": f"t{i}",
            "time": f"{day}T10:{i:02d}:00+00:00",
            "rater": rater,
            "session": f"s{i // 2}",
            "messages": messages,
            "reply": f"reply {i}",
            "model": "hominem",
            "adapter": adapter,
            "reward": {"scalar": 0.1 * i},
            "sampling": {"temperature": 0.7},
            "finish_reason": "stop",
            "completion_tokens": 3,
            "context": context_digest(messages),
        }
    ).model_dump()


def feedback(kind, i, rater="ana", day=DAY, **fields):
    return EVENT.validate_python(
        {"kind": kind, "id": f"{kind}{i}", "time": f"{day}T11:{i:02d}:00+00:00", "rater": rater, **fields}
    ).model_dump(exclude_none=True)


def first_day(log: InteractionLog) -> None:
    log.append(
        [
            turn(0, "I failed my exam again."),
            turn(1, "I failed my exam again."),
            turn(2, "My mother never calls me.", adapter=None),
            turn(3, "My mother never calls me.", adapter=None),
            turn(4, "My boss shouts at me.", rater="ben"),
            turn(5, "My boss shouts at me.", rater="ben"),
            feedback("choice", 0, chosen="t1", rejected="t0", strength="clear"),
            feedback("choice", 1, chosen="t2", rejected="t3", strength="slight"),
            feedback("choice", 2, rater="ben", chosen="t4", rejected="t5", strength="strong"),
            feedback("thumb", 0, turn="t1", value="up"),
            feedback("nudge", 0, turn="t0", dimension="empathy", direction="more"),
            feedback("emotion", 0, turn="t3", valence=-2, tags=["high_arousal"]),
        ]
    )


@pytest.fixture(scope="module")
def postgres():
    with PostgresServer() as pg:
        yield pg


@pytest.fixture(params=["sqlite", "postgres"])
def index(request, tmp_path):
    url = index_url(None, tmp_path) if request.param == "sqlite" else request.getfixturevalue("postgres").url
    with HistoryIndex(url) as ix:
        ix.rebuild(tmp_path / "empty")  # a fresh index (the Postgres server is shared by the module)
        yield ix


def test_an_index_written_with_other_columns_is_read_again_from_the_log(tmp_path):
    import sqlalchemy as sa

    log = InteractionLog(tmp_path / "log")
    first_day(log)
    url = index_url(None, tmp_path)
    with sa.create_engine(
        url
    ).begin() as conn:  # an earlier release's index: its turns without their replies, every log byte read
        conn.execute(sa.text("create table turns (id varchar primary key, time varchar, rater varchar, prompt text)"))
        conn.execute(sa.text("create table log_files (name varchar primary key, bytes bigint)"))
        conn.execute(sa.text(f"insert into log_files values ('{DAY}.jsonl', 999999)"))
    with HistoryIndex(url) as index:
        assert index.reindexed
        assert index.update(tmp_path / "log", domain_of).turns == 6
        assert index.choices_of_rater("ana").rows[0]["chosen"] == "reply 2"
    with HistoryIndex(url) as index:
        assert not index.reindexed


def test_the_index_answers_the_three_questions_from_the_log(index, tmp_path):
    log = InteractionLog(tmp_path / "log")
    first_day(log)
    stats = index.update(tmp_path / "log", domain_of)
    assert (stats.files, stats.turns, stats.feedback) == (1, 6, 6)
    assert index.counts() == {"turns": 6, "choice": 3, "thumb": 1, "nudge": 1, "emotion": 1}

    ana = index.choices_of_rater("ana")
    assert ana.total == 2 and [r["id"] for r in ana.rows] == ["choice1", "choice0"]  # newest first
    assert ana.rows[1] | {"time": None} == {
        "id": "choice0",
        "time": None,
        "message": "I failed my exam again.",
        "chosen": "reply 1",
        "rejected": "reply 0",
        "strength": "clear",
        "domain": "study",
        "chosen_turn": "t1",
        "rejected_turn": "t0",
    }  # what the choice was about
    assert (
        index.choices_of_rater("ana", limit=1).rows[0]["id"] == "choice1"
        and index.choices_of_rater("nobody").total == 0
    )

    assert {r["id"] for r in index.turns_of_version("abc123").rows} == {"t0", "t1", "t4", "t5"}
    assert {r["id"] for r in index.turns_of_version("base").rows} == {"t2", "t3"}
    assert (index.turns_of_version("base").rows[0]["message"], index.turns_of_version("base").rows[0]["reply"]) == (
        "My mother never calls me.",
        "reply 3",
    )

    assert [r["id"] for r in index.pairs_of_domain("family").rows] == ["choice1"]
    assert index.pairs_of_domain("work").rows[0]["rater"] == "ben" and index.pairs_of_domain("health").total == 0


def test_an_update_reads_only_what_is_new_and_feedback_on_an_earlier_turn_gets_its_domain(index, tmp_path):
    folder = tmp_path / "log"
    log = InteractionLog(folder)
    first_day(log)
    index.update(folder, domain_of)
    again = index.update(folder, domain_of)
    assert (again.files, again.turns, again.feedback, again.bytes) == (0, 0, 0, 0)

    later = "2026-11-21"
    log.append(
        [feedback("choice", 3, day=later, chosen="t0", rejected="t1", strength="slight")]
    )  # a later day's choice on yesterday's turns
    path = folder / f"{later}.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"kind": "thumb", "id": "half-wri')  # a line still being written: left for the next update
    step = index.update(folder, domain_of)
    assert (step.files, step.turns, step.feedback) == (1, 0, 1)
    assert [(r["id"], r["domain"]) for r in index.choices_of_rater("ana").rows][0] == ("choice3", "study")
    with open(path, "ab") as f:
        f.write(f'tten", "time": "{later}T12:00:00+00:00", "rater": "ana", "turn": "t4", "value": "down"}}\n'.encode())
    assert index.update(folder, domain_of).feedback == 1 and index.counts()["thumb"] == 2

    before = [index.choices_of_rater("ana").rows, index.pairs_of_domain("study").rows]
    rebuilt = index.rebuild(folder, domain_of)
    assert (rebuilt.turns, rebuilt.feedback) == (6, 8)
    assert [index.choices_of_rater("ana").rows, index.pairs_of_domain("study").rows] == before


def test_two_indexes_over_one_log_in_one_database_write_each_event_once(postgres, tmp_path):
    log = InteractionLog(tmp_path / "log")
    first_day(log)
    with HistoryIndex(postgres.url) as a, HistoryIndex(postgres.url) as b:
        a.rebuild(tmp_path / "empty")
        a.update(tmp_path / "log", domain_of)
        b.add(log.read(DAY), domain_of)  # another process offering the same events
        assert b.counts() == {"turns": 6, "choice": 3, "thumb": 1, "nudge": 1, "emotion": 1}


def test_the_url_comes_from_the_environment_then_the_config_then_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("HOMINEM_HISTORY_URL", raising=False)
    assert index_url(None, tmp_path) == f"sqlite:///{tmp_path}/history.sqlite"
    assert index_url("postgresql+psycopg2://u@h/db", tmp_path) == "postgresql+psycopg2://u@h/db"
    monkeypatch.setenv("HOMINEM_HISTORY_URL", "postgresql+psycopg2://v@h/other")
    assert index_url("postgresql+psycopg2://u@h/db", tmp_path) == "postgresql+psycopg2://v@h/other"


def test_hominem_history_answers_from_a_project_log_with_domains_by_the_encoder(project):
    """The real entry point: the first query indexes the log (domains by the tiny encoder), later ones read only
    what is new."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    log = InteractionLog(project / "data" / "online" / "log")
    first_day(log)
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    env.pop("HOMINEM_HISTORY_URL", None)

    def hominem(*args):
        done = subprocess.run(
            [str(Path(sys.executable).parent / "hominem"), "history", *args, "--config", "config/tiny.yaml"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done

    first = hominem("choices", "--rater", "ana", "--json")
    assert first.returncode == 0, first.stderr
    assert "indexed 6 turns and 6 feedback events from 1 log files" in first.stdout
    answer = json.loads(first.stdout[first.stdout.index("{") :])
    assert answer["total"] == 2 and [r["id"] for r in answer["rows"]] == ["choice1", "choice0"]
    domain = answer["rows"][1]["domain"]
    assert domain and (project / "data" / "history.sqlite").is_file()
    pairs = hominem("pairs", "--domain", domain, "--json")
    assert "indexed" not in pairs.stdout and json.loads(pairs.stdout)["total"] >= 1
    turns = hominem("turns", "--version", "base")
    assert turns.returncode == 0 and "turns of base: 2" in turns.stdout and "My mother never calls me." in turns.stdout
    wrong = hominem("pairs", "--domain", "cooking")
    assert (
        wrong.returncode == 2
        and "unknown domain 'cooking'" in wrong.stderr + wrong.stdout
        and "emotional_support" in wrong.stderr + wrong.stdout
    )
