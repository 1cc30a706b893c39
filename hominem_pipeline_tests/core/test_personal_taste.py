import numpy as np
import pytest

from hominem_pipeline.core.attune.personal import TEXT_FEATURES, PersonalModel, feature_names, text_features
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.tastes import TASTES, asks_back, has_list, is_how_to, taste, taste_share
from hominem_pipeline_tests.conftest import REPO

DIMS = tuple(load_config(root=REPO).dimension_names)  # the seven the reward model scores


def test_the_tastes_read_plain_replies_as_a_person_would():
    assert asks_back("That sounds hard. What happened next?") and asks_back('He asked "why?"')
    assert not asks_back("Is it? I think it is fine.") and not asks_back("")
    assert has_list("Try this:\n1. Rest\n2. Drink water") and has_list("- one\n- two")
    assert not has_list("- only one item") and not has_list("1990. A year.")
    assert is_how_to("How do I bake bread?") and is_how_to("Give me some tips for sleeping better")
    assert not is_how_to("I feel sad today.")
    brief = taste("brief")
    assert brief.keeps("Yes, go for it.") and not brief.keeps(" ".join(["word"] * 31)) and not brief.keeps("")
    assert TASTES["lists_for_how_to"].speaks_to("How to fix a bike?") and not TASTES["lists_for_how_to"].speaks_to(
        "Hi"
    )
    with pytest.raises(ValueError, match="taste 'terse' is not one of brief, asks_back, lists_for_how_to"):
        taste("terse")


def test_a_taste_s_share_is_over_the_messages_it_speaks_to_with_the_error_over_messages():
    lists = TASTES["lists_for_how_to"]
    messages = ["How do I plant roses?", "Hi there", "How to sleep better?", "Steps to learn French?"]
    replies = [
        ["1. Dig\n2. Plant", "Dig a hole."],
        ["- a\n- b", "Hello"],
        ["- Rest\n- Dark room", "- No screens\n- Tea"],
        ["Practise.", "Read."],
    ]
    share = taste_share(lists, messages, replies)
    assert share.messages == 3 and share.replies == 6  # the greeting is not a how-to message
    assert share.share == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert share.per_message == (0.5, 1.0, 0.0)  # each message's own share, for paired comparisons
    assert share.standard_error == pytest.approx(np.std([0.5, 1.0, 0.0], ddof=1) / np.sqrt(3))
    with pytest.raises(ValueError, match="none of the 1 messages"):
        taste_share(lists, ["Hi"], [["- a\n- b"]])


def _replies(rng: np.random.Generator, n: int) -> tuple[list[str], np.ndarray]:
    """n replies, a third ending with a question, with the reward model's outputs drawn at random beside their text
    features: (texts, (n, d) features as `reply_features` lays them out)."""
    texts = []
    for i in range(n):
        body = " ".join(["word"] * int(rng.integers(4, 60)))
        texts.append(
            body + (" How does that sound?" if rng.random() < 0.35 else ".") + ("!" if rng.random() < 0.2 else "")
        )
    scores = rng.normal(0.0, 0.3, (n, len(DIMS) + 3))
    return texts, np.concatenate([scores, text_features(texts)], 1)


