import pytest

from hominem_pipeline.core.config_loader import load_config
from hominem_pipeline.core.retrain import DataCounts, should_retrain
from hominem_pipeline_tests.conftest import REPO

CFG = load_config(root=REPO).retrain


@pytest.mark.parametrize(
    "conversations, pairs, expected",
    [
        (500, 0, True),  # memory channel full
        (0, 200, True),  # reward channel full
        (250, 100, True),  # both at 50%
        (499, 99, False),
        (249, 199, False),
        (0, 0, False),
    ],
)
def test_thresholds_follow_the_design(conversations, pairs, expected):
    assert should_retrain(DataCounts(conversations, pairs), CFG).retrain is expected


def test_counts_since_the_last_retrain_never_go_negative():
    assert DataCounts(600, 50).since(DataCounts(100, 80)) == DataCounts(500, 0)
