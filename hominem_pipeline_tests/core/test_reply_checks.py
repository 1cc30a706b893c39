"""The reply checks (core/evaluation/reply_checks): IFEval's checkers, the scores of recall and facts, the sameness
measures, the sets' validation, and two models' replies judged under the paired rule."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.reply_checks import judge_replies, load_reply_checks
from hominem_pipeline.core.evaluation.reply_checks.instructions import followed
from hominem_pipeline.core.evaluation.reply_checks.scoring import (
    distinct_bigrams,
    jackknife_difference,
    opening_unlike_others,
    says,
    without_stock_phrase,
)
from hominem_pipeline.core.evaluation.reply_checks.sets import read_set
from hominem_pipeline_tests.conftest import REPO


@pytest.mark.parametrize(
    ("reply", "instruction", "strict", "loose"),
    [
        ("Waves come and go", ("punctuation:no_comma", {}), True, True),
        ("Waves, salt", ("punctuation:no_comma", {}), False, False),
        ("the sea is calm", ("change_case:english_lowercase", {}), True, True),
        ("Sure!\nthe sea is calm", ("change_case:english_lowercase", {}), False, True),  # loose drops the first line
        ("* one\n* two\n* three", ("detectable_format:number_bullet_lists", {"num_bullets": 3}), True, True),
        ("* one\n- two", ("detectable_format:number_bullet_lists", {"num_bullets": 3}), False, False),
        ("<<Rain>> It rains.", ("detectable_format:title", {}), True, True),
        ("Bye.\nP.S. call me", ("detectable_content:postscript", {"postscript_marker": "P.S."}), True, True),
        ('"Be kind."', ("startend:quotation", {}), True, True),
        ("Sleep early. Have fun!", ("startend:end_checker", {"end_phrase": "Have fun!"}), True, True),
        ("Sleep early. Have fun!\n**Done**", ("startend:end_checker", {"end_phrase": "Have fun!"}), False, True),
        ("one two three", ("length_constraints:number_words", {"relation": "less than", "num_words": 4}), True, True),
        ("one two three", ("length_constraints:number_words", {"relation": "at least", "num_words": 4}), False, False),
        (
            "a tree and a Tree",
            ("keywords:frequency", {"keyword": "tree", "frequency": 2, "relation": "at least"}),
            1,
            1,
        ),
        ("no sun today", ("keywords:forbidden_words", {"forbidden_words": ["sun"]}), False, False),
        ("sunny today", ("keywords:forbidden_words", {"forbidden_words": ["sun"]}), True, True),
        ('```json\n{"a": 1}\n```', ("detectable_format:json_format", {}), True, True),
        ("My answer is no.", ("detectable_format:constrained_response", {}), True, True),
        ("Dear [name] at [place]", ("detectable_content:number_placeholders", {"num_placeholders": 2}), True, True),
        ("What is a hobby? Knitting.", ("combination:repeat_prompt", {"prompt_to_repeat": "What is a hobby?"}), 1, 1),
        ("", ("punctuation:no_comma", {}), False, False),  # an empty reply follows nothing
    ],
)
def test_ifeval_checkers_give_the_harness_verdicts(reply, instruction, strict, loose):
    verdict = followed(reply, [instruction])
    assert verdict == {"strict": [bool(strict)], "loose": [bool(loose)]}


def test_recall_and_facts_count_a_whole_word_answer_in_any_case():
    assert says("Your name is ana, right?", ["Ana"]) and says("You have 5 plants", ["5", "five"])
    assert not says("Anastasia is lovely", ["Ana"]) and not says("I have 15 of them", ["5"])
    assert says("It is H2O.", ["H2O"]) and says("Buenos Aires!", ["Buenos Aires"])


def test_sameness_sees_replies_that_open_alike_use_stock_phrases_and_repeat_their_bigrams():
    generic = ["I'm sorry to hear that. It's important to take care of yourself."] * 6
    varied = [
        "Congratulations on the new job!",
        "Try a pinch of salt in the batter.",
        "Octopuses have three hearts.",
        "Start with three chords and a metronome.",
        "Maybe ask her over coffee what changed.",
        "Check the stack trace first.",
    ]
    assert opening_unlike_others(generic).tolist() == [0.0] * 6 and opening_unlike_others(varied).mean() == 1.0
    assert without_stock_phrase(generic).mean() == 0.0 and without_stock_phrase(varied).mean() == 1.0
    assert distinct_bigrams(generic) == pytest.approx(11 / 66) and distinct_bigrams(varied) == 1.0
    difference, se = jackknife_difference(generic, varied)
    assert difference == pytest.approx(11 / 66 - 1.0) and np.isfinite(se)


def test_a_bad_set_is_refused_with_its_file_line_and_fix(tmp_path):
    bad = tmp_path / "facts.jsonl"
    bad.write_text(json.dumps({"id": "a", "question": "Capital of Italy?", "answers": ["Rome"]}) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"facts.jsonl:2: not a JSON object"):
        read_set("facts", bad)
    bad.write_text(json.dumps({"id": "a", "question": "Q?", "answers": []}) + "\n")
    with pytest.raises(ValueError, match=r'facts.jsonl:1: "answers" must be a non-empty list'):
        read_set("facts", bad)
    bad.write_text(json.dumps({"id": "a", "prompt": "P", "instruction_id_list": ["x:y"], "kwargs": [{}]}) + "\n")
    with pytest.raises(ValueError, match=r"unknown instruction id\(s\) \['x:y'\]"):
        read_set("instructions", bad)
    twice = json.dumps({"id": "a", "question": "Q?", "answers": ["b"]})
    bad.write_text(f"{twice}\n{twice}\n")
    with pytest.raises(ValueError, match="the id 'a' is used twice"):
        read_set("facts", bad)
    with pytest.raises(FileNotFoundError, match="evaluation.reply_checks.facts: no file"):
        read_set("facts", tmp_path / "none.jsonl")


def test_the_shipped_sets_load_and_a_model_that_forgets_and_repeats_itself_is_refused_on_each_figure():
    """The project's sets, judged for a candidate that never says the fact back, answers no question, keeps no
    instruction and answers every message with one stock reply, against a reference that does all of it: every
    checked figure refuses, each with its +- and the rule; and a candidate equal to its reference passes them all."""
    cfg = load_config(root=REPO)
    sets = load_reply_checks(cfg)
    assert {c: len(v) for c, v in sets.items.items()} == {
        "recall": 240,
        "facts": 240,
        "instructions": 200,
        "sameness": 40,
    }
    assert {i.kind for i in sets.items["recall"]} == {"name", "place", "pet", "number"}
    memory = {json.loads(line)["prompt"] for line in (REPO / "config/sft/memory.jsonl").read_text().splitlines()}
    assert not memory & {i.prompt for i in sets.items["facts"]}  # facts the memory files do not hold
    training = " ".join(p.read_text() for p in (REPO / "config" / "sft").glob("*.jsonl"))
    stated = {i.answers[0] for i in sets.items["recall"] if i.kind in ("name", "place", "pet")}
    assert not {a for a in stated if re.search(rf"\b{a}\b", training)}  # no recall item is trained on
    good = {
        "recall": [i.answers[0] for i in sets.items["recall"]],
        "facts": [f"It is {i.answers[0]}." for i in sets.items["facts"]],
        "instructions": [_kept(i) for i in sets.items["instructions"]],
        "sameness": [f"Reply number {n} about {i.prompt}" for n, i in enumerate(sets.items["sameness"])],
    }
    generic = "I'm sorry to hear that. It's important to take care of yourself."
    bad = {c: [generic] * len(v) for c, v in sets.items.items()}
    checks, figures = judge_replies(sets, bad, good, cfg.health, "the base")
    refused = {c.name for c in checks if c.refused}
    assert refused - {"instructions"} == {"recall", "facts", "openings", "stock_phrases", "distinct_bigrams"}
    recall = next(c for c in checks if c.name == "recall")
    assert recall.candidate == 0.0 and recall.reference == 1.0 and "+-" in recall.reason()
    assert figures["recall"]["by_kind"]["name"] == [0.0, 1.0]
    same, _ = judge_replies(sets, good, good, cfg.health, "the base")
    assert not any(c.refused for c in same)


def _kept(item) -> str:
    """A reply keeping the item's instructions where a simple one can."""
    ids = [i for i, _ in item.instructions]
    if ids == ["punctuation:no_comma"]:
        return "Spring is mild and green and full of birds"
    if ids == ["startend:quotation"]:
        return '"Be kind to yourself."'
    return "ok"


