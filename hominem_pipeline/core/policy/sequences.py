"""A chat exchange as the student's token ids, and the summed log-probability of its reply: what the
DPO and dual trainers train on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch


def encode(
    tokenizer: Any, prompt: str, response: str, max_length: int, end_of_turn: bool = True
) -> tuple[list[int], int]:
    """(token ids, index of the first response token) of one chat exchange in the student's template,
    the response ending with the template's end-of-turn (without it when `end_of_turn` is False: the
    sequence then teaches what to say, not where to stop). Over `max_length`, the response keeps at least
    half the budget (its end cut) and the prompt loses its start, so the latest turn stays."""
    from hominem_pipeline.core.lm.generation import chat_text

    prompt_text = chat_text(tokenizer, prompt)
    full = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False
    )
    completion = full[len(prompt_text) :] if full.startswith(prompt_text) else response + (tokenizer.eos_token or "")
    if not end_of_turn and response.strip() and response.strip() in completion:
        completion = completion[: completion.index(response.strip()) + len(response.strip())]
    p = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    c = tokenizer(completion, add_special_tokens=False)["input_ids"]
    c = c[: min(max_length - 1, max(max_length // 2, max_length - len(p)))]
    p = p[len(p) - (max_length - len(c)) :] if len(p) + len(c) > max_length else p
    return p + c, len(p)


def pair_sequences(
    tokenizer: Any, pairs: pd.DataFrame, max_length: int
) -> list[tuple[tuple[list[int], int], tuple[list[int], int]]]:
    """(chosen, rejected) encoded per pair. A reply the teacher's token budget cut (`chosen_finished` /
    `rejected_finished` False) keeps no end-of-turn: it was not ended there, so neither channel teaches
    the student to stop mid-sentence."""
    return [
        (
            encode(tokenizer, r.prompt, r.chosen, max_length, end_of_turn=bool(getattr(r, "chosen_finished", True))),
            encode(
                tokenizer, r.prompt, r.rejected, max_length, end_of_turn=bool(getattr(r, "rejected_finished", True))
            ),
        )
        for r in pairs.itertuples()
    ]


def sequence_logps(
    model: Any, sequences: Sequence[tuple[list[int], int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed log-probability of each sequence's response tokens, their count), one forward pass.

    `model` carries TRL's fused LM head (`trl.trainer.add_fused_lm_head`, as TRL's DPO does): it projects
    through the LM head in tiles and returns per-token log-probabilities without materialising the
    (batch, length, vocabulary) logits, which on a 49k vocabulary would be most of the step's memory."""
    device = next(model.parameters()).device
    width = max(len(ids) for ids, _ in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (seq, start) in enumerate(sequences):
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        labels[i, max(start, 1) : len(seq)] = ids[i, max(start, 1) : len(seq)]
    out = model(
        input_ids=ids.to(device), attention_mask=attention.to(device), labels=labels.to(device), fused_lm_head=True
    )
    return out.log_probs.sum(1), (labels[:, 1:] != -100).sum(1).to(device)


def right_padded(rows: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) of token rows padded on the right, so each row's positions are its own."""
    ids = torch.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for j, row in enumerate(rows):
        ids[j, : len(row)] = torch.tensor(row)
        mask[j, : len(row)] = 1
    return ids, mask


def reply_logps(
    model: Any, sequences: Sequence[tuple[list[int], int]], pad_id: int, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sequence_logps` for inference, from the full logits in batches of similar length: (summed
    log-probability of each sequence's response tokens, their count), in the order given. On a CPU
    this is several times faster than the fused head's tiles; the logits of a batch are held at once."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    sums, counts = torch.zeros(len(sequences), dtype=torch.float64), torch.zeros(len(sequences), dtype=torch.long)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids, mask = right_padded([sequences[i][0] for i in rows], pad_id)
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, :-1].float()
            token_logps = logits.log_softmax(-1).gather(-1, ids[:, 1:, None].to(device))[..., 0].cpu()
            for j, i in enumerate(rows):
                seq, begin = sequences[i]
                picked = token_logps[j, max(begin, 1) - 1 : len(seq) - 1]
                sums[i], counts[i] = picked.double().sum(), len(picked)
    return sums, counts