def test_a_person_who_likes_to_be_asked_back_is_learned_from_twenty_choices_and_said_in_plain_words():
    """A simulated person chooses by one plain taste (the reply that asks back; a coin where both or neither do),
    against their choice one time in ten. Fitted on 20 of the pairs that could show the taste, the model predicts
    held-out choices of that person at 80% or better, names the taste first, and is sure of it."""
    rng = np.random.default_rng(0)
    names = feature_names(DIMS, people=True)
    assert names[-len(TEXT_FEATURES) :] == TEXT_FEATURES and len(names) == len(DIMS) + 3 + len(TEXT_FEATURES)
    asks = names.index("asks_back")

    def choices(count: int) -> tuple[np.ndarray, np.ndarray]:
        chosen, rejected = [], []
        while len(chosen) < count:
            _, feats = _replies(rng, 2)
            a, b = feats
            if a[asks] == b[asks]:
                continue  # the pair cannot show the taste: the person skips it
            if (a[asks] < b[asks]) != (rng.random() < 0.1):
                a, b = b, a
            chosen.append(a)
            rejected.append(b)
        return np.array(chosen), np.array(rejected)

    taught = PersonalModel.fit(names, *choices(20))
    held_chosen, held_rejected = choices(200)
    assert taught.agreement(held_chosen, held_rejected) >= 0.8
    first = taught.leading(3)[0]
    assert first.feature == "asks_back" and first.weight > 0 and first.sure > 0.95
    assert taught.describe().startswith("from 20 choices: prefers replies that end by asking something back (sure")
    ranked = taught.utility(np.stack([held_rejected[0], held_chosen[0]]))
    assert ranked[1] > ranked[0]  # a reply that asks back ranks above one that does not
    again = PersonalModel.from_dict(taught.as_dict())
    assert np.allclose(again.probability(held_chosen, held_rejected), taught.probability(held_chosen, held_rejected))


def test_before_any_choice_it_knows_nothing_and_bad_shapes_are_named():
    names = feature_names(DIMS, people=False)
    empty = PersonalModel.fit(names, np.zeros((0, len(names))), np.zeros((0, len(names))))
    assert empty.choices == 0 and "nothing learned" in empty.describe()
    assert np.allclose(empty.probability(np.ones(len(names)), np.zeros(len(names))), 0.5)
    with pytest.raises(ValueError, match=r"must both be \(choices, 14\) features"):
        PersonalModel.fit(names, np.zeros((2, 3)), np.zeros((2, 3)))


def _asks_back_choices():
    """Ten messages, and ana's ten choices of the reply that asks back over one that does not."""
    import pandas as pd

    messages = [f"I planted {n} tomatoes this week." for n in range(10)]
    return messages, pd.DataFrame(
        {
            "rater": "ana",
            "prompt": messages,
            "chosen": [f"That is lovely. How are the {n} doing?" for n in range(10)],
            "rejected": [f"That is lovely, {n} is a good number." for n in range(10)],
        }
    )


def test_a_person_s_taste_ranks_the_student_s_own_replies_into_pairs_that_keep_it(tiny_encoder, tmp_path):
    """A person who chose the reply that asks back ten times: their taste model, over a real (tiny) reward model's
    outputs and the text features, ranks the replies a sampler gives to their newest messages, and each pair it is
    sure of has the reply that asks back chosen and one that does not rejected, as replay items of source
    taste:<rater>. A person with fewer choices than min_choices adds none."""
    import pandas as pd

    from hominem_pipeline.core.online.replay import FINISHED, ITEM_COLUMNS
    from hominem_pipeline.core.online.taste_pairs import person_choices, taste_items
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline_tests.core.test_reward_model import toy_reward_model

    reward_model = RewardModel.load(toy_reward_model(tiny_encoder, tmp_path / "rm"))
    messages, ana = _asks_back_choices()
    bo = pd.DataFrame(
        {"rater": "bo", "prompt": messages[:2], "chosen": ["Nice.", "Good."], "rejected": ["Nice?", "Good?"]}
    )
    pairs = pd.concat([ana, bo], ignore_index=True)
    asked = []

    def sample(prompts, k):
        asked.append((list(prompts), k))
        return [
            [("Great work.", True), ("What will you plant next?", True), ("Great work.", True), ("Lovely.", False)][:k]
            for _ in prompts
        ]

    people = person_choices(pairs, reward_model, min_choices=5, prompts=3)
    assert [t.rater for t in people] == ["ana"] and people[0].prompts == messages[::-1][:3]
    found = taste_items(
        pairs,
        reward_model,
        sample,
        min_choices=5,
        prompts=3,
        samples=4,
        min_probability=0.6,
        now="2026-12-06T10:00:00+00:00",
    )
    items = found.items
    assert set(found.models) == {"ana"} and found.models["ana"].choices == 10
    assert asked == [(messages[::-1][:3], 4)]
    assert list(items.columns) == ITEM_COLUMNS + FINISHED and len(items) == 3
    assert set(items["source"]) == {"taste:ana"} and items["id"].is_unique
    assert all(c.endswith("?") and not r.endswith("?") for c, r in zip(items["chosen"], items["rejected"]))
    assert ((items["weight"] > 0) & (items["weight"] <= 1)).all() and (
        items["weight"] == items["reward_intensity"]
    ).all()
    none = taste_items(pairs, reward_model, sample, min_choices=50, prompts=3, samples=4, min_probability=0.6, now="t")
    assert none.items.empty and list(none.items.columns) == ITEM_COLUMNS + FINISHED and not none.models


