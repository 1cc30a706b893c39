import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.policy.dual import (
    DualBatching,
    DualStart,
    batch_rows,
    pair_labels,
    train_dual_adapter,
)
from hominem_pipeline.core.policy.lora import base_checksum
from hominem_pipeline.core.policy.sequences import encode, pair_sequences
from hominem_pipeline_tests.conftest import REPO

TINY_POLICY = {
    "max_steps": 3,
    "batch_size": 3,
    "max_length": 48,
    "learning_rate": 0.01,
    "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "layers": None},
}


def policy_cfg(**dual):
    gate = dual.pop("safety_gate", {})
    dual = {"sft_weight": 1.0, "memory_weight": None, **dual}  # the weights the hand computations below assume
    return load_config(
        root=REPO, overrides={"policy": {**TINY_POLICY, "mode": "dual", "dual": dual, "safety_gate": gate}}
    ).policy


def pairs(n=4, safety=0.9, intensity=0.5):
    return pd.DataFrame(
        {
            "prompt": [f"Tell me about day {i}." for i in range(n)],
            "chosen": ["It was a kind, calm day."] * n,
            "rejected": ["Bad. Go away."] * n,
            "chosen_reward_intensity": [intensity] * n,
            "chosen_safety_score": [safety] * n,
        }
    )


def memory(n=3):
    return pd.DataFrame(
        {"prompt": [f"What is fact {i}?" for i in range(n)], "response": [f"Fact {i} is blue." for i in range(n)]}
    )


def lora_b(folder):
    return [v for k, v in load_file(str(folder / "adapter_model.safetensors")).items() if "lora_B" in k]


def test_dual_trains_both_channels_and_leaves_the_base_untouched(tiny_student, tmp_path):
    from transformers import AutoModelForCausalLM

    before = base_checksum(AutoModelForCausalLM.from_pretrained(tiny_student))
    logged = []
    result = train_dual_adapter(
        pairs(),
        memory(),
        start=DualStart(tiny_student),
        cfg=policy_cfg(mixing="fixed", memory_fraction=0.34),
        out_dir=tmp_path,
        seed=0,
        on_log=lambda step, m: logged.append(step),
    )
    assert result.metrics["steps"] == 3 and logged == [1, 2, 3] and len(result.grad_norms) == 3
    assert result.base_checksum == before == base_checksum(AutoModelForCausalLM.from_pretrained(tiny_student))
    assert all(v.abs().sum() > 0 for v in lora_b(tmp_path))
    channels = result.channels
    assert channels["memory_rows_per_batch"] == 1 and (channels["memory_rows"], channels["pair_rows"]) == (3, 6)
    shares = result.channel_contributions
    assert shares["sft"] > 0 and shares["reward"] > 0 and shares["sft"] + shares["reward"] == pytest.approx(1.0)
    first = result.history[0]
    assert first["loss"] == pytest.approx(first["sft"] + first["reward"], rel=1e-5)
    # step 1: the adapter is still zero, so policy = reference and each pair's DPO loss is log 2
    assert first["reward"] == pytest.approx(
        2 / 3 * np.log(2), rel=1e-4
    )  # 2 of 3 rows are pairs, intensity normalised to 1


def test_a_pair_sampler_chooses_each_batch_s_pairs(tiny_student, tmp_path):
    asked = []
    unsafe_but_one = pairs(4, safety=0.1)
    unsafe_but_one.loc[2, "chosen_safety_score"] = 0.9  # only pair 2 passes the gate

    def only_pair_2(n):
        asked.append(n)
        return [2] * n

    cfg = policy_cfg(safety_gate={"unsafe": "skip"})
    result = train_dual_adapter(
        unsafe_but_one,
        memory(0),
        start=DualStart(tiny_student),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        batching=DualBatching(pair_sampler=only_pair_2),
    )
    assert asked == [3, 3, 3]  # one call per step, for batch_size pair rows
    assert all(h["gate/skipped"] == 0 for h in result.history)  # the uniform order would have drawn the unsafe pairs


