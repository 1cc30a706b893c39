"""The adapter's implicit reward on people's pairs (core/evaluation/people_pairs.py)."""

import numpy as np
import torch

PROMPTS = ["How was your day?", "I failed my driving test again.", "What is the capital of France?"]
CHOSEN = ["Quiet, thanks for asking. And yours?", "That's rough. What happened?", "Paris."]
REJECTED = ["zq xv blorp.", "Try harder.", "Berlin, obviously."]


def test_the_implicit_reward_is_the_adapters_move_on_each_pair_and_rises_where_it_learned_the_chosen(tiny_student):
    """An untrained adapter is the base (every margin 0: 0.5, chance); after next-token training on the
    chosen replies every pair's margin is positive (1.0), and each margin is the adapter's log-probability
    of the chosen reply minus the base's, minus the same for the rejected one, computed here directly
    from the full logits."""
    from peft import LoraConfig, get_peft_model

    from hominem_pipeline.core.evaluation.people_pairs import implicit_reward
    from hominem_pipeline.core.lm.models import load_student
    from hominem_pipeline.core.policy.sequences import encode

    torch.manual_seed(0)
    base, tokenizer = load_student(tiny_student)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    untrained, margins = implicit_reward(model, tokenizer, PROMPTS, CHOSEN, REJECTED, batch_size=2)
    assert untrained.pairs == 3 and untrained.accuracy == 0.5 and np.allclose(margins, 0.0)

    _train_toward(model, tokenizer, CHOSEN, rounds=40)
    model.eval()
    trained, margins = implicit_reward(model, tokenizer, PROMPTS, CHOSEN, REJECTED, batch_size=2)
    assert trained.accuracy == 1.0 and (margins > 0).all() and trained.mean_margin == np.mean(margins)

    def logp(prompt: str, reply: str) -> float:
        ids, begin = encode(tokenizer, prompt, reply, 256)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
        return float(logits[torch.arange(begin - 1, len(ids) - 1), torch.tensor(ids[begin:])].sum())

    adapter = [logp(p, c) - logp(p, j) for p, c, j in zip(PROMPTS, CHOSEN, REJECTED)]
    with model.disable_adapter():
        reference = [logp(p, c) - logp(p, j) for p, c, j in zip(PROMPTS, CHOSEN, REJECTED)]
    np.testing.assert_allclose(margins, np.subtract(adapter, reference), atol=1e-3)


def _adapter_toward(tiny_student, replies: list[str], path):
    """A LoRA adapter on the tiny student trained (next-token) toward `replies` to PROMPTS, saved at `path`."""
    from peft import LoraConfig, get_peft_model

    from hominem_pipeline.core.lm.models import load_student

    torch.manual_seed(0)
    base, tokenizer = load_student(tiny_student)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    _train_toward(model, tokenizer, replies, rounds=30)
    model.save_pretrained(path)
    return path


