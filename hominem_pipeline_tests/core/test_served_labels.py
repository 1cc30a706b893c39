"""The student's served replies become teacher labels: the day after, `teacher_labels` rates them beside
the teacher's own candidates (the same verifier and quarantine), each with its turn id, and the reward
model trains on them."""

import json

import pandas as pd

from hominem_pipeline.core.online.events import Message, Turn, context_digest
from hominem_pipeline.core.online.feedback import served_trajectories

DAY, BEFORE = "2026-11-21", "2026-11-20"


def turn(turn_id, said, reply, *, time, model="hominem", finish="stop"):
    msgs = [Message(role="user", content=said)]
    return Turn(
        id=turn_id,
        time=time,
        rater="local",
        messages=msgs,
        reply=reply,
        model=model,
        adapter=None,
        sampling={"temperature": 0.7, "top_p": 0.9},
        finish_reason=finish,
        completion_tokens=5,
        context=context_digest(msgs),
    ).model_dump(mode="json")


def feedback(kind, fid, time, **fields):
    return {"id": fid, "time": time, "rater": "local", "kind": kind, **fields}


def day_of_talk():
    t = lambda h: f"{BEFORE}T{h:02d}:00:00+00:00"  # noqa: E731
    return [
        turn("a1", "I failed my driving test again.", "That's rough. What happened on the test?", time=t(9)),
        turn("a2", "I failed my driving test again.", "Try harder.", time=t(9)),
        turn("b1", "What is the capital of Australia?", "Canberra.", time=t(10)),
        turn(
            "q1", "Which reply is kinder?", "an imported question's reply", time=t(11), model="question"
        ),  # asked, not served
        turn(
            "w1", "Hello", "written by another model", time=t(12), model="claude"
        ),  # rated elsewhere, not the student's
        turn("c1", "Tell me a story.", "Once", time=t(13), finish="cancelled"),  # the client left
        turn("e1", "Hello", "   ", time=t(14)),  # nothing to rate
        feedback("choice", "ch1", t(15), chosen="a1", rejected="a2", strength="clear"),
    ]


def test_served_replies_are_picked_rated_first_then_newest_and_keep_their_turn():
    events = day_of_talk()
    picked = served_trajectories(events, 10)
    assert sorted(t.trajectory_id for t in picked) == ["turn-a1", "turn-a2", "turn-b1"]
    a1 = next(t for t in picked if t.trajectory_id == "turn-a1")
    assert a1.category == "served" and a1.style == "served:hominem" and a1.prompt == "I failed my driving test again."
    assert {t.prompt_id for t in picked if t.trajectory_id in ("turn-a1", "turn-a2")} == {
        f"served-{events[0]['context']}"
    }
    assert sorted(t.trajectory_id for t in served_trajectories(events, 2)) == [
        "turn-a1",
        "turn-a2",
    ]  # those people rated, before the newer b1
    assert served_trajectories(events, 0) == []