def test_extra_pair_rows_train_beside_full_pair_batches(tiny_student, tmp_path):
    """An online update's dimension pairs (laid out last) are drawn beside each step's batch_size pair rows,
    each once per pass, and never take a batch row's place."""
    from hominem_pipeline.core.policy.dual import beside_sampler

    asked, drawn = [], []
    draw = beside_sampler(4, 2, 1, seed=0)

    def sampler(n):
        asked.append(n)
        drawn.append(draw(n))
        return drawn[-1]

    result = train_dual_adapter(
        pairs(6),
        memory(0),
        start=DualStart(tiny_student),
        cfg=policy_cfg(),
        out_dir=tmp_path,
        seed=0,
        batching=DualBatching(pair_sampler=sampler, extra_pair_rows=1),
    )
    assert asked == [4, 4, 4] and result.channels["pair_rows"] == 12  # 3 steps x (3 batch rows + 1 beside)
    assert all(sum(i >= 4 for i in rows) == 1 for rows in drawn)  # one dimension pair per step ...
    assert sorted(rows[-1] for rows in drawn[:2]) == [4, 5]  # ... each once per pass
    assert sorted([i for rows in drawn for i in rows if i < 4][:4]) == [
        0,
        1,
        2,
        3,
    ]  # the batch's pairs each once per pass too
    assert sorted(beside_sampler(0, 3, 1, seed=0)(3)) == [0, 1, 2] and sorted(beside_sampler(3, 0, 1, seed=0)(3)) == [
        0,
        1,
        2,
    ]
    assert beside_sampler(0, 0, 1, seed=0)(3) == []


def test_memory_rows_per_step_rehearse_every_row_beside_full_pair_batches(tiny_student, tmp_path):
    result = train_dual_adapter(
        pairs(),
        memory(7),
        start=DualStart(tiny_student),
        cfg=policy_cfg(),
        out_dir=tmp_path,
        seed=0,
        batching=DualBatching(memory_per_step=3),
    )
    channels = result.channels
    assert channels["memory_rows_per_batch"] == 3 and (channels["memory_rows"], channels["pair_rows"]) == (
        9,
        9,
    )  # 3 steps x (3 pairs + 3 rows)
    assert result.history[0]["memory"] > 0


def test_a_gate_that_skips_every_pair_learns_nothing_from_them(tiny_student, tmp_path):
    cfg = policy_cfg(sft_weight=1.0, safety_gate={"unsafe": "skip"})
    result = train_dual_adapter(
        pairs(safety=0.1), memory(0), start=DualStart(tiny_student), cfg=cfg, out_dir=tmp_path, seed=0
    )
    assert all(h["loss"] == 0 and h["gate/skipped"] == 3 for h in result.history)
    assert all(v.abs().sum() == 0 for v in lora_b(tmp_path))  # no gradient reached the adapter


def test_inverted_pairs_are_learned_the_other_way(tiny_student, tmp_path):
    forward = train_dual_adapter(
        pairs(),
        memory(0),
        start=DualStart(tiny_student),
        cfg=policy_cfg(sft_weight=0.0),
        out_dir=tmp_path / "f",
        seed=0,
    )
    inverted = train_dual_adapter(
        pairs(safety=0.1),
        memory(0),
        start=DualStart(tiny_student),
        cfg=policy_cfg(sft_weight=0.0, safety_gate={"unsafe": "invert"}),
        out_dir=tmp_path / "i",
        seed=0,
    )
    assert forward.history[-1]["rewards/margins"] > 0  # learns to prefer chosen
    assert inverted.history[-1]["rewards/margins"] < 0  # learns to prefer the other reply
    assert all(h["gate/inverted"] == 3 for h in inverted.history)


def test_memory_rows_alone_train_the_sft_channel(tiny_student, tmp_path):
    result = train_dual_adapter(
        pairs(0), memory(), start=DualStart(tiny_student), cfg=policy_cfg(), out_dir=tmp_path, seed=0
    )
    assert result.channel_contributions == {"sft": 1.0, "reward": 0.0}
    assert result.channels["memory_rows"] == 9 and result.history[-1]["sft"] < result.history[0]["sft"]


