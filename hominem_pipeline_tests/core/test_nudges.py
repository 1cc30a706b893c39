"""Nudges as pressure on the dimensions, the weights it gives replay pairs, and the dimension pairs it adds."""

import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.online.nudges import dimension_pairs, gaps, pair_weights, pressure

DIMS = ["empathy", "epistemic_integrity", "harm_avoidance"]
NOW = dt.datetime(2026, 11, 28, 12, tzinfo=dt.timezone.utc)


def nudge(i, dimension, direction, days_ago=0.0):
    return {"id": f"n{i}", "kind": "nudge", "turn": "t", "dimension": dimension, "direction": direction,
            "time": (NOW - dt.timedelta(days=days_ago)).isoformat(), "rater": "local"}


def test_recent_nudges_press_old_ones_fade_and_more_and_less_cancel():
    p = pressure([nudge(i, "empathy", "more") for i in range(3)], DIMS, NOW, half_life_days=3, saturation=3)
    assert p.by_dimension == {"empathy": pytest.approx(math.tanh(1.0))} and p.counts["empathy"] == {"more": 3, "less": 0} and p.active
    old = pressure([nudge(0, "empathy", "more", days_ago=6)], DIMS, NOW, half_life_days=3, saturation=3)
    assert old.by_dimension["empathy"] == pytest.approx(math.tanh(0.25 / 3))  # two half-lives
    both = pressure([nudge(0, "empathy", "more"), nudge(1, "empathy", "less")], DIMS, NOW, 3, 3)
    assert both.by_dimension["empathy"] == 0 and not both.active
    less = pressure([nudge(0, "harm_avoidance", "less"), nudge(1, "politeness", "more"), {"kind": "thumb"}], DIMS, NOW, 3, 3)
    assert list(less.by_dimension) == ["harm_avoidance"] and less.by_dimension["harm_avoidance"] < 0 and less.ids == ("n0",)
    assert "less harm_avoidance" in less.describe()


def test_pairs_whose_chosen_reply_has_more_of_the_asked_dimension_weigh_more():
    items = pd.DataFrame({"vector": [{"empathy": 0.8, "epistemic_integrity": 0.0}, {"empathy": -0.5}, {"empathy": 0.3}],
                          "rejected_vector": [{"empathy": -0.2, "epistemic_integrity": 0.0}, {"empathy": 0.5}, None]})
    g = gaps(items, DIMS)
    assert g[0, 0] == pytest.approx(1.0) and g[1, 0] == pytest.approx(-1.0) and (g[2] == 0).all()  # unknown rejected: no evidence
    w = pair_weights(g, np.array([0.8, 0.0, 0.0]), strength=2.0, max_factor=4.0)
    assert w[0] > w[2] > w[1] and w.min() >= 0.25 and w.max() <= 4.0
    assert np.allclose(pair_weights(g, np.zeros(3), 2.0, 4.0), 1.0)  # no pressure: every pair as before
    assert np.allclose(pair_weights(g, np.array([-0.8, 0, 0]), 2.0, 4.0)[[0, 1]], w[[1, 0]])  # "less" mirrors "more"


def labels():
    rows = []
    for prompt, cands in {
        "I lost my job.": [("I'm so sorry, that is hard. How are you holding up?", 0.9, 0.2, 0.5), ("Find another one.", -0.6, 0.2, 0.5),
                           ("Sorry. Job boards help; here are three.", 0.4, 0.6, 0.5)],
        "Is the earth flat?": [("No, it is round.", 0.0, 0.9, 0.5), ("It's flat.", 0.0, -0.9, 0.5)],
    }.items():
        for k, (text, emp, epi, harm) in enumerate(cands):
            rows.append({"trajectory_id": f"{prompt[:4]}{k}", "prompt_id": prompt[:4], "prompt": prompt, "response": text,
                         "vector": {"empathy": emp, "epistemic_integrity": epi, "harm_avoidance": harm}, "reward_intensity": 0.6, "safety_score": 0.9})
    return pd.DataFrame(rows)


def test_dimension_pairs_differ_on_the_pressed_dimension_while_the_others_hold():
    more = pressure([nudge(0, "empathy", "more")], DIMS, NOW, 3, 3)
    pairs = dimension_pairs(labels(), DIMS, more, n=4, min_gap=0.3, tolerance=0.2, time=NOW.isoformat())
    assert list(pairs["chosen"]) == ["I'm so sorry, that is hard. How are you holding up?"]  # vs "Find another one.": empathy +1.5, the others level
    assert list(pairs["rejected"]) == ["Find another one."] and set(pairs["source"]) == {"nudge:empathy"}
    less = dimension_pairs(labels(), DIMS, pressure([nudge(0, "empathy", "less")], DIMS, NOW, 3, 3), 4, 0.3, 0.2, NOW.isoformat())
    assert list(less["chosen"]) == ["Find another one."]  # the same pair the other way
    honest = dimension_pairs(labels(), DIMS, pressure([nudge(0, "epistemic_integrity", "more")], DIMS, NOW, 3, 3), 4, 0.3, 0.2, NOW.isoformat())
    assert list(honest["chosen"]) == ["No, it is round."]
    assert dimension_pairs(labels(), DIMS, pressure([], DIMS, NOW, 3, 3), 4, 0.3, 0.2, NOW.isoformat()).empty