def test_an_update_s_batch_takes_a_person_s_taste_pairs_from_the_student_s_own_samples(
    tiny_cfg, tiny_encoder, tmp_path
):
    """`updates.batch.taste_pairs` samples the (tiny) student as served to the person's newest messages and keeps at
    most `online.taste.share` of the batch, the surest first; with `min_choices` 0 it samples nothing."""
    import pandas as pd

    from hominem_pipeline.core.lm.generation import as_shown, end_at_sentence
    from hominem_pipeline.core.online.nudges import Pressure
    from hominem_pipeline.core.online.updates.batch import UpdateBatch, taste_pairs

    assert as_shown("That sounds hard. How are you", False) == ("That sounds hard.", True)
    assert as_shown("one long unfinished thought", False) == ("one long unfinished thought", False)
    assert as_shown("Done. Why?", True) == ("Done. Why?", True)
    assert as_shown("Cut right at its end. Why?", False) == ("Cut right at its end. Why?", True)  # ends at one already
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline_tests.core.test_reward_model import toy_reward_model

    reward_model = RewardModel.load(toy_reward_model(tiny_encoder, tmp_path / "rm"))
    messages = [f"Tell me about day {n}." for n in range(12)]
    pairs = pd.DataFrame(
        {
            "rater": ["ana"] * 12,
            "prompt": messages,
            "chosen": [f"Day {n} was calm. Was yours?" for n in range(12)],
            "rejected": [f"Day {n} was calm." for n in range(12)],
        }
    )
    plan = UpdateBatch(
        None, None, tmp_path / "rm", reward_model, [], [], set(), pd.DataFrame(), {}, 0, 2, 1.0, Pressure()
    )
    cfg = tiny_cfg.model_copy(
        update={
            "online": tiny_cfg.online.model_copy(
                update={"taste": tiny_cfg.online.taste.model_copy(update={"min_probability": 0.5, "share": 0.25})}
            )
        }
    )
    found = taste_pairs(cfg, pairs, plan)
    items = found.items
    assert set(found.models) == {"ana"}
    assert 0 < len(items) <= round(0.25 * cfg.online.batch_items)
    assert set(items["source"]) == {"taste:ana"} and set(items["prompt"]) <= set(messages[-cfg.online.taste.prompts :])
    assert list(items["weight"]) == sorted(items["weight"], reverse=True)
    for side in ("chosen", "rejected"):  # as the page shows them: one the token limit cut ends at its last sentence
        assert all(f or end_at_sentence(t) == t for t, f in zip(items[side], items[f"{side}_finished"]))
    off = cfg.model_copy(
        update={
            "online": cfg.online.model_copy(update={"taste": cfg.online.taste.model_copy(update={"min_choices": 0})})
        }
    )
    assert taste_pairs(off, pairs, plan).items.empty