def test_anchored_memory_rows_hold_the_base_and_teach_only_the_margin(tiny_student, tmp_path):
    held = train_dual_adapter(
        pairs(0),
        memory(),
        start=DualStart(tiny_student),
        cfg=policy_cfg(memory_margin=0.0),
        out_dir=tmp_path / "h",
        seed=0,
    )
    assert all(h["sft"] == 0 for h in held.history)  # the adapter starts as the base, so nothing is above it
    assert all(v.abs().sum() == 0 for v in lora_b(tmp_path / "h"))
    taught = train_dual_adapter(
        pairs(0),
        memory(),
        start=DualStart(tiny_student),
        cfg=policy_cfg(memory_margin=0.5),
        out_dir=tmp_path / "t",
        seed=0,
    )
    assert taught.history[0]["sft"] == pytest.approx(0.5)  # w_sft 1 * (nll - ref + 0.5) with nll == ref
    assert taught.history[-1]["sft"] < 0.5 and all(
        h["memory"] == h["sft"] for h in taught.history
    )  # no pairs: all SFT is memory rows


def test_dual_refuses_when_there_is_nothing_to_learn(tiny_student, tmp_path):
    with pytest.raises(ValueError, match="preference pairs or memory rows"):
        train_dual_adapter(
            pairs(0), memory(0), start=DualStart(tiny_student), cfg=policy_cfg(), out_dir=tmp_path, seed=0
        )


@pytest.mark.parametrize(
    "mixing, fraction, rows, n_memory, n_pairs, expected",
    [
        ("fixed", 0.25, "share", 10, 100, (3, 1)),
        ("fixed", 0.5, "share", 10, 100, (2, 2)),
        ("availability", 0.5, "share", 10, 100, (3, 1)),
        ("availability", 0.5, "share", 100, 100, (2, 2)),
        ("availability", 0.25, "share", 0, 100, (4, 0)),
        ("availability", 0.25, "share", 10, 0, (0, 4)),
        ("fixed", 1.0, "share", 10, 10, (1, 3)),
        ("fixed", 0.0, "share", 10, 10, (4, 0)),
        ("fixed", 0.25, "extra", 10, 100, (4, 1)),
        ("fixed", 1.0, "extra", 10, 10, (4, 4)),
        ("availability", 0.5, "extra", 100, 100, (4, 2)),
        ("availability", 0.25, "extra", 0, 100, (4, 0)),
        ("availability", 0.25, "extra", 10, 0, (0, 4)),
        ("fixed", 0.0, "extra", 10, 10, (4, 0)),
    ],
)
def test_batch_mixing_follows_the_setting_and_the_data(mixing, fraction, rows, n_memory, n_pairs, expected):
    cfg = policy_cfg(mixing=mixing, memory_fraction=fraction, memory_rows=rows).dual
    assert batch_rows(cfg, 4, n_memory, n_pairs) == expected


def test_intensity_and_safety_come_from_the_configured_source():
    frame = pairs(3).assign(chosen_reward_intensity=[0.2, 0.4, 0.6])
    teacher = pair_labels(frame, policy_cfg().dual)
    assert teacher.intensity.tolist() == pytest.approx(
        [0.5, 1.0, 1.5]
    ) and teacher.raw_intensity_mean == pytest.approx(0.4)
    raw = pair_labels(frame, policy_cfg(normalize_intensity=False).dual)
    assert raw.intensity.tolist() == pytest.approx([0.2, 0.4, 0.6])
    assert pair_labels(frame, policy_cfg(intensity_source="constant").dual).intensity.tolist() == [1.0, 1.0, 1.0]

    class Scorer:
        def raw_scores(self, prompts, responses):
            return {"reward_intensity": np.array([0.1, 0.1, 0.4]), "safety_score": np.array([0.2, 0.9, 0.9])}

    rm = pair_labels(
        frame,
        policy_cfg(intensity_source="reward_model", safety_source="reward_model", normalize_intensity=False).dual,
        Scorer(),
    )
    assert rm.intensity.tolist() == pytest.approx([0.1, 0.1, 0.4]) and rm.safety.tolist() == pytest.approx(
        [0.2, 0.9, 0.9]
    )
    with pytest.raises(ValueError, match="from the reward model, but none was given"):
        pair_labels(frame, policy_cfg(intensity_source="reward_model").dual)


