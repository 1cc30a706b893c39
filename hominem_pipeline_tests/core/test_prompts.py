from pathlib import Path

import pytest

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.teacher.prompts import (
    PromptFileError,
    load_seed_prompts,
    sample_partition,
    split_eval,
)
from hominem_pipeline_tests.conftest import REPO


@pytest.fixture(scope="module")
def seeds():
    cfg = load_config(root=REPO)
    return cfg, load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories)


def test_seed_file_covers_every_category_with_150_prompts(seeds):
    cfg, prompts = seeds
    assert len(prompts) >= 150
    assert {"reasoning", "factual", "creative"} <= set(cfg.prompts.categories)
    assert sum(bool(p.tags) for p in prompts) >= 48  # domain tags on the PRD categories at least
    counts = {c: sum(p.category == c for p in prompts) for c in cfg.prompts.categories}
    assert min(counts.values()) >= 15, counts
    assert {p.difficulty for p in prompts} == {1, 2, 3, 4, 5}


def test_eval_split_is_disjoint_stratified_and_stable(seeds):
    cfg, prompts = seeds
    train, held = split_eval(prompts, 2, seed=7)
    assert {p.prompt_id for p in train}.isdisjoint({p.prompt_id for p in held})
    assert len(held) == 2 * len(cfg.prompts.categories)
    # Adding a prompt elsewhere does not move the held-out set of the other categories.
    extra = prompts + [prompts[0].model_copy(update={"prompt_id": "new-1", "category": "narrative"})]
    _, held_again = split_eval(extra, 2, seed=7)
    assert {p.prompt_id for p in held if p.category != "narrative"} == {
        p.prompt_id for p in held_again if p.category != "narrative"
    }


def test_daily_sample_is_stratified_and_deterministic(seeds):
    cfg, prompts = seeds
    a = sample_partition(prompts, 12, seed=3)
    assert [p.prompt_id for p in a] == [p.prompt_id for p in sample_partition(prompts, 12, seed=3)]
    assert [p.prompt_id for p in a] != [p.prompt_id for p in sample_partition(prompts, 12, seed=4)]
    assert {p.category for p in a} == set(cfg.prompts.categories)
    assert len({p.prompt_id for p in a}) == 12


def test_bad_prompt_files_fail_with_the_entry(tmp_path: Path):
    f = tmp_path / "p.yaml"
    f.write_text("prompts:\n  - {id: a, category: gossip, difficulty: 2, text: hi}\n")
    with pytest.raises(PromptFileError, match="category 'gossip'"):
        load_seed_prompts(f, ["narrative"])
    f.write_text("prompts:\n  - {id: a, category: narrative, difficulty: 9, text: hi}\n")
    with pytest.raises(PromptFileError, match="entry 0"):
        load_seed_prompts(f, ["narrative"])
    f.write_text(
        "prompts:\n  - {id: a, category: narrative, difficulty: 2, text: hi}\n  - {id: a, category: "
        "narrative, difficulty: 2, text: yo}\n"
    )
    with pytest.raises(PromptFileError, match="duplicate prompt id 'a'"):
        load_seed_prompts(f, ["narrative"])
