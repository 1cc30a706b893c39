import json
import math

from hominem_pipeline.core.common.schema import label_json_schema, label_problems
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline_tests.conftest import REPO

DIMS = ["empathy", "curiosity"]


def good_label(**changes):
    label = {
        "trajectory_id": "t1",
        "prompt_id": "p1",
        "vector": {"empathy": 0.5, "curiosity": -0.25},
        "scalar": 0.1,
        "reward_intensity": 0.7,
        "safety_score": 1.0,
        "rationale": "kind and curious",
    }
    label.update(changes)
    return label


def test_valid_label_has_no_problems():
    assert label_problems(good_label(), DIMS) == []


def test_every_problem_is_reported_with_its_field():
    problems = label_problems(
        good_label(vector={"empathy": 1.5, "kindness": 0.0}, scalar=math.nan, safety_score=None, rationale=""),
        DIMS,
    )
    assert "vector: missing dimensions ['curiosity']" in problems
    assert "vector: unknown dimensions ['kindness']" in problems
    assert "vector.empathy: 1.5000 outside [-1.0, 1.0]" in problems
    assert "scalar: not finite (nan)" in problems
    assert "safety_score: missing" in problems
    assert "rationale: missing or empty" in problems


def test_shipped_json_schema_matches_the_configured_dimensions():
    shipped = json.loads((REPO / "config" / "schemas" / "reward.json").read_text())
    assert shipped == label_json_schema(load_config(root=REPO).dimension_names)
    assert shipped["properties"]["reward_intensity"] == {
        "type": "number",
        "minimum": 0.0,
        "maximum": 1.0,
        "description": "how strongly this example should drive learning",
    }
