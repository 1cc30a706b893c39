"""Collapse, merging and dominance of the reward manifold on constructed cases whose answer is known."""

import json

import numpy as np
import pytest

from hominem_pipeline.core.evaluation.manifold import ManifoldShape, decided, manifold_shape

DIMS = ["empathy", "honesty", "agency", "safety"]


def healthy(rng, n=400):
    return rng.normal(0.0, 0.5, (n, len(DIMS)))


def test_a_planted_collapse_blocks_and_is_named():
    rng = np.random.default_rng(0)
    reference = healthy(rng)
    vectors = healthy(rng)
    vectors[:, 2] = 0.3 + rng.normal(0.0, 0.01, len(vectors))  # agency: the same for every reply
    gaps = rng.normal(0.0, 0.5, (300, len(DIMS)))
    shape = manifold_shape(vectors, reference.std(0), DIMS, gaps, np.ones(len(DIMS)))
    verdict = shape.verdict(0.2, 0.5)
    assert verdict.collapsed == ["agency"] and verdict.blocked and not verdict.dominant
    assert shape.spread_ratio["agency"] < 0.05 and all(
        shape.spread_ratio[d] > 0.8 for d in ("empathy", "honesty", "safety")
    )
    assert verdict.reasons[0].startswith("agency collapsed: its spread over the 400 replies is 0.0")
    assert "min_spread_ratio 0.2" in verdict.summary()
    # the same figures under a looser threshold pass: the verdict is the config's, the figures are kept
    assert not shape.verdict(0.01, 0.5).blocked
    # a healthy manifold passes
    ok = manifold_shape(healthy(rng), reference.std(0), DIMS, gaps, np.ones(len(DIMS))).verdict(0.2, 0.5)
    assert not ok.blocked and ok.reasons == [] and ok.summary().startswith("no dimension collapsed")


def test_a_planted_dominance_blocks_unless_intended():
    rng = np.random.default_rng(1)
    gaps = rng.normal(0.0, 0.5, (500, len(DIMS)))
    weights = np.array([0.1, 5.0, 0.1, 0.1])  # honesty's weight drowns the rest
    vectors = healthy(rng)
    shape = manifold_shape(vectors, vectors.std(0), DIMS, gaps, weights)
    verdict = shape.verdict(0.2, 0.5)
    assert verdict.dominant == ["honesty"] and verdict.blocked and shape.decided_share["honesty"] > 0.5
    assert shape.contribution_share["honesty"] > 0.9 and "honesty dominates: it alone decides" in verdict.reasons[0]
    assert not shape.verdict(0.2, 0.5, intended=["honesty"]).blocked
    balanced = manifold_shape(vectors, vectors.std(0), DIMS, gaps, np.ones(len(DIMS)))
    assert not balanced.verdict(0.2, 0.5).dominant and max(balanced.decided_share.values()) < 0.35
    # the figures round-trip through the adapter's manifold.json
    assert ManifoldShape.from_dict(json.loads(json.dumps(shape.as_dict()))) == shape


def test_the_people_s_score_may_dominate_when_intended():
    rng = np.random.default_rng(2)
    vectors = healthy(rng)
    gaps = np.column_stack(
        [rng.normal(0.0, 0.1, (300, len(DIMS))), rng.normal(0.0, 1.0, 300)]
    )  # the people's score's gaps drown the dimensions'
    shape = manifold_shape(vectors, vectors.std(0), DIMS, gaps, np.ones(len(DIMS) + 1), DIMS + ["people"])
    assert shape.decided_share["people"] > 0.5 and shape.verdict(0.2, 0.5).dominant == ["people"]
    assert not shape.verdict(0.2, 0.5, intended=["people"]).blocked


def test_deciding_by_hand():
    # pair 1: |1|, |1|, |-0.5|: none outweighs the other two together
    # pair 2: |2| > |-0.5| + |-0.5|: a decides, whatever the others' signs
    # pair 3: all 0: nobody decides
    share, contribution = decided(
        np.array([[1.0, 1.0, -0.5], [2.0, -0.5, -0.5], [0.0, 0.0, 0.0]]), np.ones(3), ["a", "b", "c"]
    )
    assert share == pytest.approx({"a": 1 / 3, "b": 0.0, "c": 0.0})
    assert contribution == pytest.approx({"a": 3 / 5.5, "b": 1.5 / 5.5, "c": 1 / 5.5})


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="one column per dimension"):
        decided(np.zeros((3, 2)), np.ones(3), ["a", "b", "c"])
    with pytest.raises(ValueError, match="at least 2 replies"):
        manifold_shape(np.zeros((1, 3)), np.ones(3), ["a", "b", "c"], np.zeros((2, 3)), np.ones(3))


def test_a_flat_dimension_against_flat_labels_is_a_collapse_only_if_the_replies_are_flat_too():
    vectors = np.array([[0.1, 0.5], [0.3, 0.5]])
    shape = manifold_shape(vectors, np.array([0.1, 0.0]), ["a", "b"], np.ones((2, 2)), np.ones(2))
    assert shape.spread_ratio == {"a": pytest.approx(1.0), "b": None}
    assert shape.verdict(0.2, 0.5).collapsed == ["b"]
    assert "as flat as the teacher's labels'" in shape.verdict(0.2, 0.5).reasons[0]


def test_dimensions_merged_into_one_block_though_each_still_spreads():
    rng = np.random.default_rng(3)
    reference = healthy(rng)
    one = rng.normal(0.0, 0.5, (400, 1))
    merged = one + rng.normal(
        0.0, 0.02, (400, len(DIMS))
    )  # every dimension is the same score, each with its full spread
    gaps = rng.normal(0.0, 0.5, (300, len(DIMS)))
    shape = manifold_shape(merged, reference.std(0), DIMS, gaps, np.ones(len(DIMS)))
    verdict = shape.verdict(0.2, 0.5, max_mean_correlation=0.9)
    assert not verdict.collapsed and not verdict.dominant and verdict.merged and verdict.blocked
    assert shape.mean_correlation > 0.99 and len(shape.correlation) == 6
    assert (
        "the dimensions are merged into one: they correlate 1.00 on average over the 400 replies" in verdict.reasons[0]
    )
    assert "health.manifold.max_mean_correlation 0.9" in verdict.summary()
    assert not shape.verdict(0.2, 0.5).blocked  # null threshold: merging is not checked
    distinct = manifold_shape(healthy(rng), reference.std(0), DIMS, gaps, np.ones(len(DIMS))).verdict(
        0.2, 0.5, max_mean_correlation=0.9
    )
    assert not distinct.blocked and "the dimensions are distinct (mean correlation -0.01 <= 0.9)" in distinct.summary()
    # figures kept before merging was measured read back without it, and are not judged on it
    old = {k: v for k, v in shape.as_dict().items() if k not in ("mean_correlation", "correlation")}
    assert (
        ManifoldShape.from_dict(old).mean_correlation is None
        and not ManifoldShape.from_dict(old).verdict(0.2, 0.5, max_mean_correlation=0.9).merged
    )


def test_a_flat_dimension_has_no_correlation_and_is_left_out_of_the_mean():
    vectors = np.array([[0.1, 0.2, 0.5], [0.3, 0.4, 0.5], [0.2, 0.3, 0.5]])
    shape = manifold_shape(vectors, np.ones(3), ["a", "b", "c"], np.ones((2, 3)), np.ones(3))
    assert shape.correlation == {"a~b": pytest.approx(1.0)} and shape.mean_correlation == pytest.approx(1.0)
