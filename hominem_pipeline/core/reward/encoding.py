"""How an exchange (prompt, reply) becomes the token ids the reward network reads: plain pairs, or the
offline judge's own frame, cut to `max_length`; and length-sorted batches for scoring."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch


def _cut_exchange(tokenizer: Any, prompt: str, response: str, budget: int) -> tuple[list[int], list[int]]:
    """Prompt and response tokens in at most `budget` together: the response keeps its start (up to 3/4
    of the budget), the prompt its end (the latest turn)."""
    # verbose=False: the texts are cut here, so the "longer than the model's maximum" notice is noise.
    p = tokenizer.encode(prompt, add_special_tokens=False, verbose=False)
    r = tokenizer.encode(response, add_special_tokens=False, verbose=False)
    r = r[: max(budget - len(p), (3 * budget) // 4)]
    return p[max(0, len(p) - (budget - len(r))) :], r


def encode_pair(tokenizer: Any, prompt: str, response: str, max_length: int) -> list[int]:
    """[CLS] prompt [SEP] response [SEP] in at most `max_length` tokens: the response keeps its start
    (up to 3/4 of the budget), the prompt keeps its end (the latest turn), which is what is judged.
    Decoders without CLS/SEP get their BOS/EOS tokens instead."""
    p, r = _cut_exchange(tokenizer, prompt, response, max_length - 3)
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    return [t for t in (start,) if t is not None] + p + [sep] + r + [sep]


FRAME_PARTS = (
    "head",
    "before",
    "between",
    "after",
)  # the fixed texts of a frame, in the order they surround the exchange


def frame_tokens(tokenizer: Any, frame: dict[str, str]) -> list[list[int]]:
    """The token ids of the frame's fixed parts (`FRAME_PARTS`), each encoded on its own as the model reads them."""
    return [tokenizer.encode(frame[k], add_special_tokens=False, verbose=False) for k in FRAME_PARTS]


def frame_prefix(tokenizer: Any, frame: dict[str, str] | None, kind: str) -> torch.Tensor | None:
    """The token ids every framed input starts with (head, then the text before the prompt), for
    `RewardNet.shared_prefix`; None without a frame or for an encoder, whose prefix states depend on
    what follows."""
    if frame is None or kind != "decoder":
        return None
    head, before, _, _ = frame_tokens(tokenizer, frame)
    return torch.tensor(head + before)


def encode_framed(tokenizer: Any, fixed: list[list[int]], prompt: str, response: str, max_length: int) -> list[int]:
    """head + before + prompt + between + response + after, in at most `max_length` tokens, cut as
    `encode_pair` cuts (the response keeps its start, the prompt its end). `fixed`: the frame's parts as
    `frame_tokens` encodes them (once per model, not per reply)."""
    budget = max_length - sum(len(f) for f in fixed)
    if budget < 8:
        raise ValueError(
            f"reward_model.max_length {max_length} leaves {budget} tokens for the exchange after the "
            f"judge frame's {max_length - budget}; raise it"
        )
    p, r = _cut_exchange(tokenizer, prompt, response, budget)
    head, before, between, after = fixed
    return head + before + p + between + r + after


def judge_frame(tokenizer: Any, system: str, question: str | None = None) -> dict[str, str]:
    """The local judge's frame for `frame: judge`: the chat template's text up to the user's content
    (with `system`), then the judge's "Conversation to judge" lines. With `question` (`frame:
    judge_question`) the exchange is followed by that rubric question as the judge is asked it, up to
    "Rating: ", so the last token is where the judge gives its rating. Stored in METADATA, so a saved
    model scores as it was trained whatever the config says later."""
    from hominem_pipeline.core.lm.generation import chat_text

    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "reward_model.backbone.frame judge needs a backbone with a chat template (a chat model such "
            "as the student); use frame: pair"
        )
    from hominem_pipeline.core.teacher.base import JUDGE_FRAME, rubric_suffix

    marker = "\x00HOMINEM\x00"
    head, tail = chat_text(tokenizer, marker, system).split(marker)
    before, between, after = JUDGE_FRAME
    frame = {"kind": "judge", "head": head, "before": before, "between": between, "after": after}
    if question is not None:
        frame |= {"kind": "judge_question", "after": after + rubric_suffix(question, tail)}
    return frame


def make_encoder(tokenizer: Any, frame: dict[str, str] | None, max_length: int) -> Callable[[str, str], list[int]]:
    """(prompt, response) -> token ids, as the model was trained to read them."""
    if frame is None:
        return lambda p, r: encode_pair(tokenizer, p, r, max_length)
    fixed = frame_tokens(tokenizer, frame)
    return lambda p, r: encode_framed(tokenizer, fixed, p, r, max_length)


def pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def pad_batch(batch: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(x) for x in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    return ids, mask


def length_sorted_batches(
    encoded: list[list[int]], batch_size: int, pad: int
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """(positions, ids, mask) batches sorted by length, so each batch pads only to its own longest item."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        ids, mask = pad_batch([encoded[i] for i in idx], pad)
        yield idx, ids, mask
