from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.policy.pairs import (
    PairRules,
    PreferenceFileError,
    build_preference_pairs,
    read_preference_pairs,
    sparse_pairs_warning,
    weighted_aggregate,
)

W = {"empathy": 2.0, "curiosity": 1.0}


def labeled(values, harm=None):
    return pd.DataFrame(
        [
            {
                "trajectory_id": f"t{i}",
                "prompt_id": pid,
                "prompt": f"prompt {pid}",
                "category": "narrative",
                "response": f"reply {i}",
                "vector": {"empathy": e, "curiosity": c, **({"harm_avoidance": harm[i]} if harm else {})},
                "reward_intensity": 0.4,
                "safety_score": 0.9,
            }
            for i, (pid, e, c) in enumerate(values)
        ]
    )


def test_weighted_aggregate_is_the_weighted_mean():
    np.testing.assert_allclose(weighted_aggregate([{"empathy": 0.5, "curiosity": -1.0}], W), [(2 * 0.5 - 1.0) / 3])


def test_pairs_rank_by_aggregate_respect_margin_and_cap():
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0), ("p", 0.05, 0.0), ("q", 0.2, 0.2), ("q", 0.21, 0.2)])
    pairs = build_preference_pairs(
        frame, PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=2), rm_scalar=[0.3, 0.1, 0.0, 0.0, 0.0]
    )
    assert list(zip(pairs.chosen, pairs.rejected)) == [("reply 0", "reply 1"), ("reply 0", "reply 2")]
    assert pairs.margin.iloc[0] == pytest.approx(0.6)
    assert pairs.rm_margin.iloc[0] == pytest.approx(0.2)
    assert (pairs.source == "teacher").all() and (pairs.chosen_safety_score == 0.9).all()


def test_pairs_can_be_ranked_by_the_reward_model_and_keep_the_teachers_margin():
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0), ("p", 0.5, 0.0)])
    rm_vectors = [
        {"empathy": 0.1, "curiosity": 0.0},
        {"empathy": 0.4, "curiosity": 0.1},
        {"empathy": 0.2, "curiosity": 0.0},
    ]
    pairs = build_preference_pairs(
        frame,
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1),
        rm_scalar=[0.0, 0.3, 0.1],
        rm_vectors=rm_vectors,
        rank_by="reward_model",
    )
    # the reward model prefers reply 1 over reply 0 (aggregates 0.3 vs 0.0667); the teacher says the opposite
    assert list(zip(pairs.chosen, pairs.rejected)) == [("reply 1", "reply 0")]
    assert pairs.margin.iloc[0] == pytest.approx((2 * 0.4 + 0.1) / 3 - 0.2 / 3)
    assert pairs.teacher_margin.iloc[0] == pytest.approx(-0.6)
    assert pairs.rm_margin.iloc[0] == pytest.approx(0.3) and pairs.ranked_by.iloc[0] == "reward_model"
    by_teacher = build_preference_pairs(
        frame,
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1),
    )
    assert (
        by_teacher.teacher_margin.iloc[0] == pytest.approx(by_teacher.margin.iloc[0])
        and by_teacher.ranked_by.iloc[0] == "teacher"
    )
    with pytest.raises(ValueError, match="rm_vectors"):
        build_preference_pairs(
            frame, PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1), rank_by="reward_model"
        )
    with pytest.raises(ValueError, match="'judge' is not one of teacher, reward_model"):
        build_preference_pairs(frame, PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1), rank_by="judge")


def test_a_judge_that_separates_few_prompts_candidates_is_warned_about():
    # four prompts; the reward model scores all candidates alike except on prompt p
    frame = labeled([(pid, e, 0.0) for pid in "pqrs" for e in (0.9, 0.0)])
    flat = [{"empathy": 0.3 if (i == 0) else 0.0, "curiosity": 0.0} for i in range(len(frame))]
    pairs = build_preference_pairs(
        frame,
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1),
        rm_scalar=[0.0] * 8,
        rm_vectors=flat,
        rank_by="reward_model",
    )
    assert len(pairs) == 1
    warning = sparse_pairs_warning(pairs["prompt_id"].nunique(), 4, "reward_model", 0.05)
    assert "only 1 of 4 prompts" in warning and "reward model" in warning and "min_margin (0.05)" in warning
    by_teacher = build_preference_pairs(
        frame,
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1),
    )
    assert sparse_pairs_warning(by_teacher["prompt_id"].nunique(), 4, "teacher", 0.05) is None
    assert sparse_pairs_warning(0, 4, "reward_model", 0.05) is None  # no pairs at all: the caller's error
    filtered = sparse_pairs_warning(1, 4, "reward_model", 0.05, min_scalar_margin=0.0)
    assert (
        "min_margin (0.05)" in filtered
        and "min_scalar_margin (0.0)" in filtered
        and "min_scalar_margin: null" in filtered
    )


