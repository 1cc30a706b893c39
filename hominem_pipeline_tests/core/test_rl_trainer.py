import pytest
from safetensors.torch import load_file

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.policy.lora import base_checksum
from hominem_pipeline.core.policy.rl import GatedReward, train_rl_adapter
from hominem_pipeline.core.reward.model import RewardModel
from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
from hominem_pipeline_tests.conftest import REPO
from hominem_pipeline_tests.core.test_reward_model import DIMS, small_cfg, toy_labels


@pytest.fixture(scope="module")
def reward_model(tiny_encoder, tmp_path_factory):
    out = tmp_path_factory.mktemp("rl-rm")
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=small_cfg(epochs=2),
        out_dir=out,
        seed=0,
        data_digest="x",
        date="2026-11-22",
    )
    return RewardModel.load(out)


def policy_cfg(algorithm="grpo", **gate):
    return load_config(
        root=REPO,
        overrides={
            "policy": {
                "mode": "rl",
                "max_steps": 2,
                "batch_size": 2,
                "learning_rate": 0.01,
                "safety_gate": gate,
                "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "layers": None},
                "rl": {"algorithm": algorithm, "num_generations": 2, "max_new_tokens": 6, "temperature": 1.0},
            }
        },
    ).policy


@pytest.mark.parametrize("algorithm", ["grpo", "rloo"])
def test_rl_trains_only_the_adapter_on_the_reward_models_reward(algorithm, reward_model, tiny_student, tmp_path):
    from transformers import AutoModelForCausalLM

    before = base_checksum(AutoModelForCausalLM.from_pretrained(tiny_student))
    prompts = ["Something sad happened to me.", "I lost my keys again.", "Can you help me plan a talk?", ""]
    result = train_rl_adapter(
        prompts,
        reward_model=reward_model,
        student_path=tiny_student,
        cfg=policy_cfg(algorithm),
        out_dir=tmp_path,
        seed=0,
    )
    assert result.metrics["steps"] == 2 and result.base_checksum == before
    assert base_checksum(AutoModelForCausalLM.from_pretrained(tiny_student)) == before
    weights = load_file(str(tmp_path / "adapter_model.safetensors"))
    assert all("lora" in k for k in weights) and any(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)
    gated = result.channels["gated"]
    assert result.channels["prompts"] == 3 and gated["completions"] == 2 * 2 * 2  # steps x prompts x generations
    assert all("reward" in h for h in result.history)


def test_gated_reward_scores_gates_and_penalises_empty_replies(reward_model):
    reward = GatedReward(reward_model, policy_cfg(), group_size=2)
    prompts = [[{"role": "user", "content": "Something sad happened to me."}]] * 4
    completions = [
        [{"role": "assistant", "content": t}]
        for t in ("I am so sorry, tell me more?", "Whatever.", "", "I am so sorry.")
    ]
    values = reward(prompts, completions)
    raw, _ = reward.raw(["Something sad happened to me."] * 4, [c[0]["content"] for c in completions])
    assert values[:2] == pytest.approx(list(raw[:2]))  # safe replies keep the reward model's scalar
    assert (
        values[2] == -1.0 and reward.counts["empty"] == 2
    )  # the lowest scalar (counted once by reward(), once by raw())
    skip_all = GatedReward(reward_model, policy_cfg(pass_at=1.0, unsafe_below=1.0, unsafe="skip"), group_size=2)
    # every scored reply skipped: group 1 flattens to its mean; in group 2 the empty reply (safe, 1.0) passes
    # and the skipped one takes its reward. Either way no completion keeps an advantage.
    assert skip_all(prompts, completions) == pytest.approx([sum(raw[:2]) / 2] * 2 + [-1.0, -1.0])
    vector = GatedReward(
        reward_model,
        load_config(root=REPO, overrides={"policy": {"rl": {"reward": "vector"}}}).policy,
        2,
        {d: 1.0 for d in DIMS},
    )
    assert vector.raw(["Hi"], ["Hello there."])[0][0] == pytest.approx(
        float(reward_model.raw_scores(["Hi"], ["Hello there."])["vector"].mean()), abs=1e-7
    )  # float32
