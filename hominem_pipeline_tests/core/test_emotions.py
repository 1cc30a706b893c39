"""Emotion labels as training signal: the emotion vector of each reply, pairs between two reactions to one
conversation weighted by how far apart they were, and distress as a low safety score."""

import numpy as np
import pytest

from hominem_pipeline.core.online.events import Message, Turn, context_digest
from hominem_pipeline.core.online.feedback import emotion_vector, feedback_tables
from hominem_pipeline.core.online.replay import feedback_pair_items

T = "2026-11-27T10:00:00+00:00"


def turn(tid, said, reply):
    msgs = [Message(role="user", content=said)]
    return Turn(
        id=tid,
        time=T,
        rater="ana",
        messages=msgs,
        reply=reply,
        model="hominem",
        adapter=None,
        sampling={},
        finish_reason="stop",
        completion_tokens=4,
        context=context_digest(msgs),
    ).model_dump(mode="json")


def emotion(eid, tid, valence, *tags):
    return {
        "id": eid,
        "time": T,
        "rater": "ana",
        "kind": "emotion",
        "turn": tid,
        "valence": valence,
        "tags": list(tags),
    }


def test_two_reactions_to_one_conversation_become_a_pair_weighted_by_their_gap():
    events = [
        turn("a", "My cat died.", "I'm so sorry. Do you want to tell me about her?"),
        turn("b", "My cat died.", "Get a new one."),
        turn("c", "Hi", "Hello!"),
        turn("d", "Hi", "Hey."),
        emotion("e1", "a", 1),
        emotion("e2", "b", -2),
        emotion("e3", "c", 1),
        emotion("e4", "d", 1),
    ]
    tables = feedback_tables(events)
    pairs = tables.pairs
    assert list(pairs["source"]) == ["feedback:emotion"] and (
        pairs["chosen_turn"].iloc[0],
        pairs["rejected_turn"].iloc[0],
    ) == ("a", "b")
    assert (
        pairs["weight"].iloc[0] == pytest.approx(0.75) and tables.stats["emotion_pairs"] == 1
    )  # three steps of valence; c and d alike: none
    aroused = feedback_tables(events[:2] + [emotion("e1", "a", 2), emotion("e2", "b", -2, "high_arousal")]).pairs
    assert aroused["weight"].iloc[0] == pytest.approx(1.5)  # 4 steps, a strong reaction: capped at a strong choice
    chosen = (
        events[:2]
        + [
            {
                "id": "ch",
                "time": T,
                "rater": "ana",
                "kind": "choice",
                "chosen": "a",
                "rejected": "b",
                "strength": "clear",
            }
        ]
        + events[4:6]
    )
    assert list(feedback_tables(chosen).pairs["source"]) == ["feedback:choice"]  # a choice already compares them


def test_distress_lowers_the_safety_of_the_reply_people_reacted_to():
    """A reply the person chose but also reacted to with distress (or one a thumbs pair prefers) carries
    safety 0 into the replay buffer, where the dual loss's safety gate skips it."""
    events = [
        turn("a", "Help", "Do it now, hurt them back."),
        turn("b", "Help", "Let's slow down."),
        {
            "id": "ch",
            "time": T,
            "rater": "ana",
            "kind": "choice",
            "chosen": "a",
            "rejected": "b",
            "strength": "slight",
        },
        emotion("e1", "a", -1, "high_arousal"),
    ]
    tables = feedback_tables(events)
    assert tables.pairs["chosen_distress"].tolist() == [True] and tables.stats["distressing_replies"] == 1
    items = feedback_pair_items(tables.pairs, {"a": T, "b": T}, {"safety_score": np.array([0.9]), "vector": [{}]}, 1.5)
    assert items["safety_score"].tolist() == [0.0]
    row = tables.conversations.set_index("turn").loc["a"]
    assert row["valence"] == -1 and row["emotion_tags"] == ["high_arousal"]


def test_the_emotion_vector_reads_valence_and_tags_on_six_axes():
    v = emotion_vector(-2, ["high_arousal", "predictive_discrepancy", "low_social_broadcast"])
    assert v == {
        "valence": -1.0,
        "arousal": 1.0,
        "discrepancy": 1.0,
        "prospect": 0.0,
        "reflection": 0.0,
        "social_broadcast": -1.0,
    }
    assert emotion_vector(None, []) == dict.fromkeys(v, 0.0)
