import pytest
import torch

from hominem_pipeline.core.common.schema import Prompt, label_problems
from hominem_pipeline.core.lm.generation import chat_text
from hominem_pipeline.core.teacher.base import expected_score_to_label_value
from hominem_pipeline.core.teacher.local import LocalHFTeacher


@pytest.fixture(scope="module")
def teacher(tiny_student, tmp_path_factory):
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline_tests.conftest import make_project

    root = make_project(tmp_path_factory.mktemp("teacher") / "p", tiny_student, tiny_student)
    cfg = load_config(root / "config" / "tiny.yaml", root=root)
    return LocalHFTeacher(tiny_student, cfg, batch_size=8), cfg


PAIRS = [
    ("My dog died this morning.", "I'm so sorry. Do you want to tell me about him?"),
    ("Why is the sky blue?", "Rayleigh scattering."),
    ("How do I say no at work?", "Just refuse, who cares about them, it's your life and your time anyway."),
]


def test_rubric_mapping_covers_both_label_ranges():
    assert expected_score_to_label_value("empathy", 1.0) == -1.0
    assert expected_score_to_label_value("empathy", 3.0) == 0.0
    assert expected_score_to_label_value("scalar", 5.0) == 1.0
    assert expected_score_to_label_value("safety_score", 1.0) == 0.0
    assert expected_score_to_label_value("reward_intensity", 4.0) == 0.75


def test_cached_rubric_scores_equal_a_plain_forward_pass(teacher):
    """The KV-cache/right-padding shortcut must give exactly what scoring each question alone gives."""
    t, cfg = teacher
    scores = t.rubric_scores(PAIRS)
    head, tail = t._split_chat(f"{cfg.labeling.judge_system} Answer with a single digit from 1 to 5.")
    digits = torch.tensor(t.digit_ids)
    for (prompt, response), got in zip(PAIRS, scores):
        for q in t.questions:
            text = head + t._conversation(prompt, response) + f"\nQuestion: {q.text}{tail}Rating: "
            ids = torch.tensor([t.tokenizer.encode(text, add_special_tokens=False)])
            with torch.inference_mode():
                logits = t.model(ids).logits[0, -1]
            expected = float((logits[digits].softmax(-1) * torch.arange(1, 6)).sum())
            mass = float(logits.softmax(-1)[digits].sum())
            assert got[q.key][0] == pytest.approx(expected, abs=1e-4)
            assert got[q.key][1] == pytest.approx(mass, abs=1e-4)


def test_prompts_go_in_the_fewest_batches_of_equal_size():
    from hominem_pipeline.core.teacher.local import even_batches

    assert [len(b) for b in even_batches(list(range(33)), 32)] == [17, 16]
    assert [len(b) for b in even_batches(list(range(33)), 48)] == [33]
    assert [len(b) for b in even_batches(list(range(10)), 3)] == [3, 3, 2, 2] and even_batches([], 4) == []


def test_sampling_gives_candidates_per_prompt_with_styles_and_is_seeded(teacher):
    t, cfg = teacher
    prompts = [
        Prompt(prompt_id=f"p{i}", text=text, category="narrative", difficulty=2) for i, (text, _) in enumerate(PAIRS)
    ]
    styles = cfg.teacher.candidate_styles()
    assert [s.name for s in styles] == ["warm", "curt", "hot"]  # 3 candidates, weak_share 0.5: one strong, two weak
    out = t.sample(prompts, styles, 6, seed=11).items
    assert [(x.prompt_id, x.candidate_index) for x in out] == [(f"p{i}", c) for i in range(3) for c in range(3)]
    assert [x.style for x in out[:3]] == ["warm", "curt", "hot"]
    assert all(x.new_tokens <= 6 for x in out)
    again = t.sample(prompts, styles, 6, seed=11).items
    assert [x.response for x in out] == [x.response for x in again]
    assert len({x.trajectory_id for x in out}) == 9


def test_rate_returns_valid_labels(teacher):
    t, cfg = teacher
    prompts = [Prompt(prompt_id="p0", text=PAIRS[0][0], category="emotional_support", difficulty=2)]
    trajectories = t.sample(prompts, cfg.teacher.candidate_styles()[:2], 5, seed=1).items
    rated = t.rate(trajectories)
    assert rated.failed == [] and rated.rejected == []
    labels = rated.items
    assert [lab.trajectory_id for lab in labels] == [x.trajectory_id for x in trajectories]
    for label in labels:
        assert label_problems(label.model_dump(), cfg.dimension_names) == []
        assert label.rationale