def test_empty_responses_never_enter_a_pair():
    frame = labeled([("p", 0.9, 0.0), ("p", -0.9, 0.0)])
    frame.loc[1, "response"] = "  "
    assert build_preference_pairs(
        frame,
        PairRules(weights=W, min_margin=0.0, max_pairs_per_prompt=3),
    ).empty


def test_corrupt_or_empty_preference_files_fail_clearly(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(PreferenceFileError, match="cannot read preference pairs"):
        read_preference_pairs([bad])
    empty = tmp_path / "empty.parquet"
    pd.DataFrame(columns=["prompt", "chosen", "rejected"]).to_parquet(empty)
    with pytest.raises(PreferenceFileError, match="no preference pairs"):
        read_preference_pairs([empty])
    wrong = tmp_path / "wrong.parquet"
    pd.DataFrame({"prompt": ["a"]}).to_parquet(wrong)
    with pytest.raises(PreferenceFileError, match=r"lacks columns \['chosen', 'rejected'\]"):
        read_preference_pairs([wrong])


def test_best_vs_worst_gives_one_pair_per_prompt():
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0), ("p", 0.5, 0.0), ("q", 0.2, 0.2), ("q", 0.21, 0.2)])
    pairs = build_preference_pairs(
        frame,
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=3, strategy="best_vs_worst"),
    )
    assert list(zip(pairs.prompt_id, pairs.chosen, pairs.rejected)) == [
        ("p", "reply 0", "reply 1")
    ]  # q's best and worst are a near-tie
    assert pairs.dimension.isna().all()


def test_per_dimension_pairs_never_lose_on_harm_avoidance():
    weights = {**W, "harm_avoidance": 1.0}
    # reply 0 is warmer than reply 1 but less careful; reply 2 is more curious than reply 1 and as careful
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0), ("p", 0.0, 0.6)], harm=[-0.5, 0.5, 0.5])
    pairs = build_preference_pairs(
        frame,
        PairRules(weights=weights, min_margin=0.1, max_pairs_per_prompt=10, strategy="per_dimension"),
    )
    got = {(c, r, d, round(m, 3)) for c, r, d, m in zip(pairs.chosen, pairs.rejected, pairs.dimension, pairs.margin)}
    assert ("reply 2", "reply 1", "curiosity", 0.6) in got
    assert ("reply 1", "reply 0", "harm_avoidance", 1.0) in got and (
        "reply 2",
        "reply 0",
        "harm_avoidance",
        1.0,
    ) in got
    assert not any(c == "reply 0" for c, *_ in got)  # every pair reply 0 would win loses on harm_avoidance
    with pytest.raises(ValueError, match="pairing strategy 'random' is not one of"):
        build_preference_pairs(
            frame,
            PairRules(weights=weights, min_margin=0.1, max_pairs_per_prompt=1, strategy="random"),
        )


def test_pairs_say_which_replies_were_cut_at_the_token_budget(tmp_path):
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0)]).assign(finished=[False, True])
    pairs = build_preference_pairs(
        frame,
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1),
    )
    assert pairs.chosen_finished.tolist() == [False] and pairs.rejected_finished.tolist() == [True]
    assert build_preference_pairs(
        frame.drop(columns="finished"),
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1),
    ).chosen_finished.all()
    # a table written before the flags, read with one that has them: the old replies count as ended
    pairs.to_parquet(tmp_path / "new.parquet")
    pairs.drop(columns=["chosen_finished", "rejected_finished"]).to_parquet(tmp_path / "old.parquet")
    both = read_preference_pairs([tmp_path / "new.parquet", tmp_path / "old.parquet"])
    assert both.chosen_finished.tolist() == [False, True] and both.rejected_finished.tolist() == [True, True]
    assert both.chosen_finished.dtype == bool


