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
    from hominem_pipeline.core.models import load_student
    from hominem_pipeline.core.policy.sequences import encode

    torch.manual_seed(0)
    base, tokenizer = load_student(tiny_student)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    untrained, margins = implicit_reward(model, tokenizer, PROMPTS, CHOSEN, REJECTED, batch_size=2)
    assert untrained.pairs == 3 and untrained.accuracy == 0.5 and np.allclose(margins, 0.0)

    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(40):
        for prompt, reply in zip(PROMPTS, CHOSEN):
            ids, begin = encode(tokenizer, prompt, reply, 256)
            inputs = torch.tensor([ids])
            labels = inputs.clone()
            labels[:, :begin] = -100
            model(input_ids=inputs, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
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
