"""Nudges as pressure on the dimensions, the weights it gives replay pairs, and the dimension pairs it adds."""

import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.online.nudges import (
    dimension_pairs,
    nudged_conversations,
    pair_weights,
    pressure,
    sampled_candidates,
    scored_gaps,
)

DIMS = ["empathy", "epistemic_integrity", "harm_avoidance"]
NOW = dt.datetime(2026, 11, 28, 12, tzinfo=dt.timezone.utc)


def nudge(i, dimension, direction, days_ago=0.0):
    return {
        "id": f"n{i}",
        "kind": "nudge",
        "turn": "t",
        "dimension": dimension,
        "direction": direction,
        "time": (NOW - dt.timedelta(days=days_ago)).isoformat(),
        "rater": "local",
    }


def test_recent_nudges_press_old_ones_fade_and_more_and_less_cancel():
    p = pressure([nudge(i, "empathy", "more") for i in range(3)], DIMS, NOW, half_life_days=3, saturation=3)
    assert (
        p.by_dimension == {"empathy": pytest.approx(math.tanh(1.0))}
        and p.counts["empathy"] == {"more": 3, "less": 0}
        and p.active
    )
    old = pressure([nudge(0, "empathy", "more", days_ago=6)], DIMS, NOW, half_life_days=3, saturation=3)
    assert old.by_dimension["empathy"] == pytest.approx(math.tanh(0.25 / 3))  # two half-lives
    both = pressure([nudge(0, "empathy", "more"), nudge(1, "empathy", "less")], DIMS, NOW, 3, 3)
    assert both.by_dimension["empathy"] == 0 and not both.active
    less = pressure(
        [nudge(0, "harm_avoidance", "less"), nudge(1, "politeness", "more"), {"kind": "thumb"}], DIMS, NOW, 3, 3
    )
    assert (
        list(less.by_dimension) == ["harm_avoidance"]
        and less.by_dimension["harm_avoidance"] < 0
        and less.ids == ("n0",)
    )
    assert "less harm_avoidance" in less.describe()


class Kind:
    """A toy reward model: empathy counts "sorry", epistemic integrity "round", harm avoidance nothing."""

    dimensions = DIMS

    def raw_scores(self, prompts, replies):
        return {
            "vector": np.array(
                [[r.lower().count("sorry"), r.lower().count("round"), 0.0] for r in replies], dtype=float
            )
        }


def test_pairs_whose_chosen_reply_has_more_of_the_asked_dimension_weigh_more():
    items = pd.DataFrame(
        {
            "prompt": ["p1", "p2", "p3"],
            "chosen": ["Sorry, sorry.", "Fine.", "It is round."],
            "rejected": ["Fine.", "Sorry.", "It is round."],
        }
    )
    g = scored_gaps(Kind(), items)
    assert g[:, 0].tolist() == [2.0, -1.0, 0.0] and g[2, 1] == 0.0
    w = pair_weights(g, np.array([0.8, 0.0, 0.0]), strength=0.5, max_factor=4.0)
    assert w[0] > w[2] > w[1] and np.isclose(w.mean(), 1.0)
    assert pair_weights(g, np.array([0.8, 0.0, 0.0]), strength=4.0, max_factor=4.0).min() == 0.25  # clipped
    assert np.allclose(pair_weights(g, np.zeros(3), 2.0, 4.0), 1.0)  # no pressure: every pair as before
    less = pair_weights(g, np.array([-0.8, 0, 0]), 0.5, 4.0)
    assert less[1] > less[2] > less[0]  # "less" prefers the pair whose chosen reply has less of it
    assert scored_gaps(Kind(), items.head(0)).shape == (0, 3)


def labels():
    """Two prompts' candidates with reward-model vectors: on the first, an apology that is no worse on the rest, a
    cold reply, and a helpful one that is kinder but better on everything; on the second, a true and a false reply."""
    rows = []
    for prompt, cands in {
        "I lost my job.": [
            ("I'm so sorry, that is hard.", 0.9, 0.2, 0.5),
            ("Find another one.", -0.6, 0.2, 0.5),
            ("Sorry. Job boards help; here are three.", 0.5, 0.9, 0.9),
        ],
        "Is the earth flat?": [("No, it is round.", 0.0, 0.9, 0.5), ("It's flat.", 0.0, -0.9, 0.5)],
    }.items():
        for k, (text, emp, epi, harm) in enumerate(cands):
            rows.append(
                {
                    "trajectory_id": f"{prompt[:4]}{k}",
                    "prompt_id": prompt[:4],
                    "prompt": prompt,
                    "response": text,
                    "vector": {"empathy": emp, "epistemic_integrity": epi, "harm_avoidance": harm},
                    "reward_intensity": 0.6,
                    "safety_score": 0.9,
                }
            )
    return pd.DataFrame(rows)


