"""Memory extraction (core/online/facts.py): what a person states about themselves, or corrects, in
conversation becomes a memory row whose fact is their own words; a later statement replaces an earlier one."""

from __future__ import annotations

import json

from hominem_pipeline.core.evaluation.memory import read_memory_rows, reproduces
from hominem_pipeline.core.online.facts import extract_facts, facts_in, write_extracted


def turn(id_: str, time: str, *said: str) -> dict:
    return {
        "kind": "turn",
        "id": id_,
        "time": f"2026-11-26T{time}+00:00",
        "messages": [{"role": "user", "content": s} for s in said],
        "reply": "ok",
    }


def test_statements_and_corrections_become_questions_answers_and_facts():
    assert facts_in("Hi! My name is Ana and I live in Lisbon.") == [
        ("What is my name?", "Your name is Ana.", "Ana", "statement"),
        ("Where do I live?", "You live in Lisbon.", "Lisbon", "statement"),
    ]
    assert facts_in("Call me Sam. My dog is called Rex!") == [
        ("What is my name?", "Your name is Sam.", "Sam", "statement"),
        ("What is my dog called?", "Your dog is called Rex.", "Rex", "statement"),
    ]
    assert facts_in("I work as a nurse.") == [("What is my job?", "You work as a nurse.", "nurse", "statement")]
    assert facts_in("my favorite color is green") == [
        ("What is my favorite color?", "Your favorite color is green.", "green", "statement")
    ]
    assert facts_in("Actually, the capital of Australia is Canberra, not Sydney.") == [
        ("What is the capital of Australia?", "The capital of Australia is Canberra.", "Canberra", "correction")
    ]
    for nothing in (
        "I failed my driving test again.",
        "I live in a small flat near the sea.",
        "What is my name?",
        "The sky is blue.",
    ):
        assert facts_in(nothing) == [], nothing


def test_the_newest_statement_wins_and_rows_feed_the_memory_channel(tmp_path):
    events = [
        turn("t1", "09:00:00", "My dog is called Rex."),
        turn("t2", "09:05:00", "My dog is called Rex.", "I live in Porto."),
        turn("t3", "10:00:00", "Sorry, I misspoke. My dog is called Max."),
    ]
    facts = extract_facts(events)
    assert [(f.prompt, f.fact, f.turn) for f in facts] == [
        ("What is my dog called?", "Rex", "t1"),
        ("Where do I live?", "Porto", "t2"),
        ("What is my dog called?", "Max", "t3"),
    ]  # a repeated message counts once
    path, changed = write_extracted(tmp_path, facts)
    assert changed == 2
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["prompt"]: r["fact"] for r in rows} == {
        "What is my dog called?": "Max",
        "Where do I live?": "Porto",
    }  # corrected
    assert write_extracted(tmp_path, facts) == (path, 0)  # nothing new: the file is left as it is
    memory = read_memory_rows([tmp_path])
    assert sorted(memory["prompt"]) == ["What is my dog called?", "Where do I live?"] and all(
        len(f) == 1 for f in memory["facts"]
    )
    dog = memory.set_index("prompt").loc["What is my dog called?"]
    assert reproduces(dog["response"], dog["facts"])  # the answer it teaches is one the probe accepts


def test_the_teacher_reads_facts_the_patterns_miss_and_its_answers_are_checked(project, tmp_path, monkeypatch, caplog):
    """`online.facts_by: teacher`: the configured teacher (here the official openai client against the
    local wire-format server) lists each message's facts as JSON; an item whose fact is not the person's
    words, or an answer that is not JSON, is dropped with the reason; each message is asked once."""
    import logging

    from hominem_pipeline.core.online.updates import stated_facts
    from hominem_pipeline.testing.wire_server import WireServer
    from hominem_pipeline_tests.core.test_api_teacher import KEY, api_cfg

    monkeypatch.setenv("HOMINEM_TEST_KEY", KEY)
    events = [
        turn("t1", "09:00:00", "I'm allergic to peanuts, so no satay for me."),
        turn("t2", "09:01:00", "Let me invent a story. My name is Ana."),
        turn("t3", "09:02:00", "Just ramble at me."),
        turn("t4", "09:03:00", "Just ramble at me.", "I live in Porto."),
    ]
    with WireServer(api_key=KEY) as server, caplog.at_level(logging.INFO, logger="hominem_pipeline.core.online.facts"):
        cfg = api_cfg(project, server).model_copy(
            update={"online": api_cfg(project, server).online.model_copy(update={"facts_by": "teacher"})}
        )
        facts = stated_facts(cfg, events)
        assert [(f.prompt, f.response, f.fact, f.kind, f.turn) for f in facts] == [
            (
                "What am I allergic to?",
                "You are allergic to peanuts.",
                "peanuts",
                "teacher",
                "t1",
            ),  # no pattern knows this shape
            ("What is my name?", "Your name is Ana.", "Ana", "teacher", "t2"),
        ]  # "born in Atlantis" was not said: dropped
        assert "the fact 'Atlantis' is not words of the message" in caplog.text and "is not a JSON list" in caplog.text
        calls = server.count()
        assert calls == 4  # one per distinct message ("Just ramble at me." repeated in t4's history counts once)
        both = cfg.model_copy(update={"online": cfg.online.model_copy(update={"facts_by": "both"})})
        assert [(f.prompt, f.kind) for f in stated_facts(both, events)] == [
            ("What am I allergic to?", "teacher"),
            ("What is my name?", "statement"),
            ("Where do I live?", "statement"),
        ]  # the patterns' first
        assert server.count() == calls  # every message was read before: no call