def test_the_gate_asks_both_sides_the_reply_checks_keeps_their_replies_and_reads_them_back(
    tiny_student, tiny_encoder, project, tmp_path
):
    """On the tiny student: the live gate asks candidate and live adapter the reply checks' items (the tiny
    config's first 6 of each), reports every figure with its +- under `checks`, keeps both sides' replies in the
    reply cache under their versions, and a second gate of the same pair reads them back instead of generating."""
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.evaluation.reply_checks import load_reply_checks
    from hominem_pipeline.core.lm.models import load_student
    from hominem_pipeline.core.online.gate import (
        GateHealth,
        GateModels,
        GateQuestions,
        GateSides,
        run_gate,
    )
    from hominem_pipeline.core.online.reply_cache import ReplyCache
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline_tests.core.test_people_pairs import CHOSEN, REJECTED, _adapter_toward
    from hominem_pipeline_tests.core.test_reward_model import toy_reward_model

    toy_reward_model(tiny_encoder, tmp_path / "rm")
    cfg = load_config(
        project / "config" / "tiny.yaml",
        root=project,
        overrides={"health": {"deploy_threshold": 0.0}, "evaluation": {"memory_probe": False}},
    )
    sets = load_reply_checks(cfg)
    assert {c: len(v) for c, v in sets.items.items()} == {
        c: 6 for c in ("recall", "facts", "instructions", "sameness")
    }
    one, two = (
        _adapter_toward(tiny_student, CHOSEN, tmp_path / "one"),
        _adapter_toward(tiny_student, REJECTED, tmp_path / "two"),
    )
    cache = ReplyCache(tmp_path / "replies", cfg)

    def gate():
        base, tokenizer = load_student(tiny_student)
        return run_gate(
            GateSides(two, one, "two", "one"),
            cfg=cfg,
            models=GateModels(base, tokenizer, RewardModel.load(tmp_path / "rm")),
            questions=GateQuestions(["Hi"], reply_checks=sets),
            health=GateHealth(1.0),
            cache=cache,
        )

    report = gate()
    checks = report.figures["checks"]
    assert set(checks) >= {"recall", "facts", "instructions", "openings", "stock_phrases", "distinct_bigrams"}
    for name in ("recall", "facts", "instructions", "openings", "stock_phrases", "distinct_bigrams"):
        c = checks[name]
        assert c["items"] == 6 and c["reference_name"] == "one" and c["confidence"] == cfg.health.confidence
        assert c["refused"] == (c["upper_bound"] < -c["margin"])
        assert (f"health.reply_margins.{name}" in " ".join(report.reasons)) == c["refused"]
    assert "sameness" in report.figures["reply_checks"] and "recall" in report.summary()
    kept = {v: {k for k in cache.get(v) if k.startswith("check:")} for v in ("one", "two")}
    assert len(kept["one"]) == len(kept["two"]) == 24
    before = {v: (tmp_path / "replies" / f"{v}.json").stat().st_mtime_ns for v in ("one", "two")}
    again = gate()
    assert again.figures["checks"]["recall"] == checks["recall"]  # greedy, read back: the same figures
    assert {v: (tmp_path / "replies" / f"{v}.json").stat().st_mtime_ns for v in ("one", "two")} == before


