import json

import pytest

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.online.feedback import feedback_tables
from hominem_pipeline.core.online.history import HistoryIndex, index_url
from hominem_pipeline.core.online.log import InteractionLog
from hominem_pipeline.core.pipeline.retrain import DataCounts, count_given, read_state, retrain_tick, should_retrain
from hominem_pipeline_tests.conftest import REPO
from hominem_pipeline_tests.core.test_history import DAY, feedback, turn

CFG = load_config(root=REPO).retrain


@pytest.mark.parametrize(
    "conversations, pairs, expected",
    [
        (500, 0, True),  # memory channel full
        (0, 200, True),  # reward channel full
        (250, 100, True),  # both at 50%
        (499, 99, False),
        (249, 199, False),
        (0, 0, False),
    ],
)
def test_thresholds_follow_the_design(conversations, pairs, expected):
    assert should_retrain(DataCounts(conversations, pairs), CFG).retrain is expected


def test_counts_since_the_last_retrain_never_go_negative():
    assert DataCounts(600, 50, {"choice": 50}).since(DataCounts(100, 80, {"choice": 80})) == DataCounts(
        500, 0, {"choice": 0}
    )


def varied_day() -> list[dict]:
    """A day with every kind of feedback and the cases human_feedback treats specially."""
    texts = (
        ["I failed my exam."] * 2
        + ["My mother never calls."] * 2
        + ["My boss shouts."] * 3
        + ["I lost my dog."] * 2
        + ["I am alone."]
    )
    turns = [turn(i, text) for i, text in enumerate(texts)]  # replies to one message share its context
    turns += [
        {k: v for k, v in turn(i, "Hello?").items() if k != "session"} for i in (10, 11)
    ]  # no session: one conversation, the message's
    return turns + [
        feedback("choice", 0, chosen="t1", rejected="t0", strength="clear"),
        feedback(
            "choice", 1, chosen="t0", rejected="t1", strength="strong", repeat_of="choice0"
        ),  # asked again, answered the other way
        feedback("choice", 2, chosen="t2", rejected="t3", strength="slight"),
        feedback(
            "choice", 3, chosen="t2", rejected="t3", strength="strong", repeat_of="choice2"
        ),  # asked again, the same way: one pair
        feedback("thumb", 0, turn="t2", value="up"),
        feedback("thumb", 1, turn="t3", value="down"),  # already chosen between: no second pair
        feedback("thumb", 2, turn="t4", value="up"),
        feedback("thumb", 3, turn="t5", value="down"),
        feedback("thumb", 4, turn="t6", value="down"),
        feedback("thumb", 5, turn="t6", value="up"),
        feedback("thumb", 6, turn="t6", value="up"),  # t6 ends net up: t4-t5 and t6-t5
        feedback("emotion", 0, turn="t7", valence=-2, tags=["high_arousal"]),
        feedback("emotion", 1, turn="t8", valence=1, tags=[]),
        feedback("emotion", 2, turn="t4", valence=1, tags=[]),
        feedback("emotion", 3, turn="t5", valence=-1, tags=[]),  # thumbs order them already
        feedback("nudge", 0, turn="t7", dimension="empathy", direction="more"),
        feedback("nudge", 1, turn="t4", dimension="curiosity", direction="less"),
        feedback("nudge", 2, turn="t5", dimension="curiosity", direction="less"),
        feedback("nudge", 3, turn="t9", dimension="empathy", direction="more"),  # no sibling: no pair
    ]