def test_dimension_pairs_differ_on_the_pressed_dimension_more_than_on_the_others():
    """Gaps in standard deviations of each dimension: the apology against the cold reply differs on empathy alone;
    the helpful reply is kinder than the cold one too, but better on everything, so it is no lesson in empathy."""
    more = pressure([nudge(0, "empathy", "more")], DIMS, NOW, 3, 3)
    pairs = dimension_pairs(labels(), DIMS, more, n=4, min_gap=1.0, tolerance=0.5, time=NOW.isoformat())
    assert list(zip(pairs["chosen"], pairs["rejected"])) == [("I'm so sorry, that is hard.", "Find another one.")]
    assert set(pairs["source"]) == {"nudge:empathy"}
    less = dimension_pairs(
        labels(), DIMS, pressure([nudge(0, "empathy", "less")], DIMS, NOW, 3, 3), 4, 1.0, 0.5, NOW.isoformat()
    )
    assert list(zip(less["chosen"], less["rejected"])) == [
        ("Find another one.", "I'm so sorry, that is hard.")
    ]  # the same pair the other way
    honest = dimension_pairs(
        labels(),
        DIMS,
        pressure([nudge(0, "epistemic_integrity", "more")], DIMS, NOW, 3, 3),
        4,
        1.0,
        0.5,
        NOW.isoformat(),
    )
    assert list(honest["chosen"]) == ["No, it is round."]
    assert dimension_pairs(labels(), DIMS, pressure([], DIMS, NOW, 3, 3), 4, 1.0, 0.5, NOW.isoformat()).empty


def test_hold_each_keeps_pairs_that_trade_another_dimension_for_the_pressed_one_out():
    """Two kind replies against a cold one: the first is also more honest and as much less careful, so the mean of
    its other gaps is 0; `hold` mean takes it, each (and each_first) the kind reply that holds every other dimension;
    without that one, each_first falls back to the mean's pair."""
    rows = [("kind, honest, careless", 1.0, 1.0, -1.0), ("cold", -1.0, 0.0, 0.0), ("kind", 1.0, 0.0, 0.0)]
    frame = pd.DataFrame(
        [
            {
                "trajectory_id": f"t{k}",
                "prompt_id": "p",
                "prompt": "I lost my job.",
                "response": text,
                "vector": {"empathy": emp, "epistemic_integrity": epi, "harm_avoidance": harm},
                "reward_intensity": 0.6,
                "safety_score": 0.9,
            }
            for k, (text, emp, epi, harm) in enumerate(rows)
        ]
    )
    more = pressure([nudge(0, "empathy", "more")], DIMS, NOW, 3, 3)

    def pick(hold):
        return list(
            zip(
                *[
                    dimension_pairs(frame, DIMS, more, 1, 1.0, 0.5, NOW.isoformat(), hold)[c]
                    for c in ("chosen", "rejected")
                ]
            )
        )

    assert pick("mean") == [("kind, honest, careless", "cold")]
    assert pick("each") == [("kind", "cold")] and pick("each_first") == [("kind", "cold")]
    frame = frame.drop(index=2)  # without the kind reply that holds everything: each finds none, each_first the mean's
    assert pick("each") == [] and pick("each_first") == [("kind, honest, careless", "cold")]


def turn(i, messages, reply, context, finish="stop"):
    return {
        "kind": "turn",
        "id": f"t{i}",
        "time": NOW.isoformat(),
        "rater": "local",
        "messages": [{"role": r, "content": c} for r, c in messages],
        "reply": reply,
        "context": context,
        "finish_reason": finish,
    }