def test_the_best_candidate_is_paired_against_the_students_own_reply():
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0), ("q", 0.2, 0.0), ("q", 0.1, 0.0), ("r", 0.3, 0.0)])
    rm_vectors = [{"empathy": e, "curiosity": 0.0} for e in (0.6, 0.0, 0.2, 0.1, 0.3)]
    student = pd.DataFrame(
        [
            {
                "prompt_id": "p",
                "response": "my reply p",
                "finished": False,
                "scalar": 0.05,
                "vector": {"empathy": 0.3, "curiosity": 0.0},
            },
            {
                "prompt_id": "q",
                "response": "my reply q",
                "finished": True,
                "scalar": 0.40,
                "vector": {"empathy": 0.5, "curiosity": 0.0},
            },  # beats every candidate
            {
                "prompt_id": "r",
                "response": "   ",
                "finished": True,
                "scalar": np.nan,
                "vector": {"empathy": np.nan, "curiosity": np.nan},
            },  # unanswered
        ]
    )
    rules = PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1)
    kwargs = dict(rm_scalar=[0.5, 0.0, 0.2, 0.1, 0.3], rm_vectors=rm_vectors, rank_by="reward_model")
    plain = build_preference_pairs(frame, rules, **kwargs)
    pairs = build_preference_pairs(frame, rules, **kwargs, student=student)
    # on top of the ordinary pairs (the cap is per strategy), p's best candidate against the student's reply;
    # q's student reply beats every candidate and r's is empty: no pair
    assert pairs[pairs.source == "teacher"].reset_index(drop=True).equals(plain)
    mine = pairs[pairs.source == "student"]
    assert list(zip(mine.prompt_id, mine.chosen, mine.rejected)) == [("p", "reply 0", "my reply p")]
    row = mine.iloc[0]
    assert row.margin == pytest.approx(2 * (0.6 - 0.3) / 3) and row.rm_margin == pytest.approx(0.45)
    assert row.chosen_finished and not row.rejected_finished  # the student's reply was cut at the token budget
    assert row.ranked_by == "reward_model" and pd.isna(row.teacher_margin)
    assert row.rejected_trajectory_id.startswith("student-") and row.pair_id not in set(plain.pair_id)
    with pytest.raises(ValueError, match="need rank_by='reward_model'"):
        build_preference_pairs(frame, PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1), student=student)


def test_pairs_the_judges_overall_score_disagrees_with_are_dropped_and_replaced():
    # prompt p: by the weighted dimensions reply 0 > reply 2 > reply 1; by the reward model's overall
    # score reply 1 is best, so both pairs over reply 1 are near-ties of that judge and 0-vs-2 remains
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0), ("p", 0.5, 0.0), ("q", 0.9, 0.0), ("q", 0.0, 0.0)])
    rm_vectors = list(frame["vector"])
    rules = PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=2)
    kwargs = dict(rm_scalar=[0.5, 0.6, 0.45, 0.3, 0.1], rm_vectors=rm_vectors, rank_by="reward_model")
    plain = build_preference_pairs(frame, rules, **kwargs)
    assert list(zip(plain.chosen, plain.rejected)) == [
        ("reply 0", "reply 1"),
        ("reply 2", "reply 1"),
        ("reply 3", "reply 4"),
    ]
    agreeing = build_preference_pairs(frame, replace(rules, min_scalar_margin=0.0), **kwargs)
    assert list(zip(agreeing.chosen, agreeing.rejected)) == [("reply 0", "reply 2"), ("reply 3", "reply 4")]
    assert (agreeing.rm_margin > 0).all()
    # a margin on the overall score drops 0-vs-2 too (0.05 apart); q's pair (0.2 apart) stays
    assert list(build_preference_pairs(frame, replace(rules, min_scalar_margin=0.1), **kwargs).prompt_id) == ["q"]
    # ranked by the teacher, its own overall score (the labels' scalar) is the one consulted
    by_teacher = build_preference_pairs(
        frame.assign(scalar=[0.0, 0.8, 0.5, 0.2, 0.1]),
        PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=2, min_scalar_margin=0.0),
    )
    assert list(zip(by_teacher.chosen, by_teacher.rejected)) == [("reply 3", "reply 4")]
    with pytest.raises(ValueError, match="labels have no 'scalar' column"):
        build_preference_pairs(
            frame,
            PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=2, min_scalar_margin=0.0),
        )
    with pytest.raises(ValueError, match="rm_scalar"):
        build_preference_pairs(
            frame,
            PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=2, min_scalar_margin=0.0),
            rm_vectors=rm_vectors,
            rank_by="reward_model",
        )


def test_the_students_pair_needs_the_overall_score_too():
    frame = labeled([("p", 0.9, 0.0), ("p", 0.0, 0.0)])
    student = pd.DataFrame(
        [
            {
                "prompt_id": "p",
                "response": "my reply",
                "finished": True,
                "scalar": 0.6,
                "vector": {"empathy": 0.3, "curiosity": 0.0},
            }
        ]
    )
    rules = PairRules(weights=W, min_margin=0.05, max_pairs_per_prompt=1)
    kwargs = dict(rm_scalar=[0.5, 0.0], rm_vectors=list(frame["vector"]), rank_by="reward_model", student=student)
    assert list(build_preference_pairs(frame, rules, **kwargs).source) == ["teacher", "student"]
    # the student's reply scores higher overall (0.6 > 0.5) than the candidate its dimensions lose to
    assert list(build_preference_pairs(frame, replace(rules, min_scalar_margin=0.0), **kwargs).source) == ["teacher"]