def test_sequences_are_tokenised_as_trls_dpo_does(tiny_student, tmp_path):
    """The reward channel scores exactly the tokens TRL's DPO scores: same ids, same completion tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from hominem_pipeline.core.policy.dpo import pairs_to_dpo_dataset

    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    frame = pairs(2)
    args = DPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
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
        model=AutoModelForCausalLM.from_pretrained(tiny_student),
        args=args,
        train_dataset=pairs_to_dpo_dataset(frame),
        processing_class=tokenizer,
    )
    batch = next(iter(trainer.get_train_dataloader()))
    for row, ids, attention, completion in zip(
        frame.itertuples(), batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
    ):
        seq, start = encode(tokenizer, row.prompt, row.chosen, 64)
        real = int(attention.sum())
        assert ids[:real].tolist() == seq
        assert completion[:real].nonzero().flatten().tolist() == list(range(start, len(seq)))


def test_long_exchanges_keep_the_reply_and_the_end_of_the_prompt(tiny_student):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    seq, start = encode(tokenizer, "word " * 200 + "LAST QUESTION?", "A short reply.", 48)
    assert len(seq) == 48
    assert "short reply" in tokenizer.decode(seq[start:]) and "QUESTION" in tokenizer.decode(seq[:start])
    seq, start = encode(tokenizer, "Hi?", "long " * 200, 48)
    assert (
        len(seq) == 48 and start == 24
    )  # the reply keeps half the budget; the prompt (with its system turn) the rest


def test_a_reply_without_its_end_of_turn_teaches_the_words_but_not_the_stop(tiny_student):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    whole, start = encode(tokenizer, "What is the capital of France?", "The capital of France is Paris.", 64)
    words, start_words = encode(
        tokenizer, "What is the capital of France?", "The capital of France is Paris.", 64, end_of_turn=False
    )
    assert start_words == start and whole[: len(words)] == words and len(words) < len(whole)
    assert tokenizer.decode(words[start:]).strip() == "The capital of France is Paris."
    end_of_turn = tokenizer.decode(whole[len(words) :])
    assert (
        end_of_turn.strip() and end_of_turn.strip() in tokenizer.chat_template
    )  # the template's own end-of-turn, nothing else


def test_pair_replies_cut_at_the_token_budget_are_not_taught_to_stop(tiny_student):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    frame = pd.DataFrame(
        [
            {
                "prompt": "Tell me about rain.",
                "chosen": "Rain falls when clouds",
                "rejected": "No.",
                "chosen_finished": False,
                "rejected_finished": True,
            }
        ]
    )
    [(chosen, rejected)] = pair_sequences(tokenizer, frame, 64)
    assert chosen == encode(tokenizer, "Tell me about rain.", "Rain falls when clouds", 64, end_of_turn=False)
    assert rejected == encode(tokenizer, "Tell me about rain.", "No.", 64)
    [(old_chosen, _)] = pair_sequences(tokenizer, frame.drop(columns=["chosen_finished", "rejected_finished"]), 64)
    assert len(old_chosen[0]) > len(chosen[0])  # without the flags every reply ends with its end-of-turn, as before


def test_trl_dpo_drops_the_end_of_turn_of_cut_replies_as_dual_does(tiny_student, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig

    from hominem_pipeline.core.policy.dpo import dpo_trainer_class, pairs_to_dpo_dataset

    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    frame = pairs(2).assign(chosen_finished=[False, True], rejected_finished=[True, False])
    args = DPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_length=64,
        bf16=False,
        activation_checkpointing=False,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        save_strategy="no",
    )
    trainer = dpo_trainer_class()(
        model=AutoModelForCausalLM.from_pretrained(tiny_student),
        args=args,
        train_dataset=pairs_to_dpo_dataset(frame),
        processing_class=tokenizer,
    )
    for row, expected in zip(trainer.train_dataset, pair_sequences(tokenizer, frame, 64)):
        for side, (seq, start) in zip(("chosen", "rejected"), expected):
            assert row["prompt_ids"] + row[f"{side}_ids"] == seq


def test_the_reference_is_scored_once_per_sequence_as_a_whole_batch_scores_it(tiny_student, tmp_path):
    """The reference (the base: adapter off) never changes, so each sequence's log-probability is
    computed once, by content, and reused: the same values a pass over the whole batch gives, in any
    order; kept in a file, it serves later runs on the same base and no other."""
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from hominem_pipeline.core.policy.dual import load_reference_cache, reference_logps, save_reference_cache
    from hominem_pipeline.core.policy.lora import lora_student
    from hominem_pipeline.core.policy.sequences import sequence_logps

    model, tokenizer, base = lora_student(tiny_student, policy_cfg())
    add_fused_lm_head(model.get_base_model())  # as the trainer sets it up
    seqs = [s for pair in pair_sequences(tokenizer, pairs(3), 64) for s in pair]
    cache: dict = {}
    first = reference_logps(model, seqs[:2], cache, tokenizer.pad_token_id)
    every = reference_logps(model, seqs, cache, tokenizer.pad_token_id)
    with torch.no_grad(), model.disable_adapter():
        whole, _ = sequence_logps(model, seqs, tokenizer.pad_token_id)
    torch.testing.assert_close(every, whole.float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(every[:2], first)
    assert len(cache) == len(seqs)
    torch.testing.assert_close(
        reference_logps(model, list(reversed(seqs)), cache, tokenizer.pad_token_id), every.flip(0)
    )
    save_reference_cache(tmp_path / "ref.json", base, cache)
    assert (
        load_reference_cache(tmp_path / "ref.json", base) == cache
        and load_reference_cache(tmp_path / "ref.json", "another base") == {}
    )


def test_a_reference_cache_file_spares_the_next_run_the_base_s_passes(tiny_student, tmp_path):
    cfg, ref = policy_cfg(), tmp_path / "reference.json"
    runs = [
        train_dual_adapter(
            pairs(),
            memory(),
            start=DualStart(tiny_student, reference_cache=ref),
            cfg=cfg,
            out_dir=tmp_path / name,
            seed=0,
        )
        for name in ("first", "second")
    ]
    assert runs[0].channels["reference_sequences"] > 0 and runs[1].channels["reference_sequences"] == 0
    assert all(
        a.equal(b) for a, b in zip(lora_b(tmp_path / "first"), lora_b(tmp_path / "second"))
    )  # the same values, read back


def test_shipped_reference_log_probabilities_are_read_and_never_written_back(tiny_student, tmp_path):
    """`ship_reference` writes the base's log-probability of each people's pair's sequences for this base;
    training on those pairs then measures none of them (and trains exactly as without them), and the
    project's own reference cache keeps only what it measured."""
    from hominem_pipeline.core.builds.shipping import ship_reference
    from hominem_pipeline.core.policy.dual import load_reference_cache, shipped_reference_file

    cfg, shipped = policy_cfg(), tmp_path / "features"
    people = pairs(3)
    path, rows, measured = ship_reference(tiny_student, cfg, people, shipped)
    assert path.is_file() and rows == measured == 6  # each pair's chosen and rejected sequence
    again = ship_reference(tiny_student, cfg, people, shipped)
    assert again[1:] == (6, 0)  # already shipped: nothing measured
    plain = train_dual_adapter(
        people, memory(0), start=DualStart(tiny_student), cfg=cfg, out_dir=tmp_path / "plain", seed=0
    )
    local = tmp_path / "reference.json"
    read = train_dual_adapter(
        people,
        memory(0),
        start=DualStart(tiny_student, reference_cache=local, shipped_reference=shipped),
        cfg=cfg,
        out_dir=tmp_path / "read",
        seed=0,
    )
    assert plain.channels["reference_sequences"] == 6 and read.channels["reference_sequences"] == 0
    assert all(
        np.allclose(a.numpy(), b.numpy(), atol=1e-6)
        for a, b in zip(lora_b(tmp_path / "plain"), lora_b(tmp_path / "read"))
    )
    assert (
        load_reference_cache(local, read.base_checksum) == {}
        and shipped_reference_file(shipped, read.base_checksum) == path
    )


