from pathlib import Path

import pytest

from hominem_pipeline.core.config import ConfigError
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline_tests.conftest import REPO


def test_default_config_loads_with_the_seven_dimensions():
    cfg = load_config(root=REPO)
    assert cfg.dimension_names == [
        "empathy",
        "social_coherence",
        "agency_support",
        "epistemic_integrity",
        "harm_avoidance",
        "narrative_alignment",
        "curiosity",
    ]
    assert cfg.retrain.memory_conversations == 500 and cfg.retrain.reward_pairs == 200
    assert cfg.data_dir == REPO / "data"
    assert cfg.mlflow_uri == f"sqlite:///{REPO / 'data' / 'mlflow' / 'mlflow.db'}"


@pytest.mark.parametrize(
    "overlay",
    sorted(
        str(p.relative_to(REPO))
        for d in ("training", "reward", "examples")
        for p in (REPO / "config" / d).glob("*.yaml")
    ),
)
def test_every_shipped_overlay_loads(overlay: str):
    """Every key of every shipped overlay is validated here (the chain tests run on the tiny config)."""
    assert load_config(REPO / overlay, root=REPO)


def test_overlay_changes_only_the_keys_it_sets(tmp_path: Path):
    overlay = tmp_path / "mine.yaml"
    overlay.write_text("teacher:\n  candidates_per_prompt: 6\n")
    cfg = load_config(overlay, root=REPO)
    assert cfg.teacher.candidates_per_prompt == 6
    assert cfg.teacher.max_new_tokens == load_config(root=REPO).teacher.max_new_tokens


def test_unknown_key_is_named_with_its_path(tmp_path: Path):
    overlay = tmp_path / "typo.yaml"
    overlay.write_text("teacher:\n  candidates_per_promt: 6\n")
    with pytest.raises(ConfigError) as exc:
        load_config(overlay, root=REPO)
    assert "teacher.candidates_per_promt: unknown key" in str(exc.value)


def test_bad_value_names_value_and_allowed_range(tmp_path: Path):
    overlay = tmp_path / "bad.yaml"
    overlay.write_text("teacher:\n  candidates_per_prompt: 1\n")
    with pytest.raises(ConfigError) as exc:
        load_config(overlay, root=REPO)
    message = str(exc.value)
    assert "teacher.candidates_per_prompt = 1" in message
    assert "(allowed: 2 <= value <= 16)" in message
    assert str(overlay) in message


def test_dimension_weights_must_match_the_dimensions():
    with pytest.raises(ConfigError, match=r"missing \[\].*unknown \['kindness'\]"):
        load_config(root=REPO, overrides={"preferences": {"dimension_weights": {"kindness": 1.0}}})


def test_the_online_settings_are_checked_together():
    with pytest.raises(ConfigError, match=r"freeze_below 0.4 <= rollback_below 0.3 <= skip_below 0.5 must hold"):
        load_config(root=REPO, overrides={"online": {"freeze_below": 0.4, "rollback_below": 0.3, "skip_below": 0.5}})
    with pytest.raises(ConfigError, match=r"social_dimensions names \['warmth'\]"):
        load_config(root=REPO, overrides={"replay": {"social_dimensions": ["empathy", "warmth"]}})
    with pytest.raises(ConfigError, match=r"online.memory_folder data/notes is not among policy.dual.memory_files"):
        load_config(root=REPO, overrides={"online": {"memory_folder": "data/notes"}})
    with pytest.raises(ConfigError, match=r"replay.recent_fraction = 1.5"):
        load_config(root=REPO, overrides={"replay": {"recent_fraction": 1.5}})


def test_null_in_an_overlay_means_none(tmp_path: Path):
    """`key: null` switches an optional setting off; on a required one it is an error naming the key."""
    overlay = tmp_path / "off.yaml"
    overlay.write_text("preferences:\n  guard_dimension: null\n")
    assert load_config(root=REPO).preferences.guard_dimension == "harm_avoidance"
    assert load_config(overlay, root=REPO).preferences.guard_dimension is None
    overlay.write_text("teacher:\n  max_new_tokens: null\n")
    with pytest.raises(ConfigError, match=r"teacher.max_new_tokens = None"):
        load_config(overlay, root=REPO)


def test_every_default_lives_in_one_place():
    """A setting config/hominem.yaml gives has no pydantic default to disagree with it; defaults stay only
    for keys the file leaves out (optional fields of list items such as a teacher style's `weak`)."""
    import typing

    import yaml
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    from hominem_pipeline.core.config import HominemConfig

    twice = []

    def walk(model, node, path):
        for name, field in model.model_fields.items():
            here = f"{path}.{name}" if path else name
            if (
                isinstance(node, dict)
                and name in node
                and (field.default is not PydanticUndefined or field.default_factory is not None)
            ):
                twice.append(here)
            for sub in typing.get_args(field.annotation) or (field.annotation,):
                value = node.get(name) if isinstance(node, dict) else None
                if (
                    isinstance(sub, type) and issubclass(sub, BaseModel) and not isinstance(value, list)
                ):  # list items may leave fields out
                    walk(sub, value, here)

    walk(HominemConfig, yaml.safe_load((REPO / "config" / "hominem.yaml").read_text()), "")
    assert twice == []