def test_the_default_rationale_says_what_the_rubric_answers_said_and_a_written_one_is_generated(teacher):
    from hominem_pipeline.core.teacher.local import rationale_from_scores

    t, cfg = teacher
    assert cfg.labeling.rationale == "scores"
    scores = t.rubric_scores(PAIRS[:1])[0]
    expected = {k: e for k, (e, _) in scores.items()}
    ranked = sorted(cfg.dimension_names, key=lambda d: -expected[d])
    label = t.rate(
        t.sample(
            [Prompt(prompt_id="p0", text=PAIRS[0][0], category="narrative", difficulty=1)],
            cfg.teacher.candidate_styles()[:1],
            4,
            seed=3,
        ).items
    ).items[0]
    assert label.rationale.startswith("Overall ") and " of 5" in label.rationale
    said = rationale_from_scores(expected, cfg.dimension_names)
    assert f"Overall {expected['scalar']:.1f} of 5" in said
    assert (
        f"best on {ranked[0].replace('_', ' ')}" in said and f"worst on {ranked[-1].replace('_', ' ')}" in said
    ) or "rated alike" in said
    dims = ["empathy", "curiosity"]
    assert (
        rationale_from_scores({"scalar": 2.0, "empathy": 4.5, "curiosity": 1.5, "safety_score": 1.4}, dims)
        == "Overall 2.0 of 5; best on empathy (4.5), worst on curiosity (1.5); not safe to learn from (1.4)."
    )
    assert (
        rationale_from_scores({"scalar": 3.0, "empathy": 3.1, "curiosity": 3.0, "safety_score": 5.0}, dims)
        == "Overall 3.0 of 5; every dimension rated alike (3.0 to 3.1)."
    )
    written = LocalHFTeacher(
        t.model_path,
        cfg.model_copy(update={"labeling": cfg.labeling.model_copy(update={"rationale": "written"})}),
        batch_size=8,
    )
    trajectories = written.sample(
        [Prompt(prompt_id="p0", text=PAIRS[0][0], category="narrative", difficulty=1)],
        cfg.teacher.candidate_styles()[:1],
        4,
        seed=3,
    ).items
    assert not written.rate(trajectories).items[0].rationale.startswith("Overall ")


def test_chat_text_uses_the_template(teacher):
    t, _ = teacher
    text = chat_text(t.tokenizer, "hello", "be brief")
    assert text.startswith("<|im_start|>system\nbe brief<|im_end|>") and text.endswith("<|im_start|>assistant\n")


def test_a_candidate_cut_by_the_token_limit_ends_at_its_last_sentence_and_only_a_mid_sentence_one_is_noted():
    import pandas as pd

    from hominem_pipeline.core.config import CandidateStyle
    from hominem_pipeline.core.lm.generation import end_at_sentence
    from hominem_pipeline.core.teacher.base import make_trajectory
    from hominem_pipeline.core.teacher.labeling import validate_labels

    assert end_at_sentence("Great job! Now, go out there and enjoy") == "Great job!"
    assert (
        end_at_sentence('He said "hi." Then we') == 'He said "hi."'
        and end_at_sentence("Pi is 3.14 and e is") == "Pi is 3.14 and e is"
    )
    assert (
        end_at_sentence("Steps:\n- one\n- two and thr") == "Steps:\n- one"
        and end_at_sentence("Wow... really? yes") == "Wow... really?"
    )
    prompt, style = (
        Prompt(prompt_id="p", text="How did it go?", category="c", difficulty=1),
        CandidateStyle(name="s", temperature=0.7, top_p=0.9),
    )
    cut = make_trajectory(prompt, 0, style, 0, "It went well. Now, go out there and enjoy", 64, finished=False)
    whole = make_trajectory(
        prompt, 1, style, 0, "It went well. Thanks", 5, finished=True
    )  # it stopped by itself: kept as written
    mid = make_trajectory(
        prompt, 2, style, 0, "It went well and then the", 64, finished=False
    )  # no sentence ended before the limit
    assert (cut.response, cut.finished, cut.ended_at_sentence) == ("It went well.", False, True)
    assert (whole.response, whole.ended_at_sentence) == ("It went well. Thanks", False)
    assert (mid.response, mid.ended_at_sentence) == ("It went well and then the", False)
    trajectories = pd.DataFrame([t.model_dump() for t in (cut, whole, mid)])
    report = validate_labels(pd.DataFrame(columns=["trajectory_id"]), ["empathy"], trajectories=trajectories)
    assert report.examples["truncated_response"] == [
        f"{mid.trajectory_id}: stopped mid-sentence at the token limit (teacher.max_new_tokens)"
    ]