def test_the_next_day_s_labels_rate_the_served_replies_and_the_reward_model_learns_from_them(tiny_cfg):
    from hominem_pipeline.core.builds.human_feedback import log_file
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    path = log_file(tiny_cfg, BEFORE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in day_of_talk()))
    for stage in ("prompts", "teacher_trajectories", "teacher_labels"):
        result = run_stage(STAGES_BY_NAME[stage], tiny_cfg, DAY)
    labels = pd.read_parquet(result.ref.file("labels.parquet"))
    served = labels[labels["turn_id"].notna()]
    assert sorted(served["turn_id"]) == ["a1", "a2", "b1"] and set(served["category"]) == {"served"}
    assert (
        labels[labels["turn_id"].isna()]["trajectory_id"].str.startswith("turn-").sum() == 0
    )  # the teacher's candidates carry none
    assert result.metrics["served_labels"] == 3 and "3 replies served on 2026-11-20 rated" in result.metadata["served"]
    # a new event in that day's log is a new version of the next day's labels; the day's own log is not read
    before = lineage(tiny_cfg).plan("teacher_labels", DAY).version
    log_file(tiny_cfg, DAY).write_text(json.dumps(turn("d1", "Hi", "Hello!", time=f"{DAY}T09:00:00+00:00")) + "\n")
    assert lineage(tiny_cfg).plan("teacher_labels", DAY).version == before
    with open(path, "a") as fh:
        fh.write(json.dumps(feedback("thumb", "th1", f"{BEFORE}T16:00:00+00:00", turn="b1", value="up")) + "\n")
        fh.write(
            json.dumps(
                feedback("nudge", "nu1", f"{BEFORE}T16:00:00+00:00", turn="a2", dimension="empathy", direction="more")
            )
            + "\n"
        )
    assert lineage(tiny_cfg).plan("teacher_labels", DAY).version != before
    # the reward model trains on the day's labels, the served rows among them, and on the day before's
    # nudge as a pair about empathy alone (a1 has more of it than the nudged a2)
    result = run_stage(STAGES_BY_NAME["teacher_labels"], tiny_cfg, DAY)
    run_stage(STAGES_BY_NAME["human_feedback"], tiny_cfg, BEFORE)
    rm = run_stage(STAGES_BY_NAME["reward_model"], tiny_cfg, DAY)
    assert rm.metadata["rows"] == result.metrics["labels"] and result.metrics["served_labels"] == 3
    assert (
        BEFORE in rm.metadata["feedback_partitions"]
        and rm.metrics["nudge_pairs"] == 1
        and rm.metrics["feedback_pairs"] == 1
    )  # and the choice
    assert json.loads((rm.ref.path / "METADATA.json").read_text())["dimension_only_pairs"] == 1


def test_people_s_choices_between_served_replies_are_told_apart_from_asked_questions(tmp_path):
    """The prediction log's page pairs say whose replies they were, so agreement on the student's own
    replies is reported beside the judge's candidates (predictions and attunement: served_agreement)."""
    from hominem_pipeline.core.attune.predictions import page_pairs, served_choices
    from hominem_pipeline.core.online.feedback import feedback_tables

    t = f"{BEFORE}T17:00:00+00:00"
    events = day_of_talk() + [
        turn("q2", "Which reply is kinder?", "another imported reply", time=t, model="question"),
        feedback("choice", "ch2", t, chosen="q1", rejected="q2", strength="slight"),
    ]
    tables = feedback_tables(events)
    pairs = page_pairs(tables.pairs, tables.conversations, tmp_path)
    assert dict(zip(pairs["pair_id"].str.split("-").str[-1], pairs["category"])) == {"ch1": "served", "ch2": "asked"}
    pred = pairs.assign(source="page")
    assert list(served_choices(pred)["chosen_turn"]) == ["a1"]


def test_served_turns_are_redacted_before_a_teacher_away_from_this_machine_reads_them(tiny_cfg, project):
    from hominem_pipeline.core.builds.human_feedback import log_file
    from hominem_pipeline.core.builds.teacher_labels import served_replies, teacher_leaves_machine
    from hominem_pipeline.core.config.loader import load_config

    said = "Write to me at jo@example.com or call +1 555 123 4567."
    path = log_file(tiny_cfg, BEFORE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(turn("p1", said, "I will, jo@example.com.", time=f"{BEFORE}T09:00:00+00:00")) + "\n")

    def rated(**teacher):
        overrides = {"teacher": teacher, "labeling": {"served_turns": 4}}
        cfg = load_config(project / "config" / "tiny.yaml", root=project, overrides=overrides) if teacher else tiny_cfg
        return cfg, served_replies(cfg, DAY)

    local, [kept] = rated()
    assert not teacher_leaves_machine(local) and kept.prompt == said  # the local judge reads it as logged
    lan, _ = rated(provider="openai_compatible", api={"base_url": "http://127.0.0.1:1234/v1", "model": "m"})
    assert not teacher_leaves_machine(lan)
    hosted, [sent] = rated(provider="openai", api={"model": "gpt-4o-mini"})
    assert teacher_leaves_machine(hosted)
    assert (
        "jo@example.com" not in sent.prompt + sent.response and "[email]" in sent.prompt and "[phone]" in sent.prompt
    )
