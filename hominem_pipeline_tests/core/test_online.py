"""The interaction log, its events and the ledger: durable, de-duplicated, tolerant of a torn line."""

import json
import logging
import random

import pytest

from hominem_pipeline.core.online.events import FEEDBACK, Message, Turn, context_digest, redact
from hominem_pipeline.core.online.ledger import FeedbackError, Ledger
from hominem_pipeline.core.online.log import InteractionLog

T0 = "2026-11-25T10:00:00+00:00"


def event(i, day="2026-11-25", **extra):
    return {
        "id": f"e{i}",
        "time": f"{day}T10:00:{i % 60:02d}+00:00",
        "kind": "thumb",
        "rater": "local",
        "turn": "t",
        "value": "up",
        **extra,
    }


def test_events_go_to_their_utc_day_once_each_and_survive_reopening(tmp_path):
    log = InteractionLog(tmp_path)
    assert log.append([event(1), event(2), event(3, day="2026-11-26")]) == [True, True, True]
    assert log.append([event(2), event(4)]) == [False, True]  # a retried id writes nothing
    log.close()
    again = InteractionLog(tmp_path)
    assert again.days() == ["2026-11-25", "2026-11-26"]
    assert [e["id"] for e in again.read("2026-11-25")] == ["e1", "e2", "e4"]
    assert again.append([event(1), event(3, day="2026-11-26")]) == [False, False]  # known after a restart too
    assert "e4" in again and "e9" not in again


def test_a_torn_last_line_is_cut_with_a_warning_and_the_next_event_starts_clean(tmp_path, caplog):
    log = InteractionLog(tmp_path)
    log.append([event(1)])
    log.close()
    path = tmp_path / "2026-11-25.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"id": "e2", "time": "2026-11-25T10')  # killed mid-write: never acknowledged
    with caplog.at_level(logging.WARNING):
        assert [e["id"] for e in InteractionLog(tmp_path).read("2026-11-25")] == ["e1"]
    assert "torn last line" in caplog.text
    reopened = InteractionLog(tmp_path)
    assert reopened.append([event(2)]) == [True]  # the torn e2 was never written, so it may be now
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["e1", "e2"]


def test_a_bad_line_in_the_middle_is_skipped_with_its_line_number(tmp_path, caplog):
    path = tmp_path / "2026-11-25.jsonl"
    path.write_text(json.dumps(event(1)) + "\nnot json at all\n" + json.dumps(event(2)) + "\n")
    with caplog.at_level(logging.WARNING):
        assert [e["id"] for e in InteractionLog(tmp_path).read("2026-11-25")] == ["e1", "e2"]
    assert "line 2: not a JSON event" in caplog.text


def test_redaction_keeps_dates_times_and_amounts():
    text = (
        "Mail jo.smith+x@example.co.uk or call +44 20 7946 0958 / (555) 123-4567 on 2026-11-25 at 10:30; "
        "card 4111 1111 1111 1111, host 192.168.1.20, paid 1,250.00"
    )
    assert (
        redact(text)
        == "Mail [email] or call [phone] / [phone] on 2026-11-25 at 10:30; card [card], host [ip], paid 1,250.00"
    )


def turn(turn_id, messages, reply="a reply", rater="local"):
    msgs = [Message(**m) for m in messages]
    return Turn(
        id=turn_id,
        time=T0,
        rater=rater,
        messages=msgs,
        reply=reply,
        model="hominem",
        adapter=None,
        sampling={},
        finish_reason="stop",
        completion_tokens=3,
        context=context_digest(msgs),
    )


def choice(cid, chosen, rejected, rater="local", **extra):
    return FEEDBACK.validate_python(
        {
            "id": cid,
            "time": T0,
            "rater": rater,
            "kind": "choice",
            "chosen": chosen,
            "rejected": rejected,
            "strength": "clear",
            **extra,
        }
    )


def test_the_ledger_accepts_only_choices_between_replies_to_one_conversation():
    ledger = Ledger(["empathy"])
    hello, other = [{"role": "user", "content": "hello"}], [{"role": "user", "content": "something else"}]
    for t in (turn("a", hello), turn("b", hello), turn("c", other)):
        ledger.add(t)
    ledger.check(choice("x", "a", "b"))
    for bad, field, words in [
        (choice("x", "a", "c"), "rejected", "different conversations"),
        (choice("x", "a", "a"), "rejected", "same turn"),
        (choice("x", "a", "zz"), "rejected", "not a turn"),
    ]:
        with pytest.raises(FeedbackError, match=words) as info:
            ledger.check(bad)
        assert info.value.field == field
    nudge = FEEDBACK.validate_python(
        {
            "id": "n",
            "time": T0,
            "rater": "local",
            "kind": "nudge",
            "turn": "a",
            "dimension": "humour",
            "direction": "more",
        }
    )
    with pytest.raises(FeedbackError, match="'humour' is not configured; use one of: empathy"):
        ledger.check(nudge)