def test_a_mixed_sampler_gives_people_s_pairs_their_share_of_every_batch():
    """People's pairs (after the ranked ones) take `people_share` of the rows, exactly over a run, each
    once per pass; the rest come from the ranked pairs' own sampler; with one kind absent, all rows are
    the other's."""
    from hominem_pipeline.core.policy.dual import mixed_sampler

    asked = []

    def ranked(n):
        asked.append(n)
        return [0] * n

    draw = mixed_sampler(3, 4, 0.5, seed=0, ranked=ranked)
    batches = [draw(3) for _ in range(8)]
    people = [i for b in batches for i in b if i >= 3]
    assert len(people) == 12 and sum(asked) == 12  # half of 24 rows
    assert sorted(people[:4]) == sorted(people[4:8]) == [3, 4, 5, 6]  # each people's pair once per pass
    assert all(i in (0, 3, 4, 5, 6) for b in batches for i in b)
    only_people = mixed_sampler(0, 4, 0.2, seed=0)
    assert sorted(only_people(4)) == [0, 1, 2, 3] and len(only_people(5)) == 5
    no_people = mixed_sampler(5, 0, 0.9, seed=0)
    assert sorted(no_people(5)) == [0, 1, 2, 3, 4]


def test_lora_on_the_last_layers_only_and_a_clear_error_beyond_the_student_s_depth(tiny_student):
    """policy.lora.layers: N wraps the last N decoder layers alone (the 2-layer student: layer 1); more
    layers than the student has is refused, naming both numbers."""
    from hominem_pipeline.core.policy.lora import lora_student

    model, _, _ = lora_student(
        tiny_student, policy_cfg().model_copy(update={"lora": policy_cfg().lora.model_copy(update={"layers": 1})})
    )
    wrapped = {name.split(".layers.")[1].split(".")[0] for name, _ in model.named_parameters() if "lora_A" in name}
    assert wrapped == {"1"}
    with pytest.raises(
        ValueError,
        match=r"policy.lora.layers is 3, but the student .* has 2 decoder layers; set it to 1-2, or null for all",
    ):
        lora_student(
            tiny_student, policy_cfg().model_copy(update={"lora": policy_cfg().lora.model_copy(update={"layers": 3})})
        )