def test_health_weights_must_sum_to_one():
    with pytest.raises(ConfigError, match="sum to 1"):
        load_config(
            root=REPO,
            overrides={"health": {"weights": {"dcs": 0.9, "gvs": 0.15, "mss": 0.25, "cdrs": 0.20, "lrps": 0.15}}},
        )


def test_missing_and_malformed_files_are_reported(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", root=REPO)
    broken = tmp_path / "broken.yaml"
    broken.write_text("teacher: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken, root=REPO)


def test_an_overlay_extends_others_and_sets_only_what_it_adds(tmp_path: Path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "hominem.yaml").write_text((REPO / "config" / "hominem.yaml").read_text())
    (tmp_path / "config" / "a.yaml").write_text("teacher:\n  candidates_per_prompt: 6\n  max_new_tokens: 40\n")
    (tmp_path / "config" / "b.yaml").write_text("extends: config/a.yaml\nteacher:\n  max_new_tokens: 50\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: [config/b.yaml]\nprompts:\n  per_partition: 7\n")
    cfg = load_config(child, root=tmp_path)
    assert (cfg.teacher.candidates_per_prompt, cfg.teacher.max_new_tokens, cfg.prompts.per_partition) == (6, 50, 7)


def test_extends_errors_name_the_file_and_the_fix(tmp_path: Path):
    missing = tmp_path / "missing.yaml"
    missing.write_text("extends: config/nope.yaml\n")
    with pytest.raises(
        ConfigError, match=r"extends config/nope.yaml, which does not exist.*relative to the project root"
    ):
        load_config(missing, root=REPO)
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: {a: 1}\n")
    with pytest.raises(ConfigError, match=r"`extends:` must be a path or a list of paths"):
        load_config(bad, root=REPO)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "hominem.yaml").write_text((REPO / "config" / "hominem.yaml").read_text())
    (tmp_path / "config" / "x.yaml").write_text("extends: config/y.yaml\n")
    (tmp_path / "config" / "y.yaml").write_text("extends: config/x.yaml\n")
    with pytest.raises(ConfigError, match=r"extends itself .*x.yaml -> .*y.yaml -> .*x.yaml.*remove the loop"):
        load_config(tmp_path / "config" / "x.yaml", root=tmp_path)


def test_pairs_against_the_student_need_the_reward_model_to_rank_them(tmp_path: Path):
    overlay = tmp_path / "student.yaml"
    overlay.write_text("preferences:\n  against_student: true\n  rank_by: teacher\n")
    with pytest.raises(
        ConfigError, match=r"against_student needs preferences.rank_by: reward_model.*rank_by is 'teacher'"
    ):
        load_config(overlay, root=REPO)
    overlay.write_text("preferences:\n  against_student: true\n  rank_by: reward_model\n")
    assert load_config(overlay, root=REPO).preferences.against_student


def test_set_assignments_are_dotted_keys_with_yaml_values(tmp_path: Path):
    from hominem_pipeline.core.config.loader import parse_assignments, write_set_overlay

    sets = parse_assignments(
        [
            "policy.mode=dual",
            "policy.beta=0.3",
            "preferences.guard_dimension=null",
            "prompts.categories=[factual, creative]",
        ]
    )
    assert sets == {
        "policy": {"mode": "dual", "beta": 0.3},
        "preferences": {"guard_dimension": None},
        "prompts": {"categories": ["factual", "creative"]},
    }
    with pytest.raises(ConfigError, match="write KEY=VALUE"):
        parse_assignments(["policy.beta"])
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "hominem.yaml").write_text((REPO / "config" / "hominem.yaml").read_text())
    (tmp_path / "mine.yaml").write_text("teacher:\n  candidates_per_prompt: 6\n")
    overlay = write_set_overlay(tmp_path / "mine.yaml", sets, root=tmp_path)
    assert overlay.parent == tmp_path / "data" / "overlays"
    cfg = load_config(overlay, root=tmp_path)
    assert (cfg.policy.mode, cfg.teacher.candidates_per_prompt, cfg.preferences.guard_dimension) == ("dual", 6, None)
    with pytest.raises(ConfigError, match="policy.beta = -1"):
        write_set_overlay(None, parse_assignments(["policy.beta=-1"]), root=tmp_path)


def test_every_setting_says_what_it_means():
    """Each key, sections included, carries a `Field(description=...)`: `hominem config` and the errors
    on a bad value show it."""
    from hominem_pipeline.core.config.loader import describe

    rows = describe(load_config(root=REPO), [""])
    assert len(rows) > 150
    assert [r.key for r in rows if len(r.meaning) < 10] == []