def test_repeats_ask_a_raters_own_choice_again_swapped_and_measure_consistency():
    ledger = Ledger(["empathy"])
    hello = [{"role": "user", "content": "hello"}]
    for t in (turn("a", hello, "kind"), turn("b", hello, "curt"), turn("c", hello, "odd"), turn("d", hello, "fine")):
        ledger.add(t)
    ledger.add(choice("c1", "a", "b"))
    ledger.add(choice("c2", "c", "d"))
    ledger.add(choice("other", "a", "b", rater="r-someone"))
    rng = random.Random(0)
    assert ledger.repeat_for("local", 0.0, rng) is None
    first = ledger.repeat_for("local", 1.0, rng)
    earlier = ledger.choices[first["repeat_of"]]
    assert earlier.rater == "local" and (first["a"]["turn"], first["b"]["turn"]) == (
        earlier.rejected,
        earlier.chosen,
    )  # swapped
    with pytest.raises(FeedbackError, match="another rater's"):
        ledger.check(choice("r0", "a", "b", repeat_of="other"))
    ledger.add(choice("r1", earlier.chosen, earlier.rejected, repeat_of=earlier.id))  # the same answer
    second = ledger.repeat_for("local", 1.0, rng)
    assert second["repeat_of"] != earlier.id  # each choice is asked again once
    again = ledger.choices[second["repeat_of"]]
    ledger.add(choice("r2", again.rejected, again.chosen, repeat_of=again.id))  # changed their mind
    assert ledger.repeat_for("local", 1.0, rng) is None
    assert ledger.consistency()["local"] == {"choices": 2, "repeats": 2, "consistent": 1, "consistency": 0.5}
    assert ledger.consistency()["r-someone"]["consistency"] is None
    assert [c.id for c in ledger.choices_by("local")] == ["c1", "c2", "r1", "r2"]
    ledger.forget("local")
    assert ledger.choices_by("local") == [] and [c.id for c in ledger.choices_by("r-someone")] == ["other"]


def test_a_days_feedback_becomes_weighted_pairs_and_conversations():
    from hominem_pipeline.core.online.feedback import feedback_tables

    hello, bye, third = ([{"role": "user", "content": text}] for text in ("hello", "bye", "third"))
    two_turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello!"},
        {"role": "user", "content": "how are you?"},
    ]
    turns = [
        turn("a", hello, "warm"),
        turn("b", hello, "cold"),
        turn("c", bye, "x"),
        turn("d", bye, "y"),
        turn("e", third, "up"),
        turn("f", third, "down"),
        turn("g", two_turns, "fine, you?"),
        turn("h", two_turns, "no"),
    ]
    feedback = [
        {"kind": "choice", "id": "c1", "chosen": "a", "rejected": "b", "strength": "clear", "note": "warmer"},
        {
            "kind": "choice",
            "id": "c1r",
            "chosen": "a",
            "rejected": "b",
            "strength": "strong",
            "repeat_of": "c1",
        },  # same answer, stronger
        {"kind": "choice", "id": "c2", "chosen": "c", "rejected": "d", "strength": "slight"},
        {
            "kind": "choice",
            "id": "c2r",
            "chosen": "d",
            "rejected": "c",
            "strength": "slight",
            "repeat_of": "c2",
        },  # flipped: both dropped
        {"kind": "thumb", "id": "t1", "turn": "e", "value": "up"},
        {"kind": "thumb", "id": "t2", "turn": "f", "value": "down"},
        {"kind": "choice", "id": "c3", "chosen": "g", "rejected": "h", "strength": "slight"},
        {"kind": "nudge", "id": "n1", "turn": "b", "dimension": "empathy", "direction": "more"},
        {"kind": "emotion", "id": "m1", "turn": "a", "valence": 2, "tags": ["high_social_broadcast"]},
        {"kind": "thumb", "id": "t3", "turn": "never-logged", "value": "up"},
    ]
    events = (
        [t.model_dump(mode="json") for t in turns]
        + [f | {"time": T0, "rater": "local"} for f in feedback]
        + [{"kind": "from-the-future", "id": "z"}]
    )
    tables = feedback_tables(events, "2026-11-25.jsonl")
    pairs = tables.pairs.set_index("pair_id")
    assert sorted(pairs.index) == ["c1", "c3", "thumbs-e-f"]
    assert (
        pairs.loc["c1", "chosen"],
        pairs.loc["c1", "rejected"],
        pairs.loc["c1", "weight"],
        pairs.loc["c1", "note"],
    ) == ("warm", "cold", 1.5, "warmer")
    assert (
        pairs.loc["thumbs-e-f", "chosen"],
        pairs.loc["thumbs-e-f", "weight"],
        pairs.loc["thumbs-e-f", "source"],
    ) == ("up", 0.5, "feedback:thumbs")
    assert pairs.loc["c1", "prompt"] == "hello"
    assert (
        pairs.loc["c3", "prompt"] == "\n\nHuman: hi\n\nAssistant: hello!\n\nHuman: how are you?\n\nAssistant:"
    )  # as HH-RLHF writes it
    assert pairs.loc["c3", "prompt_id"] == turns[6].context
    stats = tables.stats
    assert (stats["turns"], stats["repeats_consistent"], stats["repeats_inconsistent"], stats["events_skipped"]) == (
        8,
        1,
        1,
        1,
    )
    convo = tables.conversations.set_index("turn")
    assert (
        list(convo.loc["b", "nudges"]) == ["more empathy"]
        and convo.loc["a", "valence"] == 2
        and convo.loc["a", "chosen"] == 2
    )
    assert (convo.loc["e", "thumbs_up"], convo.loc["f", "thumbs_down"]) == (1, 1)
