import math

import pytest
import torch

from hominem_pipeline.core.policy.losses import (
    DualLossInputs,
    DualLossWeights,
    SafetyGate,
    dpo_loss,
    dual_channel_loss,
)


def logps(requires_grad: bool = True):
    """Four examples: policy chosen / rejected and reference log-probabilities, fixed."""
    pc = torch.tensor([-10.0, -12.0, -8.0, -11.0], requires_grad=requires_grad)
    pr = torch.tensor([-11.0, -10.5, -9.0, -11.0], requires_grad=requires_grad)
    rc = torch.tensor([-10.5, -11.0, -8.5, -11.0])
    rr = torch.tensor([-10.5, -11.0, -8.5, -11.0])
    return pc, pr, rc, rr


def hand_dpo(pc, pr, rc, rr, beta):
    return -math.log(1 / (1 + math.exp(-beta * ((pc - rc) - (pr - rr)))))


def test_dpo_loss_is_the_sigmoid_loss_per_example():
    pc, pr, rc, rr = logps(False)
    got = dpo_loss(pc, pr, rc, rr, beta=0.1)
    want = [hand_dpo(*(float(t[i]) for t in (pc, pr, rc, rr)), 0.1) for i in range(4)]
    assert got.shape == (4,) and got.tolist() == pytest.approx(want, rel=1e-6)
    assert got[3] == pytest.approx(math.log(2))  # policy = reference: no preference yet