def test_taste_pairs_of_endings_share_an_opening_and_differ_where_the_taste_shows(tiny_cfg, tiny_encoder, tmp_path):
    """With `online.taste.endings`, a message's replies to rank are endings sampled after the opening of its first
    reply of two sentences or more (all but the last sentence; a list item's number ends none), that reply among
    them; so the pair's chosen and rejected replies begin alike. A message with no such reply keeps its replies. The
    (tiny) student's ender continues an opening within the token limit, as the page shows the reply."""

    from hominem_pipeline.core.lm.generation import opening
    from hominem_pipeline.core.online.taste_pairs import taste_items, with_endings
    from hominem_pipeline.core.online.updates.batch import own_ender
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline_tests.core.test_reward_model import toy_reward_model

    assert opening("That is lovely. How are they doing?") == "That is lovely."
    assert opening("One sentence only.") is None and opening("no end at all") is None
    assert opening("Steps:\n1. Mix.\n2. Bake.") == "Steps:\n1. Mix."
    asked = []

    def ender(prompts, openings, n):
        asked.append((list(prompts), list(openings), n))
        return [[(f"{o} Anything else?", True), (f"{o} Enjoy.", True), (f"{o} Done.", True)][:n] for o in openings]

    drawn = [[("Hi.", True), ("Nice work. Keep going.", True)], [("Fine.", True), ("Ok!", True)]]
    ranked = with_endings(["a", "b"], drawn, ender, 3)
    assert asked == [(["a"], ["Nice work."], 3)]
    assert ranked[0][0] == ("Nice work. Keep going.", True) and all(t.startswith("Nice work. ") for t, _ in ranked[0])
    assert ranked[1] == drawn[1]

    reward_model = RewardModel.load(toy_reward_model(tiny_encoder, tmp_path / "rm"))
    _, pairs = _asks_back_choices()

    def sample(prompts, k):
        return [[("Great work. Keep it up.", True), ("Lovely.", True)] for _ in prompts]

    found = taste_items(
        pairs,
        reward_model,
        sample,
        min_choices=5,
        prompts=3,
        samples=2,
        min_probability=0.6,
        now="t",
        ender=ender,
        endings=3,
    ).items
    assert len(found) == 3 and all(
        c.endswith("?") and not r.endswith("?") for c, r in zip(found["chosen"], found["rejected"])
    )
    assert all(
        c.startswith("Great work. ") and r.startswith("Great work. ")
        for c, r in zip(found["chosen"], found["rejected"])
    )

    got = own_ender(tiny_cfg, None, 0, "test")(["Tell me a story."], ["Once upon a time."], 2)
    assert len(got) == 1 and len(got[0]) == 2
    assert all(t.startswith("Once upon a time.") and isinstance(f, bool) for t, f in got[0])


def test_the_gate_asks_a_person_s_taste_model_which_side_s_replies_they_would_choose(
    project, tiny_student, tiny_encoder, tmp_path
):
    """An online update that trained on a person's taste pairs is judged by their taste model too: on the (tiny)
    student, an adapter trained toward replies that ask back against one trained toward replies that do not, the
    model of a person who likes being asked back gives the first's replies the better chance, each side's figure with
    its +- under checks['taste:ana'], decided by the paired rule (health.taste_margin)."""
    from hominem_pipeline.core.attune.personal import reply_features
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline_tests.core.test_people_pairs import CHOSEN, REJECTED, _adapter_toward
    from hominem_pipeline_tests.core.test_reward_model import toy_reward_model

    rm = RewardModel.load(toy_reward_model(tiny_encoder, tmp_path / "rm"))
    openings = [f"I see, {w}." for w in ("yes", "fine", "sure", "right", "true", "okay", "alright", "indeed")] * 2
    names, chosen = reply_features(rm, ["Hi"] * 16, [o + " How are you?" for o in openings])
    _, rejected = reply_features(rm, ["Hi"] * 16, openings)
    ana = PersonalModel.fit(names, chosen, rejected)
    asking, flat = (
        _adapter_toward(tiny_student, CHOSEN, tmp_path / "asking"),
        _adapter_toward(tiny_student, REJECTED, tmp_path / "flat"),
    )
    cfg = _gate_config(project)
    assert cfg.health.taste_margin == 0.0

    def gate(candidate, live):
        return _gate(cfg, tiny_student, rm, candidate, live, tastes={"ana": ana})

    better, worse = (
        gate(asking, flat).figures["checks"]["taste:ana"],
        gate(flat, asking).figures["checks"]["taste:ana"],
    )
    assert better["candidate"] > 0.5 > worse["candidate"] and better["reference"] == 0.5 and better["items"] == 3
    for c in (better, worse):
        assert c["checked"] and c["refused"] == (c["upper_bound"] < -c["margin"]) and c["standard_error"] > 0
    assert not better["refused"]


