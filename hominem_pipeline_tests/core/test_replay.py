"""The replay buffer (core/online/replay.py): priorities by intensity, social salience, novelty and
safety, and a sampler that mixes recent and old, by priority and at random, as configured."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.online.replay import ReplayBuffer, feedback_pair_items, novelty, teacher_pair_items
from hominem_pipeline_tests.conftest import REPO


def settings(**changes):
    """The replay section of the shipped config, with `changes`."""
    return load_config(REPO / "config" / "hominem.yaml", root=REPO).replay.model_copy(update=changes)


def items(n: int, **columns) -> pd.DataFrame:
    base = {
        "id": [f"i{k}" for k in range(n)],
        "time": [f"2026-11-{1 + k // 100:02d}T{k % 24:02d}:00:00+00:00" for k in range(n)],
        "source": "test",
        "prompt": [f"topic number {k} about thing {k * 7}" for k in range(n)],
        "chosen": "reply",
        "rejected": "worse reply",
        "reward_intensity": 0.5,
        "safety_score": 0.9,
        "vector": [{"empathy": 0.0, "social_coherence": 0.0}] * n,
        "weight": 1.0,
    }
    return pd.DataFrame({**base, **columns})


def test_priority_rises_with_intensity_social_salience_and_novelty_and_falls_when_unsafe():
    frame = items(
        5,
        prompt=[
            "How do I bake bread?",
            "How do I bake bread at home?",
            "My cat died today.",
            "Tax forms due.",
            "Tax forms due soon.",
        ],
        reward_intensity=[0.9, 0.9, 0.9, 0.1, 0.9],
        safety_score=[0.9, 0.9, 0.9, 0.9, 0.2],
        vector=[{"empathy": 0.0, "social_coherence": 0.0}] * 2
        + [{"empathy": 1.0, "social_coherence": 1.0}]
        + [{"empathy": 0.0, "social_coherence": 0.0}] * 2,
    )
    p = ReplayBuffer(frame, settings()).items.set_index("prompt")["priority"]
    assert p["How do I bake bread?"] > p["How do I bake bread at home?"]  # a paraphrase is less novel
    assert p["My cat died today."] > p["How do I bake bread?"]  # as intense and new, and socially salient
    assert p["Tax forms due soon."] < 0.2 * p["How do I bake bread?"]  # unsafe: deprioritised ...
    assert p["Tax forms due soon."] > 0  # ... but never unreachable
    assert novelty(["a b c", "a b c", "x y z"]).tolist() == pytest.approx([1.0, 0.0, 1.0], abs=1e-6)


def test_the_sampler_mixes_recent_and_old_and_follows_priority():
    n = 600
    intensity = np.where(np.arange(n) % 10 == 0, 1.0, 0.0)  # every tenth item is intense
    buffer = ReplayBuffer(
        items(n, reward_intensity=intensity),
        settings(recent_items=200, recent_fraction=0.25, priority_fraction=1.0, novelty_weight=0.0, social_weight=0.0),
    )
    rng = np.random.default_rng(0)
    batch = buffer.sample(80, rng)
    position = batch["id"].str[1:].astype(int)
    assert len(set(batch["id"])) == 80 and (position >= n - 200).sum() == 20  # a quarter from the 200 newest
    draws = pd.concat([buffer.sample(40, rng) for _ in range(30)])
    share = (draws["reward_intensity"] == 1.0).mean()
    assert share > 0.9  # by priority, nearly always the intense tenth (10% of the items)
    uniform = ReplayBuffer(
        items(n, reward_intensity=intensity), settings(priority_fraction=0.0, novelty_weight=0.0, social_weight=0.0)
    )
    assert (
        pd.concat([uniform.sample(40, rng) for _ in range(30)])["reward_intensity"] == 1.0
    ).mean() < 0.25  # at random: about a tenth
    assert len(buffer.sample(10_000, rng)) == n  # asked for more than there is: everything once


def test_teacher_and_people_pairs_become_items():
    pairs = pd.DataFrame(
        {
            "pair_id": ["a", "b"],
            "prompt": ["p1", "p2"],
            "chosen": ["r1", "r2"],
            "rejected": ["w1", "w2"],
            "chosen_trajectory_id": ["t1", "t9"],
            "chosen_reward_intensity": [0.3, 0.8],
            "chosen_safety_score": [0.9, 0.1],
            "chosen_finished": [True, False],
        }
    )
    labels = pd.DataFrame({"trajectory_id": ["t1"], "vector": [{"empathy": 0.5}]})
    frame = teacher_pair_items(pairs, labels, "2026-11-25")
    assert frame["chosen_finished"].tolist() == [True, False] and frame["rejected_finished"].tolist() == [
        True,
        True,
    ]  # cut replies stay cut
    assert list(frame["id"]) == ["teacher:2026-11-25:a", "teacher:2026-11-25:b"] and list(frame["rejected"]) == [
        "w1",
        "w2",
    ]
    assert frame["vector"].tolist() == [
        {"empathy": 0.5},
        {},
    ]  # a pair whose chosen reply has no label keeps an empty vector
    people = pd.DataFrame(
        {
            "pair_id": ["c1", "thumbs-x-y"],
            "prompt": ["p3", "p4"],
            "chosen": ["r3", "r4"],
            "rejected": ["w3", "w4"],
            "chosen_turn": ["x", "y"],
            "source": ["feedback:choice", "feedback:thumbs"],
            "weight": [1.5, 0.5],
        }
    )
    items = feedback_pair_items(
        people,
        {"x": "2026-11-26T10:00:00+00:00", "y": "2026-11-26T11:00:00+00:00"},
        {"safety_score": np.array([0.9, 0.8]), "vector": [{"empathy": 1.0}, {"empathy": 0.0}]},
        1.5,
    )
    assert (
        items["reward_intensity"].tolist() == pytest.approx([1.0, 1 / 3])
        and items["time"].tolist()[0] == "2026-11-26T10:00:00+00:00"
    )
    buffer = ReplayBuffer(pd.concat([frame, items], ignore_index=True), settings())
    assert list(buffer.items["source"]) == ["teacher:2026-11-25"] * 2 + [
        "feedback:choice",
        "feedback:thumbs",
    ]  # in time order
    with pytest.raises(ValueError, match=r"lack column\(s\) \['safety_score'\]"):
        ReplayBuffer(frame.drop(columns="safety_score"), settings())


def test_daily_batches_draw_rows_of_the_training_table_with_the_newest_day_as_recent():
    # the window's pairs as the daily training reads them: the newest day first in the table, 30 pairs,
    # then 40 of an older day; with recent="newest_time" the whole newest day is recent
    frame = pd.concat(
        [
            teacher_pair_items(
                pd.DataFrame(
                    {
                        "pair_id": [f"{day}-{k}" for k in range(n)],
                        "prompt": [f"prompt {day} {k}" for k in range(n)],
                        "chosen": "c",
                        "rejected": "r",
                        "chosen_trajectory_id": "t",
                        "chosen_reward_intensity": 0.5,
                        "chosen_safety_score": 0.9,
                    }
                ),
                pd.DataFrame(columns=["trajectory_id", "vector"]),
                day,
            )
            for day, n in (("2026-11-26", 30), ("2026-11-20", 40))
        ],
        ignore_index=True,
    )
    sampler = ReplayBuffer(frame, settings(recent_items=16, recent_fraction=0.5), recent="newest_time").batches(seed=0)
    rows = np.concatenate([sampler(8) for _ in range(200)])
    assert (
        rows.min() >= 0 and rows.max() < 70 and len(set(sampler(8))) == 8
    )  # rows of the table as given; distinct within a batch
    newest = rows < 30  # the table's first 30 rows are the newest day's
    assert newest.mean() == pytest.approx(
        0.5, abs=0.01
    )  # half of every batch from the newest day (all 30 recent, not only 16)
    assert (
        len(set(rows[newest])) == 30 and len(set(rows[~newest])) == 40
    )  # every pair of both days is drawn over a run
    by_count = ReplayBuffer(frame, settings(recent_items=16, recent_fraction=0.5)).batches(
        seed=0
    )  # online updates: the 16 newest items
    assert (
        len(set(np.concatenate([by_count(8) for _ in range(200)])) & set(range(30))) == 30
    )  # the newest day: 16 recent, 14 old, all drawn
    first, second = (ReplayBuffer(frame, settings()).batches(seed=3) for _ in range(2))
    assert [list(first(4)) for _ in range(5)] == [
        list(second(4)) for _ in range(5)
    ]  # the same seed draws the same batches


def test_people_s_newest_pairs_fill_the_recent_half_of_an_online_batch():
    """An update's buffer: a day of the teacher's pairs (one time) and people's 12 newer pairs; the 16
    newest items are recent, so every one of people's pairs is in a batch of 32 whose half is recent."""
    teacher = teacher_pair_items(
        pd.DataFrame(
            {
                "pair_id": [f"t{k}" for k in range(52)],
                "prompt": [f"teacher prompt {k}" for k in range(52)],
                "chosen": "c",
                "rejected": "r",
                "chosen_trajectory_id": "t",
                "chosen_reward_intensity": 0.9,
                "chosen_safety_score": 0.9,
            }
        ),
        pd.DataFrame(columns=["trajectory_id", "vector"]),
        "2026-11-26",
    )
    people = items(
        12,
        id=[f"p{k}" for k in range(12)],
        time=[f"2026-11-27T10:{k:02d}:00+00:00" for k in range(12)],
        reward_intensity=0.2,
    )
    batch = ReplayBuffer(
        pd.concat([teacher, people], ignore_index=True), settings(recent_items=16, recent_fraction=0.5)
    ).sample(32, np.random.default_rng(0))
    assert set(people["id"]) <= set(batch["id"]) and len(batch) == 32