def test_the_tally_counts_by_the_rules_human_feedback_trains_by(tmp_path):
    events = varied_day()
    log = InteractionLog(tmp_path / "log")
    log.append(events)
    log.append([events[-5]])  # a client's retry of the same event: written once
    with HistoryIndex(index_url(None, tmp_path)) as index:
        index.update(tmp_path / "log")
        given = index.given()
    stats = feedback_tables(list(log.read(DAY))).stats
    assert (
        given.choice + given.thumbs + given.emotion == stats["pairs"] == 4
    )  # t2>t3, t4>t5, t6>t5, t8>t7, and nothing for t0/t1
    assert (given.choice, given.thumbs, given.emotion) == (1, 2, 1)
    assert given.nudge == stats["nudge_pairs"] == 3  # t7 with t8; t4 and t5 (both less) each with t6
    assert given.conversations == stats["conversations"] == 6


def test_a_thumb_that_turns_a_pair_around_and_a_flipped_repeat_change_the_count_at_once(tmp_path):
    folder = tmp_path / "log"
    log = InteractionLog(folder)
    log.append([turn(0, "hi"), turn(1, "hi"), feedback("choice", 0, chosen="t1", rejected="t0", strength="clear")])
    with HistoryIndex(index_url(None, tmp_path)) as index:
        index.update(folder)
        assert index.given().choice == 1
        log.append([feedback("choice", 1, chosen="t0", rejected="t1", strength="clear", repeat_of="choice0")])
        index.update(folder)
        assert index.given().choice == 0  # answered both ways: the rater could not tell
        log.append(
            [turn(2, "hi"), feedback("thumb", 0, turn="t2", value="up"), feedback("thumb", 1, turn="t0", value="down")]
        )
        index.update(folder)
        assert index.given().thumbs == 1
        log.append([feedback("thumb", 2, turn="t0", value="up"), feedback("thumb", 3, turn="t0", value="up")])
        index.update(folder)
        assert index.given().thumbs == 0  # t0 is net up now, as t2 is: no pair