def test_dpo_loss_equals_trls_dpo_trainer_loss(tiny_student, tmp_path):
    """TRL computes its loss inside DPOTrainer: run its compute_loss on a real batch and compare with
    dpo_loss on log-probabilities summed over the same completion tokens."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    model = AutoModelForCausalLM.from_pretrained(tiny_student, dtype=torch.float32)
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Tell me about day {i}."}],
            "chosen": [{"role": "assistant", "content": "A kind, calm day."}],
            "rejected": [{"role": "assistant", "content": "Bad. Go away now."}],
        }
        for i in range(2)
    ]
    args = DPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        beta=0.3,
        max_length=64,
        bf16=False,
        activation_checkpointing=False,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        save_strategy="no",
    )
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM"
        ),
    )
    batch = next(iter(trainer.get_train_dataloader()))
    policy = trainer.model
    policy.eval()
    with torch.no_grad():
        trl_loss = trainer.compute_loss(policy, batch)

        def summed_logps(disable_adapter: bool) -> torch.Tensor:
            ctx = policy.disable_adapter() if disable_adapter else torch.enable_grad()
            with ctx:
                logits = policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
            token = logits.log_softmax(-1).gather(-1, batch["input_ids"][:, 1:].unsqueeze(-1)).squeeze(-1)
            return (token * batch["completion_mask"][:, 1:]).sum(1)

        pol, ref = summed_logps(False), summed_logps(True)
    (pc, pr), (rc, rr) = pol.chunk(2), ref.chunk(2)
    assert not torch.allclose(pol, ref)  # the adapter (initialised non-zero) makes policy and reference differ
    assert dpo_loss(pc, pr, rc, rr, beta=0.3).mean() == pytest.approx(float(trl_loss), rel=1e-4)


def run(
    gate: SafetyGate,
    safety,
    intensity=(1.0, 0.5, 1.0, 0.8),
    sft=(2.0, 1.0, 3.0, 1.5),
    w_sft=0.7,
    w_reward=2.0,
    beta=0.5,
):
    pc, pr, rc, rr = logps()
    out = dual_channel_loss(
        DualLossInputs(pc, pr, rc, rr, torch.tensor(sft), torch.tensor(intensity), torch.tensor(safety)),
        DualLossWeights(beta=beta, w_sft=w_sft, w_reward=w_reward),
        gate,
    )
    return out, (pc, pr)


def hand_dual(
    i,
    weight,
    inverted,
    safety_free=True,
    intensity=(1.0, 0.5, 1.0, 0.8),
    sft=(2.0, 1.0, 3.0, 1.5),
    w_sft=0.7,
    w_reward=2.0,
    beta=0.5,
):
    pc, pr, rc, rr = (float(t[i]) for t in logps(False))
    reward = hand_dpo(pr, pc, rr, rc, beta) if inverted else hand_dpo(pc, pr, rc, rr, beta)
    return weight * ((0.0 if inverted else w_sft * sft[i]) + intensity[i] * w_reward * reward)


@pytest.mark.parametrize(
    "gate, weights, inverted",
    [
        # safety (0.9, 0.5, 0.1, 0.65): pass, between, unsafe, pass
        (
            SafetyGate(
                pass_at=0.6, unsafe_below=0.3, unsafe="skip", between="downweight", downweight_by="factor", factor=0.25
            ),
            (1, 0.25, 0, 1),
            (),
        ),
        (
            SafetyGate(pass_at=0.6, unsafe_below=0.3, unsafe="skip", between="downweight", downweight_by="score"),
            (1, 0.5, 0, 1),
            (),
        ),
        (SafetyGate(pass_at=0.6, unsafe_below=0.3, unsafe="invert", between="pass"), (1, 1, 1, 1), (2,)),
        (SafetyGate(pass_at=0.6, unsafe_below=0.3, unsafe="skip", between="skip"), (1, 0, 0, 1), ()),
    ],
    ids=["downweight-by-factor", "downweight-by-score", "invert", "skip"],
)
def test_dual_channel_loss_matches_a_hand_computation_for_each_gate_mode(gate, weights, inverted):
    out, _ = run(gate, safety=(0.9, 0.5, 0.1, 0.65))
    want = [hand_dual(i, weights[i], i in inverted) for i in range(4)]
    assert out.per_example.tolist() == pytest.approx(want, rel=1e-6)
    assert float(out.total.detach()) == pytest.approx(sum(want) / 4, rel=1e-6)
    assert float((out.sft + out.reward).detach()) == pytest.approx(float(out.total.detach()), rel=1e-6)
    assert out.skipped == sum(w == 0 for w in weights) and out.inverted == len(inverted)
    assert out.downweighted == sum(0 < w < 1 for w in weights)


def test_skip_gives_no_gradient_and_invert_flips_its_sign():
    pc, pr, rc, rr = logps()
    plain = SafetyGate(unsafe="skip")
    skip, (spc, spr) = run(plain, safety=(0.9, 0.9, 0.1, 0.9))
    skip.total.backward()
    assert spc.grad[2] == 0 and spr.grad[2] == 0 and spc.grad[0] != 0

    # Example 3 has policy == reference, where the DPO gradient of the swapped pair is exactly the negative.
    safe, (apc, apr) = run(SafetyGate(unsafe="invert"), safety=(0.9, 0.9, 0.9, 0.9), sft=(0.0, 0.0, 0.0, 0.0))
    flipped, (bpc, bpr) = run(SafetyGate(unsafe="invert"), safety=(0.9, 0.9, 0.9, 0.1), sft=(0.0, 0.0, 0.0, 0.0))
    safe.total.backward()
    flipped.total.backward()
    assert (
        bpc.grad[3] == pytest.approx(-float(apc.grad[3])) and bpc.grad[3] > 0
    )  # descent lowers its log-prob: learns away from it
    assert bpr.grad[3] == pytest.approx(-float(apr.grad[3]))
    assert bpc.grad[0] == pytest.approx(float(apc.grad[0]))  # the other examples are untouched


def test_inverted_examples_get_no_sft_and_bad_shapes_are_refused():
    out, _ = run(
        SafetyGate(unsafe="invert", between="pass"), safety=(0.1, 0.1, 0.1, 0.1), intensity=(0.0, 0.0, 0.0, 0.0)
    )
    assert (
        float(out.sft.detach()) == 0.0 and float(out.total.detach()) == 0.0
    )  # no SFT on an unsafe chosen reply; intensity 0 mutes the pair
    pc, pr, rc, rr = logps()
    with pytest.raises(
        ValueError, match=r"sft_nll has shape \(3,\); every input is one value per example, shape \(4,\)"
    ):
        dual_channel_loss(
            DualLossInputs(pc, pr, rc, rr, torch.ones(3), torch.ones(4), torch.ones(4)),
            DualLossWeights(beta=0.1, w_sft=1, w_reward=1),
            SafetyGate(),
        )
    with pytest.raises(ValueError, match="unsafe_below"):
        SafetyGate(pass_at=0.2, unsafe_below=0.5)


def test_memory_rows_get_the_sft_term_alone_and_are_not_gated():
    pc, pr = torch.tensor([-10.0, 0.0]), torch.tensor([-11.0, 0.0])
    rc, rr = torch.tensor([-10.5, 0.0]), torch.tensor([-10.5, 0.0])
    out = dual_channel_loss(
        DualLossInputs(
            pc,
            pr,
            rc,
            rr,
            torch.tensor([2.0, 3.0]),
            torch.tensor([1.0, 9.0]),
            torch.tensor([0.9, 0.0]),
            pair_mask=torch.tensor([True, False]),
        ),
        DualLossWeights(beta=0.5, w_sft=0.7, w_reward=2.0),
        SafetyGate(unsafe="invert"),
    )
    assert out.per_example.tolist() == pytest.approx(
        [0.7 * 2.0 + 2.0 * hand_dpo(-10, -11, -10.5, -10.5, 0.5), 0.7 * 3.0]
    )
    assert (out.skipped, out.downweighted, out.inverted) == (0, 0, 0)  # safety 0 on the memory row changes nothing
    own = dual_channel_loss(
        DualLossInputs(
            pc,
            pr,
            rc,
            rr,
            torch.tensor([2.0, 3.0]),
            torch.tensor([1.0, 9.0]),
            torch.tensor([0.9, 0.0]),
            pair_mask=torch.tensor([True, False]),
        ),
        DualLossWeights(beta=0.5, w_sft=0.7, w_reward=2.0, w_memory=1.5),
        SafetyGate(unsafe="invert"),
    )
    assert own.per_example.tolist() == pytest.approx(
        [out.per_example[0].item(), 1.5 * 3.0]
    )  # memory rows' own weight; pairs keep w_sft


def test_anchored_memory_rows_learn_only_above_the_base_minus_the_margin():
    pc, pr, rc, rr = (torch.tensor([v, 0.0, 0.0]) for v in (-10.0, -11.0, -10.5, -10.5))
    nll = torch.tensor([2.0, 3.0, 1.0], requires_grad=True)
    ref_nll = torch.tensor([9.0, 2.5, 1.5])  # the pair row's entry is never read
    out = dual_channel_loss(
        DualLossInputs(
            pc,
            pr,
            rc,
            rr,
            nll,
            torch.ones(3),
            torch.ones(3),
            pair_mask=torch.tensor([True, False, False]),
            memory_ref_nll=ref_nll,
        ),
        DualLossWeights(beta=0.5, w_sft=0.7, w_reward=2.0, w_memory=1.5, memory_margin=0.2),
        SafetyGate(),
    )
    pair = 0.7 * 2.0 + 2.0 * hand_dpo(-10, -11, -10.5, -10.5, 0.5)
    assert out.per_example.tolist() == pytest.approx(
        [pair, 1.5 * (3.0 - 2.5 + 0.2), 0.0]
    )  # row 3 is 0.5 likelier than the base: held, no pull
    assert float(out.memory.detach()) == pytest.approx(1.5 * 0.7 / 3) and float(out.sft.detach()) == pytest.approx(
        (0.7 * 2.0 + 1.5 * 0.7) / 3
    )
    out.total.backward()
    assert nll.grad.tolist() == pytest.approx([0.7 / 3, 1.5 / 3, 0.0])
    with pytest.raises(ValueError, match=r"memory_ref_nll has shape \(2,\)"):
        dual_channel_loss(
            DualLossInputs(pc, pr, rc, rr, nll, torch.ones(3), torch.ones(3), memory_ref_nll=ref_nll[:2]),
            DualLossWeights(beta=0.5, w_sft=1.0, w_reward=1.0),
            SafetyGate(),
        )


def test_gated_rewards_skip_downweight_and_invert_within_each_group():
    from hominem_pipeline.core.policy.losses import gate_group_rewards

    rewards = torch.tensor([0.2, 0.4, 0.9, 0.6, 0.1, 0.3, 0.5, 0.7])
    safety = torch.tensor([0.9, 0.9, 0.1, 0.5, 0.9, 0.9, 0.9, 0.9])  # group 1: one unsafe, one in between
    skip = gate_group_rewards(rewards, safety, SafetyGate(unsafe="skip", factor=0.5), group_size=4)
    assert skip[:4].tolist() == pytest.approx(
        [0.2, 0.4, 0.3, 0.3 + 0.5 * (0.6 - 0.3)]
    )  # centre = mean of the passed (0.3)
    assert skip[4:].tolist() == pytest.approx(rewards[4:].tolist())  # an all-safe group is untouched
    inverted = gate_group_rewards(rewards, safety, SafetyGate(unsafe="invert", factor=0.5), group_size=4)
    assert float(inverted[2]) == pytest.approx(0.2 - 0.7)  # lowest (0.2) minus the spread (0.7)
    assert int(inverted[:4].argmin()) == 2  # the best-rated reply, unsafe, now ranks last
    with pytest.raises(ValueError, match="do not split into groups of 3"):
        gate_group_rewards(rewards, safety, SafetyGate(), group_size=3)