def test_of_several_replies_the_two_shown_are_those_it_orders_most_surely_so_the_pair_can_show_the_taste():
    """A person who chose replies that ask back: of five replies (two asking back; the others differing in what it
    has not seen them choose by: length, an apology, an exclamation), the pair shown sets one that asks back against
    one that does not, the one it would bet on first; the chance it gives is its own."""
    names = TEXT_FEATURES
    words = ("tea", "rain", "bread", "jazz", "cake", "snow", "film", "park", "bike", "song")
    chosen = text_features([f"Nice, {w}. How was it?" for w in words])
    rejected = text_features([f"Nice, {w}. It was good." for w in words])  # as long: length is not the taste
    model = PersonalModel.fit(names, chosen, rejected)
    long = " ".join(["and it went on"] * 12)
    replies = ["That sounds fun.", f"That sounds fun, {long}.", "Was it fun?", f"Was it fun, {long}?", "Sorry, fun!"]
    feats = text_features(replies)
    best, worst, p = model.surest(feats)
    assert replies[best].endswith("?") and not replies[worst].endswith("?")
    assert p == pytest.approx(model.probability(feats[best], feats[worst])[0]) and p > 0.7
    assert model.surest(feats[[0, 0]])[:2] == (0, 1)  # alike to it: the two in order
    with pytest.raises(ValueError, match="a pair needs at least two"):
        model.surest(feats[:1])


def test_a_person_is_shown_one_reply_before_and_after_their_updates_on_a_message_they_never_taught(tiny_cfg):
    """With an online update live over the daily adapter, the example is the message (of those both answered in the
    gate's reply cache, none the person taught on) whose reply moved most toward their taste: here the one the update
    answers by asking back. None while the daily adapter itself is live."""
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.online.reply_cache import reply_cache
    from hominem_pipeline.core.online.taste_pairs import before_and_after

    data = tiny_cfg.data_dir
    daily, update = data / "lora_adapter" / "2026-12-06" / "d1", data / "live" / "adapters" / "online-1"
    for folder in (daily, update):
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
    chosen = text_features([f"Good, {w}. And you?" for w in ("tea", "rain", "bread", "jazz", "sun", "moss")])
    rejected = text_features([f"Good, {w}. How nice." for w in ("tea", "rain", "bread", "jazz", "sun", "moss")])
    model = PersonalModel.fit(TEXT_FEATURES, chosen, rejected)
    state = LiveState(data)
    state.promote("d1", daily, None, gate={"passed": True}, reason="daily", by="test")
    cache = reply_cache(tiny_cfg)
    cache.put("d1", {"How was your day?": "It was fine.", "I got a cat.": "Cats are great.", "Taught?": "x"})
    cache.put(
        "online-1", {"How was your day?": "It was fine.", "I got a cat.": "A cat! What is its name?", "Taught?": "y?"}
    )
    assert before_and_after(tiny_cfg, model, None, set()) is None  # the daily adapter is live: no update yet
    state.promote("online-1", update, None, gate={"passed": True}, reason="online", by="test")
    shown = before_and_after(tiny_cfg, model, None, {"Taught?"})
    assert shown == {
        "message": "I got a cat.",
        "before": "Cats are great.",
        "after": "A cat! What is its name?",
        "before_version": "d1",
        "after_version": "online-1",
    }