def test_the_base_s_replies_ship_with_the_project_and_a_fresh_cache_reads_them(project, tmp_path):
    """`ship_base_replies` writes the base's replies the reply cache holds under the shipped features folder, keyed by
    the decoding; a fresh clone's empty cache reads them as the base's (never as an adapter's), its own replies win,
    and a file of another decoding is not read."""
    import json

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.reply_cache import ReplyCache

    cfg = load_config(project / "config" / "tiny.yaml", root=project)
    ran = ReplyCache(tmp_path / "ran", cfg)
    ran.put(None, {"check:recall:1": "Your name is Ana.", "Hi": "Hello!"})
    ran.put("v1", {"Hi": "Hey there"})
    path, count = ran.ship_base_replies()
    assert count == 2 and path.parent == project / "config" / "human" / "features" and ran.key in path.name
    fresh = ReplyCache(tmp_path / "fresh", cfg)
    assert fresh.get(None) == {"check:recall:1": "Your name is Ana.", "Hi": "Hello!"} and fresh.get("v1") == {}
    fresh.put(None, {"Hi": "Good day."})
    assert fresh.get(None)["Hi"] == "Good day." and fresh.get(None)["check:recall:1"] == "Your name is Ana."
    other = load_config(
        project / "config" / "tiny.yaml", root=project, overrides={"evaluation": {"max_new_tokens": 9}}
    )
    assert ReplyCache(tmp_path / "other", other).get(None) == {}  # another decoding: not these replies
    bigger = load_config(project / "config" / "tiny.yaml", root=project, overrides={"evaluation": {"batch_size": 7}})
    assert ReplyCache(tmp_path / "bigger", bigger).get(None)["Hi"] == "Hello!"  # the batch size decodes the same
    path.write_text(json.dumps({"decoding": "someone-else", "replies": {"Hi": "x"}}))
    assert ReplyCache(tmp_path / "fresh2", cfg).get(None) == {}


def test_the_project_ships_the_base_s_replies_for_its_default_decoding():
    """A fresh clone's first evaluation reads the base's side of every reply check from the shipped copy, under the
    default decoding and the student the shipped features were computed on (their MANIFEST's digest): a change of the
    default decoding (a token limit, the repetition penalty) that leaves it behind would make every first day
    generate them again (`hominem data ship-features --base-replies` writes them anew)."""
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.evaluation.reply_checks import load_reply_checks
    from hominem_pipeline.core.online.reply_cache import SHIPPED_BASE_REPLIES, decoding_key
    from hominem_pipeline.core.reward.feature_cache import SHIPPED_FEATURES

    cfg = load_config(root=Path(__file__).resolve().parents[2])
    features = cfg.path(SHIPPED_FEATURES)
    manifest = json.loads((features / "MANIFEST.json").read_text())
    (student,) = {e["student_digest"] for e in manifest["files"].values() if "student_digest" in e}
    key = decoding_key(cfg.evaluation, student)
    shipped = json.loads((features / f"{key}-{SHIPPED_BASE_REPLIES}").read_text())
    items = sum(len(v) for v in load_reply_checks(cfg).items.values())
    assert shipped["decoding"] == key and sum(k.startswith("check:") for k in shipped["replies"]) >= items
