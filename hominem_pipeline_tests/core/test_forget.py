"""Forgetting a person: the tombstone hides their events from every reader of the log, the files are rewritten
without them under a writer that keeps appending, and their words leave caches a sentence at a time."""

import json
import sqlite3

from hominem_pipeline.core.online.forget import _drop_entries, _drop_sqlite_rows, their_words, write_tombstone
from hominem_pipeline.core.online.log import InteractionLog, forgotten, read_events, tombstones
from hominem_pipeline_tests.core.test_export import events


def test_a_tombstone_hides_their_events_up_to_it_and_a_running_writer_keeps_appending_after_the_drop(tmp_path):
    folder = tmp_path / "online" / "log"
    writer = InteractionLog(folder)  # the service's, open on the day's file
    assert writer.append(events()) == [True] * 6
    write_tombstone(folder, "r-ana", "cli:test")
    path = folder / "2026-11-20.jsonl"
    assert {e["rater"] for e in read_events(path)} == {"r-ben"}  # every reader: absent from now on
    assert len(list(read_events(path, honour_tombstones=False))) == 6  # still in the file, until the drop
    later = dict(events()[0], id="after", time="2099-01-01T00:00:00+00:00")  # she came back: new, not forgotten
    stones = tombstones(folder)
    assert not forgotten(later, stones) and forgotten(events()[0], stones)

    other = InteractionLog(folder, remember_days=0)  # `hominem data forget`, another process's view of the folder
    assert other.drop(lambda e: forgotten(e, stones)) == 3
    other.close()
    assert b"Ana's" not in path.read_bytes()
    assert writer.append([dict(events()[3], id="ben-late", time="2026-11-20T10:00:00+00:00")]) == [True]
    assert [e["id"] for e in read_events(path)] == ["r-ben-a", "r-ben-b", "r-ben-c", "ben-late"]  # not lost
    writer.close()


def test_their_words_are_their_own_sentences_not_what_others_or_the_project_wrote():
    said = "Tell me a joke. My cat Figaro hates Mondays a lot."
    mine = dict(events()[0], messages=[{"role": "user", "content": said}], note="Figaro is my cat, the grey one")
    theirs = dict(events()[3], messages=[{"role": "user", "content": "Tell me a joke please, about cats."}])
    seed = "Tell me a joke please, about cats."  # a sentence of the project's config: nobody's own
    words = their_words([mine, theirs], "r-ana", seed)
    assert words == ["My cat Figaro hates Mondays a lot.", "Figaro is my cat, the grey one"]  # "Tell me a joke." short
    assert their_words([mine, dict(theirs, note="My cat Figaro hates Mondays a lot.")], "r-ana") == [words[1]]


def test_caches_keyed_by_text_lose_the_entries_that_hold_their_words_and_keep_no_trace(tmp_path):
    words = ["My cat Figaro hates Mondays a lot."]
    answers = tmp_path / "facts.json"
    answers.write_text(json.dumps({words[0]: "[]", "What is 2+2, really now?": "[]"}))
    assert _drop_entries(answers, words) == 1 and list(json.loads(answers.read_text())) == ["What is 2+2, really now?"]
    db = tmp_path / "calls.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, answer TEXT)")
        conn.executemany("INSERT INTO calls VALUES (?, ?)", [("a", f"The user said: {words[0]}"), ("b", "fine")])
    conn.close()
    assert _drop_sqlite_rows(db, words) == 1
    assert b"Figaro" not in db.read_bytes()  # vacuumed: no free page keeps it
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT key FROM calls").fetchall() == [("b",)]
    conn.close()


def test_retention_drops_older_days_from_the_log_the_index_and_the_builds_that_copy_it(project):
    import datetime as dt

    import yaml

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.history import HistoryIndex, index_url
    from hominem_pipeline.core.online.log import log_folder
    from hominem_pipeline.core.online.retention import expire
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    overlay = project / "config" / "tiny.yaml"
    overlay.write_text(yaml.safe_dump(yaml.safe_load(overlay.read_text()) | {"privacy": {"retention_days": 2}}))
    cfg = load_config(overlay, root=project)
    folder = log_folder(cfg)
    writer = InteractionLog(folder)
    for day in ("2026-11-18", "2026-11-19", "2026-11-20"):
        writer.append([dict(e, id=f"{day}-{e['id']}", time=f"{day}T09:00:00+00:00") for e in events()])
    with HistoryIndex(index_url(cfg.history.url, cfg.data_dir)) as index:
        index.update(folder)
    store = ArtifactStore(cfg.data_dir)
    for day in ("2026-11-18", "2026-11-20"):
        with store.staging("human_feedback", day) as staged:
            (staged / "pairs.jsonl").write_text(f"Ana's worry on {day}")
            store.publish(staged, "human_feedback", day, "v1", {})
    gone = expire(cfg, today=dt.date(2026, 11, 21), interaction_log=writer)  # keeps the 20th and the 21st
    assert gone.days == ["2026-11-18", "2026-11-19"] and gone.events == 12
    assert gone.versions == ["human_feedback/2026-11-18/v1"] and store.versions("human_feedback", "2026-11-20")
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["2026-11-20.jsonl"]
    assert b"2026-11-19" not in (cfg.data_dir / "history.sqlite").read_bytes()  # re-indexed and vacuumed
    with HistoryIndex(index_url(cfg.history.url, cfg.data_dir)) as index:
        assert index.counts()["turns"] == 4
    assert expire(cfg, today=dt.date(2026, 11, 21)).days == []  # done once
    writer.close()