def test_a_fresh_adapter_starts_from_the_shipped_peoples_start_only_where_it_fits(tiny_student, tmp_path):
    """The people's start (`policy.people_start`): trained once on the people's pairs and shipped; a daily
    adapter starts from its weights (not zero: it already prefers the chosen replies), kept when nothing
    changed, and left aside, saying why, for another LoRA shape or other pairs."""
    from hominem_pipeline.core.builds.shipping import ship_people_start
    from hominem_pipeline.core.policy.people_start import pairs_key, people_start_file

    def cfg(**policy):
        return load_config(
            root=REPO,
            overrides={
                "policy": {
                    **TINY_POLICY,
                    "mode": "dual",
                    "dual": {"people_start": {"max_steps": 4, "learning_rate": 0.01}},
                    **policy,
                }
            },
        ).policy

    people, folder = pairs().assign(pair_id=[f"p{i}" for i in range(4)]), tmp_path / "features"
    path, n, trained = ship_people_start(tiny_student, cfg(), people, memory(), folder)
    before = base_checksum(__import__("transformers").AutoModelForCausalLM.from_pretrained(tiny_student))
    assert path == people_start_file(folder, before) and (n, trained) == (4, 4) and path.is_file()
    assert ship_people_start(tiny_student, cfg(), people, memory(), folder) == (
        path,
        4,
        0,
    )  # the same settings and data: kept
    shipped = load_file(str(path))

    def started(policy_cfg, key=pairs_key(people), out="daily"):
        result = train_dual_adapter(
            pairs(),
            memory(),
            start=DualStart(tiny_student, people_start=(folder, key)),
            cfg=policy_cfg,
            out_dir=tmp_path / out,
            seed=0,
        )
        return result.channels["start"], result.history[0]

    start, first = started(cfg(learning_rate=1e-12))
    assert start.startswith(f"the people's start {path.name}: 4 steps over 4 people's pairs")
    daily = load_file(str(tmp_path / "daily" / "adapter_model.safetensors"))
    assert set(daily) == set(shipped) and all(
        np.allclose(daily[k].numpy(), shipped[k].numpy(), atol=1e-6) for k in shipped
    )
    other, fresh = started(cfg(lora={**TINY_POLICY["lora"], "r": 2}), out="r2")
    assert other.startswith("a fresh LoRA:") and "was trained for LoRA" in other
    # a zero adapter is the reference (every margin 0); the start already orders the pairs as people did
    assert (
        fresh["rewards/accuracies"] == 0.0 and first["rewards/accuracies"] == 1.0 and first["reward"] < fresh["reward"]
    )
    assert "other people's pairs" in started(cfg(), key="another", out="other")[0]
    assert (
        started(cfg(), out="none")[0]
        and "no people's start"
        in train_dual_adapter(
            pairs(),
            memory(),
            start=DualStart(tiny_student, people_start=(tmp_path / "nowhere", "k")),
            cfg=cfg(),
            out_dir=tmp_path / "empty",
            seed=0,
        ).channels["start"]
    )