def _train_toward(model, tokenizer, replies: list[str], rounds: int) -> None:
    """Next-token training of the PEFT `model`'s adapter on `replies` to PROMPTS."""
    from hominem_pipeline.core.policy.sequences import encode

    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(rounds):
        for prompt, reply in zip(PROMPTS, replies):
            ids, begin = encode(tokenizer, prompt, reply, 256)
            inputs = torch.tensor([ids])
            labels = inputs.clone()
            labels[:, :begin] = -100
            model(input_ids=inputs, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()


def test_the_gate_refuses_an_adapter_that_orders_peoples_pairs_worse_than_the_live_one(
    tiny_student, tiny_encoder, project, tmp_path
):
    """The live gate compares the candidate's implicit reward on the people's held-out pairs with the live
    adapter's (the base's: 0.5): an adapter that learned the rejected replies is refused against one that
    learned the chosen ones (and against the base), naming the figures and the setting; the other way round
    it passes. Each version's margins are kept in the reply cache; with health.people_margin null the
    figure is reported and nothing refused."""
    import pandas as pd

    from hominem_pipeline.core.config.loader import load_config
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
    from hominem_pipeline_tests.core.test_reward_model import DIMS, toy_reward_model

    rm = RewardModel.load(toy_reward_model(tiny_encoder, tmp_path / "rm"))
    good, bad = (
        _adapter_toward(tiny_student, CHOSEN, tmp_path / "good"),
        _adapter_toward(tiny_student, REJECTED, tmp_path / "bad"),
    )
    people = pd.DataFrame({"pair_id": ["a", "b", "c"], "prompt": PROMPTS, "chosen": CHOSEN, "rejected": REJECTED})
    lenient = {"health": {"deploy_threshold": 0.0, "win_rate_margin": None}, "evaluation": {"memory_probe": False}}

    def gate(candidate, live, margin=0.0, versions=("cand", "live")):
        cfg = load_config(
            project / "config" / "tiny.yaml",
            root=project,
            overrides={**lenient, "health": {**lenient["health"], "people_margin": margin}},
        )
        base, tokenizer = load_student(tiny_student)
        cache = ReplyCache(tmp_path / "replies", cfg)
        sides = GateSides(candidate, live, versions[0], None if live is None else versions[1])
        return run_gate(
            sides,
            cfg=cfg,
            models=GateModels(base, tokenizer, rm),
            questions=GateQuestions(["Hi"], people=people),
            health=GateHealth(1.0),
            cache=cache,
        ), cache

    refused, cache = gate(bad, good, versions=("bad", "good"))
    assert (
        not refused.passed
        and refused.figures["people_accuracy"] == 0.0
        and refused.figures["people_accuracy_live"] == 1.0
    )
    assert any(
        "people's held-out pairs 0.0% against good's 100.0% on 3 items: -100.0% +- 0.0%" in r
        and "health.people_margin" in r
        for r in refused.reasons
    )
    assert set(cache.margins("good")) == set(cache.margins("bad")) == {"a", "b", "c"} and all(
        m > 0 for m in cache.margins("good").values()
    )
    passed, _ = gate(good, bad, versions=("good", "bad"))  # the margins read from the cache
    assert passed.passed and passed.figures["people_accuracy"] == 1.0 and passed.figures["people_difference"] == 1.0
    over_base, _ = gate(bad, None, versions=("bad", None))
    assert (
        not over_base.passed
        and over_base.figures["people_accuracy_live"] == 0.5
        and "against the base's 50.0%" in over_base.reasons[0]
    )
    unchecked, _ = gate(bad, good, margin=None, versions=("bad", "good"))
    assert (
        unchecked.passed
        and unchecked.figures["people_accuracy"] == 0.0
        and "people's held-out pairs 0.0% vs 100.0% (not checked)" in unchecked.summary()
    )
    # the reward signal an adapter was trained on: a collapse planted in its manifold.json refuses it under
    # health.manifold,
    # the same figures pass under a looser threshold, and an adapter written without them is marked not measured
    import numpy as np

    from hominem_pipeline.core.evaluation.manifold import MANIFOLD, manifold_shape

    assert passed.figures["manifold"].startswith("not measured")
    rng = np.random.default_rng(0)
    vectors = rng.normal(0.0, 0.3, (40, len(DIMS)))
    vectors[:, 1] = 0.2  # curiosity: the same for every reply
    manifold_shape(
        vectors, np.full(len(DIMS), 0.3), DIMS, rng.normal(0.0, 0.3, (20, len(DIMS))), np.ones(len(DIMS))
    ).write(good)
    collapsed, _ = gate(good, bad, versions=("good", "bad"))
    assert (
        not collapsed.passed
        and collapsed.figures["manifold_blocked"] is True
        and collapsed.figures["manifold_min_spread_ratio"] < 1e-9
    )
    assert collapsed.reasons == [
        "reward manifold: curiosity collapsed: its spread over the 40 replies is 0.00 of the teacher's labels' "
        "(< health.manifold.min_spread_ratio 0.2)"
    ]
    (good / MANIFOLD).unlink()