def test_a_person_s_choices_never_trained_on_are_held_out_by_their_ids_and_judge_the_update(
    project, tiny_student, tiny_encoder, tmp_path
):
    """`online.taste.held_out` of a person's choices after their first `min_choices` (never thumbs) stay out of
    training, the same ones however the log grows; the gate compares both sides' implicit rewards on them: an adapter
    trained toward the replies the person chose orders their choices better than one trained toward those they
    rejected, under checks['choices:ana'] (with fewer than 8, reported)."""
    import pandas as pd

    from hominem_pipeline.core.online.taste_pairs import held_out_choices
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline_tests.core.test_people_pairs import CHOSEN, PROMPTS, REJECTED, _adapter_toward
    from hominem_pipeline_tests.core.test_reward_model import toy_reward_model

    log = pd.DataFrame(
        {
            "pair_id": [f"choice-{n}" for n in range(400)],
            "source": ["feedback:choice", "feedback:thumbs"] * 200,
            "rater": ["ana", "bo", "bo", "ana"] * 100,
        }
    )
    held = held_out_choices(log, 0.2, 8)
    choices = log["source"] == "feedback:choice"
    assert not held[~choices].any() and 0.12 < held[choices].mean() < 0.28
    assert not held[choices & (log.groupby("rater").cumcount() < 16)].any()  # each person's first 8 choices train
    assert (held_out_choices(log.head(100), 0.2, 8) == held[:100]).all()  # a choice's fate is its own
    assert not held_out_choices(log, 0.0, 8).any() and not held_out_choices(log.head(0), 0.2, 8).any()
    assert not held_out_choices(log, 0.2, 0).any()  # no taste models: nothing held out

    rm = RewardModel.load(toy_reward_model(tiny_encoder, tmp_path / "rm"))
    nine = {"prompt": PROMPTS * 3, "chosen": CHOSEN * 3, "rejected": REJECTED * 3}
    choices = pd.DataFrame({"pair_id": [f"c{n}" for n in range(9)], **nine})  # MIN_CHOICES (8) decide
    toward, away = (
        _adapter_toward(tiny_student, CHOSEN, tmp_path / "toward"),
        _adapter_toward(tiny_student, REJECTED, tmp_path / "away"),
    )
    cfg = _gate_config(project)

    def gate(candidate, live, held=choices):
        return _gate(cfg, tiny_student, rm, candidate, live, choices={"ana": held})

    better, worse = (
        gate(toward, away).figures["checks"]["choices:ana"],
        gate(away, toward).figures["checks"]["choices:ana"],
    )
    assert better["candidate"] > better["reference"] and worse["candidate"] < worse["reference"]
    assert better["items"] == 9 and better["checked"] and not better["refused"]
    assert worse["checked"] and worse["refused"] == (worse["upper_bound"] < -worse["margin"])
    few = gate(away, toward, choices.head(3)).figures["checks"]["choices:ana"]
    assert few["items"] == 3 and not few["checked"] and not few["refused"]  # too few to decide: reported


def _gate_config(project):
    overrides = {"health": {"deploy_threshold": 0.0}, "evaluation": {"memory_probe": False}}
    return load_config(project / "config" / "tiny.yaml", root=project, overrides=overrides)


def _gate(cfg, student, reward_model, candidate, live, **asked):
    """The gate on the tiny student: `candidate` against `live` (adapter folders), on the people's-pairs test's
    prompts, with `asked` (tastes, choices) as the questions."""
    from hominem_pipeline.core.lm.models import load_student
    from hominem_pipeline.core.online.gate import GateHealth, GateModels, GateQuestions, GateSides, run_gate
    from hominem_pipeline_tests.core.test_people_pairs import PROMPTS

    base, tokenizer = load_student(student)
    return run_gate(
        GateSides(candidate, live, candidate.name, live.name),
        cfg=cfg,
        models=GateModels(base, tokenizer, reward_model),
        questions=GateQuestions(PROMPTS, **asked),
        health=GateHealth(1.0),
    )