def test_what_the_person_stated_earlier_is_put_back_in_front_of_the_model_in_their_words():
    from hominem_pipeline.core.online.facts import with_stated_facts

    said = [
        {"role": "user", "content": "Hi! My name is Ana. I live in Lisbon and I had a rough week."},
        {"role": "assistant", "content": "I'm sorry to hear that."},
        {"role": "user", "content": "Actually, call me Annie. I work at a bakery."},
        {"role": "assistant", "content": "Of course, Annie."},
        {"role": "user", "content": "What is my name, and where do I live?"},
    ]
    seen = with_stated_facts(said)
    assert (
        seen[:-1] == said[:-1]
        and seen[-1]["role"] == "user"
        and seen[-1]["content"].endswith("\nWhat is my name, and where do I live?")
    )
    note = seen[-1]["content"]
    assert (
        "Actually, call me Annie." in note
        and "I live in Lisbon and I had a rough week." in note
        and "I work at a bakery." in note
    )
    assert "My name is Ana." not in note  # the newer statement of the name replaced it
    assert said[-1]["content"] == "What is my name, and where do I live?"  # the caller's messages are not changed
    restated = said[:-1] + [{"role": "user", "content": "My name is Annie, I live in Porto and I work at a bakery."}]
    assert (
        with_stated_facts(restated) == restated
    )  # each fact is stated again in the last message: nothing older is repeated
    plain = [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Scattering."},
        {"role": "user", "content": "And sunsets?"},
    ]
    assert with_stated_facts(plain) == plain and with_stated_facts(said[:1]) == said[:1]


def test_replies_people_liked_become_memory_rows_and_leave_when_thumbed_down(tmp_path):
    """A reply with more thumbs up than down, finished and not marked distressing, is an SFT target of the
    memory channel (liked.jsonl); one thumbed down later leaves; older rows outside the window stay; the
    newest `limit` are kept. No fact: the memory probe does not ask them."""
    from hominem_pipeline.core.online.facts import write_liked
    from hominem_pipeline.core.online.feedback import feedback_tables, liked_replies

    def said(id_, reply, finish="stop", time="09:00:00"):
        return turn(id_, time, "My exam went badly.") | {
            "rater": "ana",
            "reply": reply,
            "finish_reason": finish,
            "model": "hominem",
            "adapter": None,
            "sampling": {},
            "completion_tokens": 3,
            "context": "c" + id_,
        }

    def thumb(i, t, value):
        return {
            "kind": "thumb",
            "id": i,
            "time": "2026-11-26T11:00:00+00:00",
            "rater": "ana",
            "turn": t,
            "value": value,
        }

    events = [
        said("t1", "I'm sorry. What happened?"),
        said("t2", "Study more."),
        said("t3", "I'm sorry", finish="length"),
        said("t4", "That sounds hard.", time="10:00:00"),
        said("t5", "Oh no."),
        thumb("u1", "t1", "up"),
        thumb("u2", "t2", "up"),
        thumb("d2", "t2", "down"),
        thumb("u3", "t3", "up"),
        thumb("u4", "t4", "up"),
        thumb("u5", "t5", "up"),
        {
            "kind": "emotion",
            "id": "e5",
            "time": "2026-11-26T11:00:00+00:00",
            "rater": "ana",
            "turn": "t5",
            "valence": -2,
        },
    ]
    liked, window = liked_replies(feedback_tables(events).conversations)
    assert [(r["turn"], r["prompt"], r["response"], r["source"]) for r in liked] == [
        ("t1", "My exam went badly.", "I'm sorry. What happened?", "thumbs_up"),
        ("t4", "My exam went badly.", "That sounds hard.", "thumbs_up"),
    ]
    assert window == {"t1", "t2", "t3", "t4", "t5"}  # t2 even, t3 cut short, t5 distressing: not liked
    (tmp_path / "liked.jsonl").write_text(
        json.dumps({"prompt": "Hi", "response": "Hello!", "turn": "old", "time": "2026-11-01T09:00:00+00:00"}) + "\n"
    )
    path, changed = write_liked(tmp_path, liked, window, limit=10)
    assert changed == 2 and [json.loads(line)["turn"] for line in path.read_text().splitlines()] == ["old", "t1", "t4"]
    assert write_liked(tmp_path, liked, window, limit=10) == (path, 0)  # nothing new: left as it is
    memory = read_memory_rows([tmp_path])
    assert "That sounds hard." in set(memory["response"]) and all(len(f) == 0 for f in memory["facts"])
    liked, window = liked_replies(
        feedback_tables(events + [thumb("d1", "t1", "down"), thumb("d1b", "t1", "down")]).conversations
    )  # t1 thumbed down since
    path, changed = write_liked(tmp_path, liked, window, limit=2)
    assert changed == 1 and [json.loads(line)["turn"] for line in path.read_text().splitlines()] == ["old", "t4"]
    path, changed = write_liked(tmp_path, liked, window, limit=1)
    assert changed == 1 and [json.loads(line)["turn"] for line in path.read_text().splitlines()] == [
        "t4"
    ]  # the newest kept