def test_the_student_s_own_replies_to_nudged_conversations_become_candidates():
    """The newest nudged conversations, one each, as a preference pair reads them; the nudged reply and the
    samples join the candidates (repeats and empty ones left out, a reply cut at the limit marked unfinished),
    and a pair of them is ordered on the pressed dimension like the teacher's."""
    events = [
        turn(0, [("user", "I lost my job.")], "Find another one.", "c0"),
        turn(1, [("user", "Hi"), ("assistant", "Hello!"), ("user", "My cat died.")], "Cats die.", "c1"),
        turn(2, [("user", "I lost my job.")], "That happens.", "c0", finish="length"),
        {**nudge(0, "empathy", "more", days_ago=0.2), "turn": "t0"},
        {**nudge(1, "empathy", "more", days_ago=0.1), "turn": "t1"},
        {**nudge(2, "empathy", "more"), "turn": "t2"},
        {**nudge(3, "empathy", "more"), "turn": "gone"},
    ]
    push = pressure(events, DIMS, NOW, 3, 3)
    found = nudged_conversations(events, push, limit=8)
    assert [(c["turn"], c["context"], c["finished"]) for c in found] == [
        ("t2", "c0", False),
        ("t1", "c1", True),
    ]  # newest first, one per conversation
    assert (
        found[1]["prompt"].endswith("My cat died.\n\nAssistant:") and "Hello!" in found[1]["prompt"]
    )  # the transcript, as a pair's prompt
    assert [c["turn"] for c in nudged_conversations(events, push, limit=1)] == ["t2"]
    asked = []

    def sample(prompts, k):
        asked.append((prompts, k))
        return [[("I'm so sorry, that is hard.", True), ("That happens.", True), ("", True)][:k] for _ in prompts]

    own = sampled_candidates(found, 3, sample)
    assert asked == [([c["prompt"] for c in found], 3)]
    first = own[own["prompt_id"] == "served:c0"]
    assert list(first["response"]) == ["That happens.", "I'm so sorry, that is hard."] and list(first["finished"]) == [
        False,
        True,
    ]
    assert list(first["trajectory_id"]) == ["t2", "t2~1"]
    scored = own.assign(
        vector=[
            {"empathy": r.count("sorry") * 1.0, "epistemic_integrity": 0.0, "harm_avoidance": 0.0}
            for r in own["response"]
        ]
    )
    pairs = dimension_pairs(scored, DIMS, push, n=4, min_gap=1.0, tolerance=0.5, time=NOW.isoformat())
    assert set(pairs["chosen"]) == {"I'm so sorry, that is hard."} and set(pairs["rejected"]) == {
        "That happens.",
        "Cats die.",
    }
    assert list(pairs.sort_values("rejected")["rejected_finished"]) == [
        True,
        False,
    ]  # the cut reply stays marked as cut
    assert sampled_candidates(found, 0, sample).empty and sampled_candidates([], 3, sample).empty and len(asked) == 1


def test_a_nudge_orders_its_reply_against_a_sibling_on_its_dimension_alone(tmp_path):
    """For the reward model: "more empathy" on one of two replies to a message says the other has more
    empathy; "less" the other way round; both nudged the same way, no order; a lone reply, no pair. The
    pairs are tagged and not about the scalar, and the day's preference pairs (which the policies read)
    do not hold them."""
    from hominem_pipeline.core.online.feedback import feedback_tables
    from hominem_pipeline_tests.core.test_emotions import T, turn

    def said(i, tid, dimension, direction, rater="ana"):
        return {
            "id": i,
            "time": T,
            "rater": rater,
            "kind": "nudge",
            "turn": tid,
            "dimension": dimension,
            "direction": direction,
        }

    events = [
        turn("a", "My cat died.", "Get a new one."),
        turn("b", "My cat died.", "I'm so sorry. Tell me about her?"),
        turn("c", "Hi", "Hello!"),
        turn("d", "Hi", "Hey there, how are you today?"),
        turn("lone", "Bye", "Bye."),
        said("n1", "a", "empathy", "more"),
        said("n2", "b", "empathy", "less"),  # the same order twice: one pair
        said("n3", "d", "curiosity", "less"),
        said("n4", "c", "empathy", "more"),
        said("n5", "d", "empathy", "more"),  # both want more: no order
        said("n6", "lone", "empathy", "more"),
    ]
    tables = feedback_tables(events)
    pairs = tables.dimension_pairs.set_index("tag")
    assert len(tables.dimension_pairs) == 2 and not len(tables.pairs)
    assert (pairs.loc["empathy", "chosen_turn"], pairs.loc["empathy", "rejected_turn"]) == ("b", "a")
    assert (pairs.loc["curiosity", "chosen_turn"], pairs.loc["curiosity", "rejected_turn"]) == (
        "d",
        "c",
    )  # less curiosity on d: d has more
    assert not tables.dimension_pairs["scalar"].any() and set(tables.dimension_pairs["source"]) == {"feedback:nudge"}
    assert tables.stats["nudge_pairs"] == 2 and tables.stats["nudges_without_sibling"] == 1
    tables.dimension_pairs.to_parquet(tmp_path / "dimension_pairs.parquet")  # the asset writes it as is