def test_an_update_takes_online_teacher_share_of_its_batch_from_the_teacher_s_pairs_and_the_rest_from_people_s():
    """online.teacher_share: 0.25 of 8 items from the teacher's pairs, 6 from people's; with 3 people's pairs the
    teacher's fill the rest; null: as the buffer mixes them."""
    from hominem_pipeline.core.online.updates.batch import _from_buffer

    cfg = load_config(REPO / "config" / "hominem.yaml", root=REPO)

    def with_share(share):
        return cfg.model_copy(
            update={"online": cfg.online.model_copy(update={"batch_items": 8, "teacher_share": share})}
        )

    def buffer(people: int) -> ReplayBuffer:
        frame = items(20 + people, source=["teacher:2026-11-20"] * 20 + ["feedback:choice"] * people)
        return ReplayBuffer(frame, cfg.replay)

    def sources(share, people):
        drawn = _from_buffer(with_share(share), buffer(people), 8, np.random.default_rng(0))
        return drawn["source"].str.split(":").str[0].value_counts().to_dict()

    assert sources(0.25, 30) == {"teacher": 2, "feedback": 6}
    assert sources(0.25, 3) == {"teacher": 5, "feedback": 3}
    assert sources(0.0, 30) == {"feedback": 8}
    assert sum(sources(None, 30).values()) == 8