def test_the_dominance_monitor_measures_each_channel_s_share_and_rebalances_above_the_cap(tiny_student, tmp_path):
    """Every k-th step each channel's share of the gradient is measured (shares sum to 1) and reported;
    measuring alone learns what one backward pass learns. With max_share, a channel above it is scaled
    down to exactly that share on the step it was measured, and its loss weighs less from then on."""
    kw = dict(start=DualStart(tiny_student), out_dir=tmp_path / "a", seed=0)
    plain = train_dual_adapter(
        pairs(), memory(), cfg=policy_cfg(mixing="fixed", memory_fraction=0.34, channels={"monitor_every": 0}), **kw
    )
    watched = train_dual_adapter(
        pairs(),
        memory(),
        cfg=policy_cfg(mixing="fixed", memory_fraction=0.34, channels={"monitor_every": 2}),
        **(kw | {"out_dir": tmp_path / "b"}),
    )
    assert plain.channels["measured_steps"] == 0 and plain.channels["gradient_share"] is None
    assert watched.channels["measured_steps"] == 2 and [("share/memory" in h) for h in watched.history] == [
        True,
        False,
        True,
    ]  # steps 1 and 3
    for h in watched.history[::2]:
        assert h["share/memory"] + h["share/reward"] == pytest.approx(1.0) and 0 < h["share/memory"] < 1
    for a, b in zip(lora_b(tmp_path / "a"), lora_b(tmp_path / "b")):
        assert torch.allclose(a, b, atol=1e-5)  # the same training, measured
    first = watched.history[0]
    top = max(("memory", "reward"), key=lambda c: first[f"share/{c}"])
    cap = (first[f"share/{top}"] + 0.5) / 2  # below what the top channel had
    capped = train_dual_adapter(
        pairs(),
        memory(),
        cfg=policy_cfg(mixing="fixed", memory_fraction=0.34, channels={"monitor_every": 1, "max_share": cap}),
        **(kw | {"out_dir": tmp_path / "c"}),
    )
    assert capped.channels["rebalanced_steps"] >= 1 and capped.channels["balance"][top] < 1.0
    assert capped.history[0][f"share/{top}"] == pytest.approx(first[f"share/{top}"])  # measured before the cut ...
    assert capped.channels["gradient_share_max"][top] <= first[f"share/{top}"] + 1e-6


def test_each_channel_learns_at_its_own_rate(tiny_student, tmp_path):
    """Per-channel learning rates: each channel has its own AdamW, so with the reward channel off, the
    memory channel's factor scales how far the adapter moves from where it started (AdamW's step is
    proportional to its rate)."""

    def moved(factor, out):
        train_dual_adapter(
            pd.DataFrame(columns=pairs().columns),
            memory(),
            start=DualStart(tiny_student),
            out_dir=out,
            seed=0,
            cfg=policy_cfg(reward_weight=0.0, channels={"memory_lr_factor": factor}),
        )
        return float(sum(b.abs().sum() for b in lora_b(out)))

    full, slow = moved(1.0, tmp_path / "full"), moved(0.1, tmp_path / "slow")
    assert full > 0 and slow == pytest.approx(0.1 * full, rel=0.2)