def test_a_person_is_told_whether_their_update_learned_their_taste_and_what_a_refused_one_would_have_cost(tmp_path):
    """The live history's gate figures, read for one person: an update that learned their taste but lost the
    student's facts is refused 'at the cost of what the student knew', naming the check; one that did not learn it
    says so; a promoted one is live until rolled back; another person's updates are not theirs."""
    from hominem_pipeline.core.evaluation.noise import NoiseRule, paired_check
    from hominem_pipeline.core.online.gate import GateReport
    from hominem_pipeline.core.online.gate_person import taste_verdict
    from hominem_pipeline.core.online.live import LiveState

    rule, adapter = NoiseRule(0.05, 0.95, 0.8), tmp_path / "adapter"
    state = LiveState(tmp_path / "data")
    assert taste_verdict(state.history(), "ana", None) is None

    def offer(version, taste, facts, rater="ana"):
        checks = [
            paired_check(f"taste:{rater}", f"{rater}'s taste", taste, [0.5] * len(taste), rule, "a tie"),
            paired_check("facts", "general facts answered", facts, [1.0] * len(facts), rule, "the live adapter"),
        ]
        reasons = [f"{c.reason()} (health.reply_margins.{c.name})" for c in checks if c.refused]
        report = GateReport(not reasons, reasons, {"checks": {c.name: c.as_dict() for c in checks}})
        if report.passed:
            return state.promote(version, adapter, None, gate=report.as_dict(), reason="ok", by="test")
        state.refuse(version, adapter, None, gate=report.as_dict(), reason="; ".join(reasons), by="test")

    offer("v1", [0.8, 0.7, 0.9, 0.75] * 5, [1.0, 0.0] * 10)  # learned, but lost half the facts
    said = taste_verdict(state.history(), "ana", state.current().version)
    assert said["version"] == "v1" and said["learned"] and not said["live"]
    assert said["cost"] == ["general facts answered 50% against 100%"]
    assert said["said"].startswith("update v1 learned your taste (your taste model picks its reply over the one")
    assert "but was refused: it cost what the student knew (general facts answered 50% against 100%)" in said["said"]
    offer("v2", [0.2, 0.3] * 10, [1.0] * 20)  # kept the facts, went against her taste
    said = taste_verdict(state.history(), "ana", state.current().version)
    assert not said["learned"] and said["cost"] == [] and "v2 was refused: it did not learn your taste" in said["said"]
    offer("v3", [0.8, 0.7] * 10, [1.0] * 20)
    offer("v4", [0.8, 0.7] * 10, [1.0, 0.0] * 10, rater="bo")  # another person's update
    said = taste_verdict(state.history(), "ana", state.current().version)
    assert said["version"] == "v3" and said["live"] and said["said"].endswith("; it is live")
    assert [c["name"] for c in said["checks"]] == ["taste:ana"] and said["checks"][0]["standard_error"] > 0
    state.rollback(reason="test", by="test")
    said = taste_verdict(state.history(), "ana", state.current().version)
    assert not said["live"] and said["said"].endswith("it was live, and has been rolled back since")


def test_an_update_imitates_the_replies_a_person_chose_only_when_told_to(tiny_cfg):
    """`online.taste.imitate`: the chosen replies of taste pairs and of people's choices become memory rows (SFT
    targets) of the update; `online.nudges.imitate` does the same for the dimension pairs; teacher pairs never."""
    import pandas as pd

    from hominem_pipeline.core.online.updates.training import imitated

    batch = pd.DataFrame(
        {"source": ["teacher:2026-12-07", "feedback:choice", "feedback:thumbs", "taste:ana", "nudge:x"]}
    )
    dimension = batch["source"].str.startswith("nudge:")

    def cfg(taste: bool, nudges: bool):
        oc = tiny_cfg.online
        online = oc.model_copy(
            update={
                "taste": oc.taste.model_copy(update={"imitate": taste}),
                "nudges": oc.nudges.model_copy(update={"imitate": nudges}),
            }
        )
        return tiny_cfg.model_copy(update={"online": online})

    assert list(imitated(cfg(False, False), batch, dimension)) == [False] * 5
    assert list(imitated(cfg(True, False), batch, dimension)) == [False, True, False, True, False]
    assert list(imitated(cfg(True, True), batch, dimension)) == [False, True, False, True, True]


def test_a_check_on_one_held_out_choice_states_no_spread_it_does_not_have():
    from hominem_pipeline.core.online.gate import GateReport

    one = {"candidate": 0.0, "reference": 1.0, "difference": -1.0, "standard_error": float("inf"), "items": 1}
    checks = {"choices:ana": {"name": "choices:ana", **one, "refused": False, "checked": False}}
    text = GateReport(True, [], {"checks": checks}).summary()
    assert "choices:ana 0.0% vs 100.0% (-100.0%, n=1, not checked)" in text and "inf" not in text
