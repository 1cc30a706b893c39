"""Asking by expected information (`attunement.selection.method`: epig, bald, design): the service's question desk,
on a real engine serving a reward model with a people's score, asks the pair one answer would tell most about, says
why in words, and does not ask again what this person's choices already settle."""

import pandas as pd
import pytest

from hominem_pipeline.core.attune.questions import QUESTIONS, write_question_file
from hominem_pipeline.core.online.events import new_turn
from hominem_pipeline.core.online.ledger import Ledger
from hominem_pipeline.serving.engine import Engine, EngineSettings
from hominem_pipeline.serving.questions import QuestionDesk

SETTLED = [  # pairs like the ones this person keeps answering: the kind reply
    (f"My {pet} is sick and I am scared.", "That sounds frightening. Have you been able to call a vet?", "Pets die.")
    for pet in ("cat", "dog", "rabbit", "parrot", "hamster", "horse")
]
OPEN = [  # pairs of another kind, never answered
    ("What is the capital of France?", "Paris.", "The capital of France is Berlin, I think."),
    ("How many legs does a spider have?", "Eight.", "Spiders have six legs."),
    ("Which planet is closest to the sun?", "Mercury.", "Venus is closest, as far as I know."),
]


@pytest.fixture(scope="module")
def people_reward_model(tiny_student, tiny_encoder, tmp_path_factory):
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline_tests.core.test_reward_model import DIMS, people_cfg, toy_labels

    out = tmp_path_factory.mktemp("people-rm")
    pairs = pd.DataFrame(
        [
            {"prompt": f"Something sad happened, number {i}.", "chosen": k, "rejected": c, "heads": True}
            for i, (_, k, c) in enumerate(SETTLED * 3)
        ]
    )
    train_reward_model(
        toy_labels(),
        pairs,
        sources=RewardSources(tiny_student, judge_system="J.", people_encoder=tiny_encoder, feature_cache=out / "c"),
        cfg=people_cfg(people_score={"encoder": "encoder", "max_length": 64}),
        dimensions=DIMS,
        out_dir=out / "rm",
        seed=0,
        data_digest="p",
        date="2026-11-20",
    )
    return out / "rm", DIMS


def answered_like_settled(ledger: Ledger, rater: str) -> None:
    """The person chose the kind reply over the curt one on every settled pair, three times each, in chat (not as
    questions)."""
    for i, (prompt, kind, curt) in enumerate(SETTLED * 3):
        messages = [{"role": "user", "content": prompt}]
        a = new_turn(rater, messages, kind, id=f"k{i}", model="hominem")
        b = new_turn(rater, messages, curt, id=f"c{i}", model="hominem")
        ledger.add(a)
        ledger.add(b)
        choice = {
            "kind": "choice",
            "id": f"x{i}",
            "time": "2026-11-20T09:00:00+00:00",
            "rater": rater,
            "chosen": a.id,
            "rejected": b.id,
            "strength": "clear",
        }
        ledger.load([choice])


@pytest.mark.parametrize("method", ["epig", "bald", "design"])
def test_the_desk_asks_what_this_persons_choices_have_not_settled(method, tiny_student, people_reward_model, project):
    from hominem_pipeline.core.config.loader import load_config

    path, dims = people_reward_model
    overrides = {"attunement": {"selection": {"method": method, "random_share": 0.0, "teacher_candidates": False}}}
    cfg = load_config(project / "config" / "tiny.yaml", root=project, overrides=overrides)
    write_question_file(
        pd.DataFrame([{"prompt": p, "chosen": a, "rejected": b} for p, a, b in SETTLED[:3] + OPEN]),
        cfg.data_dir / cfg.serving.log_dir / QUESTIONS,
        "test",
    )
    engine = Engine(
        tiny_student,
        None,
        path,
        EngineSettings(max_batch_size=2, batch_wait_ms=10, max_queue=8, repetition_penalty=1.0),
    )
    try:
        ledger = Ledger(dims)
        answered_like_settled(ledger, "ana")
        desk = QuestionDesk(cfg, engine, ledger, seed=0)
        asked = {rater: first_asked(desk, ledger, rater, 3) for rater in ("ana", "ben")}
    finally:
        engine.close()
    first = asked["ana"][0]
    assert first["by"] == "information" and set(first["parts"]) == {"information", "settles", "p_a"}
    assert 0.0 < first["value"] <= 1.0 and 0.0 <= first["parts"]["settles"] <= 1.0
    assert first["reason"].startswith("asked because the model") and "would settle about" in first["reason"]
    assert first["a_reward"] is not None and first["p_a"] == first["parts"]["p_a"]
    # what her choices settled is not asked first (bald and design: it comes last); someone with no answers yet is
    # asked one of those early on
    assert first["question"].prompt in {p for p, _, _ in OPEN}
    if method == "design":
        assert "of its doubt over the pairs you could be asked" in first["reason"]
    if method in ("bald", "design"):
        assert {f["question"].prompt for f in asked["ana"]} == {p for p, _, _ in OPEN}
    assert {f["question"].prompt for f in asked["ben"]} & {p for p, _, _ in SETTLED}
    assert all(f["by"] == "information" and f["value"] > 0.0 for f in asked["ben"])


def first_asked(desk: QuestionDesk, ledger: Ledger, rater: str, count: int) -> list[dict]:
    """The first `count` questions asked of `rater`, each answered (reply a) before the next is asked."""
    asked = []
    for k in range(count):
        found = desk.next(rater)
        q = found["question"]
        messages = [{"role": role, "content": text} for role, text in q.messages]
        turns = [
            new_turn(rater, messages, reply, id=i, model="question") for i, reply in zip(q.turn_ids(), (q.a, q.b))
        ]
        for turn in turns:
            ledger.add(turn)
        choice = {"kind": "choice", "id": f"{rater}{k}", "time": "2026-11-20T09:10:00+00:00", "rater": rater}
        ledger.load([choice | {"chosen": turns[0].id, "rejected": turns[1].id, "strength": "clear"}])
        asked.append(found)
    return asked