def write_choices_by_hand(folder, day: str, n: int) -> None:
    """`n` distinct choices in the log's documented format, written with nothing of the project's (as another tool
    would)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{day}.jsonl", "a") as f:
        for i in range(n):
            messages = [{"role": "user", "content": f"question {i}"}]
            import hashlib

            context = hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[
                :16
            ]
            for side in "ab":
                f.write(
                    json.dumps(
                        {
                            "kind": "turn",
                            "id": f"t{i}{side}",
                            "time": f"{day}T09:00:00+00:00",
                            "rater": "local",
                            "session": f"s{i}",
                            "messages": messages,
                            "reply": f"reply {side}",
                            "model": "hominem",
                            "adapter": None,
                            "sampling": {},
                            "finish_reason": "stop",
                            "completion_tokens": 2,
                            "context": context,
                        }
                    )
                    + "\n"
                )
            f.write(
                json.dumps(
                    {
                        "kind": "choice",
                        "id": f"c{i}",
                        "time": f"{day}T09:01:00+00:00",
                        "rater": "local",
                        "chosen": f"t{i}a",
                        "rejected": f"t{i}b",
                        "strength": "clear",
                    }
                )
                + "\n"
            )


def test_choices_written_outside_the_project_make_one_tick_request_a_run(tiny_cfg):
    from hominem_pipeline.testing.artifacts import publish_expected

    folder = tiny_cfg.data_dir / tiny_cfg.serving.log_dir / "log"
    publish_expected(tiny_cfg, "teacher_labels", DAY, 10)
    write_choices_by_hand(folder, DAY, 150)
    tick = retrain_tick(None, tiny_cfg)
    assert tick.request is None and tick.reason == "not yet: 150/500 conversations, 150/200 preference pairs"
    write_choices_by_hand(folder, DAY, 0)
    with open(folder / f"{DAY}.jsonl", "a") as f:  # the same choices again (a client's retry): nothing new
        f.write(
            json.dumps(
                {
                    "kind": "choice",
                    "id": "c1",
                    "time": f"{DAY}T09:01:00+00:00",
                    "rater": "local",
                    "chosen": "t1a",
                    "rejected": "t1b",
                    "strength": "clear",
                }
            )
            + "\n"
        )
    assert retrain_tick(tick.cursor, tiny_cfg).request is None
    import shutil

    shutil.rmtree(folder)
    write_choices_by_hand(folder, DAY, 220)
    index = tiny_cfg.data_dir / "history.sqlite"
    index.unlink()  # the log was written again from the start: index it again
    tick = retrain_tick(tick.cursor, tiny_cfg)
    assert tick.request is not None and tick.reason == "reward channel: 220 new preference pairs >= 200"
    assert (tick.request.job, tick.request.partition) == (
        "retrain",
        DAY,
    )  # the day's labels are built: the retrain job
    assert (
        tick.request.tags["hominem/new_choice"] == "220" and tick.request.tags["hominem/trigger"] == "data_threshold"
    )
    assert json.loads(tick.cursor)["preference_pairs"] == 220
    state = read_state(tiny_cfg.data_dir)
    assert (
        state["last_request"]["run_key"] == tick.request.run_key
        and state["since_last_retrain"]["preference_pairs"] == 220
    )
    again = retrain_tick(tick.cursor, tiny_cfg)
    assert again.request is None and again.reason.startswith("not yet: 0/500 conversations, 0/200")
    assert (
        read_state(tiny_cfg.data_dir)["last_request"]["run_key"] == tick.request.run_key
    )  # kept for `hominem live status`


def test_feedback_on_a_day_without_labels_asks_for_the_whole_chain(tiny_cfg):
    from hominem_pipeline.testing.artifacts import publish_expected

    publish_expected(tiny_cfg, "teacher_labels", "2026-11-19", 10)
    write_choices_by_hand(tiny_cfg.data_dir / tiny_cfg.serving.log_dir / "log", DAY, 200)
    request = retrain_tick(None, tiny_cfg).request
    assert (request.job, request.partition) == ("daily", DAY)  # the feedback's own day, its labels first
    assert count_given(tiny_cfg).parts == {"choice": 200, "thumbs": 0, "emotion": 0, "nudge": 0, "imported": 0}


def test_live_status_and_the_dashboard_show_the_sensors_last_tick(tiny_cfg):
    from hominem_pipeline.core.dashboard.views import DashboardData
    from hominem_pipeline.core.pipeline.retrain import describe_state, record_run
    from hominem_pipeline.testing.artifacts import publish_expected

    assert describe_state(read_state(tiny_cfg.data_dir))[0].startswith("retrain sensor: no tick yet")
    publish_expected(tiny_cfg, "teacher_labels", DAY, 10)
    write_choices_by_hand(tiny_cfg.data_dir / tiny_cfg.serving.log_dir / "log", DAY, 210)
    tick = retrain_tick(None, tiny_cfg, now="2026-11-20T10:00:00+00:00")
    record_run(tiny_cfg, {"run_id": "0123456789abcdef", "job": "hominem_retrain", "status": "SUCCESS", "ended": True})
    lines = describe_state(read_state(tiny_cfg.data_dir))
    assert (
        lines[0]
        == "retrain sensor: last tick 2026-11-20T10:00:00+00:00: reward channel: 210 new preference pairs >= 200"
    )
    assert lines[1] == "  since the last retrain: 210/500 conversations, 210/200 preference pairs (choice 210)"
    assert lines[2] == (
        f"  last retrain: 2026-11-20T10:00:00+00:00, retrain job for {DAY} (reward channel: 210 new "
        "preference pairs >= 200): "
        "run 01234567 success"
    )
    retrain_tick(tick.cursor, tiny_cfg, now="2026-11-20T10:05:00+00:00")
    shown = DashboardData(tiny_cfg.data_dir).health()["retrain"]
    assert shown["time"] == "2026-11-20T10:05:00+00:00" and shown["since_last_retrain"]["preference_pairs"] == 0
    assert (
        shown["last_request"]["run_key"] == tick.request.run_key and shown["last_run"]["status"] == "SUCCESS"
    )  # the run it started, kept
