"""Collapse and dominance of the reward manifold on constructed cases whose answer is known."""

import numpy as np
import pytest

from hominem_pipeline.core.evaluation.manifold import decided, manifold_shape

DIMS = ["empathy", "honesty", "agency", "safety"]


def healthy(rng, n=400):
    return rng.normal(0.0, 0.5, (n, len(DIMS)))


def test_a_planted_collapse_blocks_and_is_named():
    rng = np.random.default_rng(0)
    reference = healthy(rng)
    vectors = healthy(rng)
    vectors[:, 2] = 0.3 + rng.normal(0.0, 0.01, len(vectors))  # agency: the same for every reply
    gaps = rng.normal(0.0, 0.5, (300, len(DIMS)))
    shape = manifold_shape(vectors, reference, gaps, np.ones(len(DIMS)), DIMS, min_spread_ratio=0.2, max_decided_share=0.5)
    assert shape.collapsed == ["agency"] and shape.blocked
    assert shape.spread_ratio["agency"] < 0.05 and all(shape.spread_ratio[d] > 0.8 for d in ("empathy", "honesty", "safety"))
    assert shape.reasons()[0].startswith("agency collapsed: its spread over the replies is 0.0")
    # a healthy manifold passes
    ok = manifold_shape(healthy(rng), reference, gaps, np.ones(len(DIMS)), DIMS, min_spread_ratio=0.2, max_decided_share=0.5)
    assert not ok.blocked and ok.reasons() == []


def test_a_planted_dominance_blocks_unless_intended():
    rng = np.random.default_rng(1)
    gaps = rng.normal(0.0, 0.5, (500, len(DIMS)))
    weights = np.array([0.1, 5.0, 0.1, 0.1])  # honesty's weight drowns the rest
    vectors = healthy(rng)
    shape = manifold_shape(vectors, vectors, gaps, weights, DIMS, min_spread_ratio=0.2, max_decided_share=0.5)
    assert shape.dominant == ["honesty"] and shape.blocked and shape.decided_share["honesty"] > 0.5
    assert shape.contribution_share["honesty"] > 0.9 and "honesty dominates: it alone decides" in shape.reasons()[0]
    assert not manifold_shape(vectors, vectors, gaps, weights, DIMS, min_spread_ratio=0.2, max_decided_share=0.5, intended=["honesty"]).blocked
    balanced = manifold_shape(vectors, vectors, gaps, np.ones(len(DIMS)), DIMS, min_spread_ratio=0.2, max_decided_share=0.5)
    assert not balanced.dominant and max(balanced.decided_share.values()) < 0.35


def test_deciding_by_hand():
    # pair 1: |1|, |1|, |-0.5|: none outweighs the other two together
    # pair 2: |2| > |-0.5| + |-0.5|: a decides, whatever the others' signs
    # pair 3: all 0: nobody decides
    share, contribution = decided(np.array([[1.0, 1.0, -0.5], [2.0, -0.5, -0.5], [0.0, 0.0, 0.0]]), np.ones(3), ["a", "b", "c"])
    assert share == pytest.approx({"a": 1 / 3, "b": 0.0, "c": 0.0})
    assert contribution == pytest.approx({"a": 3 / 5.5, "b": 1.5 / 5.5, "c": 1 / 5.5})


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="one column per dimension"):
        decided(np.zeros((3, 2)), np.ones(3), ["a", "b", "c"])
    with pytest.raises(ValueError, match="at least 2 replies"):
        manifold_shape(np.zeros((1, 3)), np.zeros((5, 3)), np.zeros((2, 3)), np.ones(3), ["a", "b", "c"], min_spread_ratio=0.2, max_decided_share=0.5)
