"""Batched chat generation with a causal LM (left-padded), shared by the teacher and evaluation."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Generated:
    text: str
    new_tokens: int
    finished: bool  # False when generation stopped at max_new_tokens


def chat_text(tokenizer: Any, user: str, system: str | None = None) -> str:
    return messages_text(
        tokenizer, ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    )


def messages_text(tokenizer: Any, messages: Sequence[dict[str, str]]) -> str:
    """A conversation (role/content dicts, the last the user's) as the model reads it before its reply."""
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)


_SENTENCE_END = re.compile(r"""[.!?\u2026]+["')\]\u201d\u2019*_]*(?=\s|$)""")
_NUMBERED = re.compile(r"\s*\d+[.)]")  # a list item's number: it ends no sentence


def end_at_sentence(text: str) -> str:
    """A reply cut off by its token limit, ended at its last finished sentence (`.`, `!`, `?` or `…`,
    with any closing quote or bracket), or at its last full line when that comes later; unchanged when
    it has neither (one long unfinished sentence reads better whole than empty)."""
    body = text.rstrip()
    ends = [m.end() for m in _SENTENCE_END.finditer(body)]
    line = body.rfind("\n")
    cut = max(ends[-1] if ends else 0, line if line > 0 and body[:line].strip() else 0)
    return body[:cut].rstrip() if cut else text


def opening(text: str) -> str | None:
    """A reply without its last sentence (or last line, when that comes later): where a different ending may be
    sampled. None for a reply of one sentence."""
    body = text.rstrip()
    cuts = [m.end() for m in _SENTENCE_END.finditer(body)] + [i for i, c in enumerate(body) if c == "\n"]
    cuts = [
        c
        for c in cuts
        if body[:c].strip() and body[c:].strip() and not _NUMBERED.fullmatch(body[body.rfind("\n", 0, c) + 1 : c])
    ]
    return body[: max(cuts)].rstrip() if cuts else None


def as_shown(text: str, finished: bool) -> tuple[str, bool]:
    """(text, finished) of a reply as the page shows it: one the token limit cut ends at its last sentence
    (`end_at_sentence`) and reads as whole when it was cut back to a sentence or line, or stopped at a sentence's end
    already; one with no sentence end to cut at stays unfinished."""
    if finished:
        return text, True
    kept = end_at_sentence(text)
    return kept, kept.rstrip() != text.rstrip() or ends_at_sentence(kept)


def degenerate(reply: str) -> str | None:
    """Why `reply` is not a usable answer (empty, no letters, one word over and over), or None."""
    text = reply.strip()
    if not text:
        return "an empty reply"
    words = re.findall(r"[^\W\d_]+", text.lower())
    if not words:
        return f"no words, only symbols: {text[:40]!r}"
    if len(words) >= 6 and len(set(words)) / len(words) < 0.25:
        return f"the same few words over and over: {text[:60]!r}"
    return None


def ends_at_sentence(text: str) -> bool:
    """Whether `text` ends with a finished sentence."""
    body = text.rstrip()
    ends = [m.end() for m in _SENTENCE_END.finditer(body)]
    return bool(ends) and ends[-1] == len(body)


_SYMBOL_TOKENS: dict[tuple[str, int], list[int]] = {}


def symbol_token_ids(tokenizer: Any) -> list[int]:
    """The tokens that hold no letter or digit but an emoji, a symbol, or a piece of a multi-byte
    character (byte-level BPE splits most emoji into such pieces); once per tokenizer."""
    import unicodedata

    key = (str(getattr(tokenizer, "name_or_path", "")), len(tokenizer))
    if key not in _SYMBOL_TOKENS:

        def symbolic(text: str) -> bool:
            return (
                bool(text.strip())
                and not any(c.isalnum() for c in text)
                and ("\ufffd" in text or any(unicodedata.category(c) == "So" for c in text))
            )

        _SYMBOL_TOKENS[key] = [i for i in range(len(tokenizer)) if symbolic(tokenizer.decode([i]))]
    return _SYMBOL_TOKENS[key]


def decoding_settings(
    tokenizer: Any,
    max_new_tokens: int,
    temperature: float | None,
    top_p: float | None,
    repetition_penalty: float,
    plain_start: bool = False,
) -> dict[str, Any]:
    """`model.generate`'s decoding settings: greedy when `temperature` is None, else sampling; with
    `plain_start`, the first token may not be an emoji or symbol (`symbol_token_ids`)."""
    sampling = temperature is not None
    return {
        "max_new_tokens": max_new_tokens,
        "do_sample": sampling,
        "temperature": temperature if sampling else None,
        "top_p": top_p if sampling else None,
        "top_k": None,
        "repetition_penalty": repetition_penalty,
        "pad_token_id": tokenizer.pad_token_id,
        **({"begin_suppress_tokens": symbol_token_ids(tokenizer)} if plain_start else {}),
    }


def stream_reply(
    model: Any,
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    *,
    max_new_tokens: int,
    seed: int,
    temperature: float | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    plain_start: bool = False,
) -> Iterator[str]:
    """The reply to `messages`, yielded in pieces of text as the model writes them (greedy when
    `temperature` is None, else seeded sampling, as `generate`); joined, the pieces are the reply
    `generate` gives for the same conversation and settings, before its strip."""
    import threading

    import torch
    from transformers import TextIteratorStreamer

    enc = tokenizer([messages_text(tokenizer, messages)], return_tensors="pt", add_special_tokens=False).to(
        model.device
    )
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    failure: list[BaseException] = []

    def run() -> None:
        torch.manual_seed(seed)
        try:
            with torch.inference_mode():
                model.generate(
                    **enc,
                    **decoding_settings(
                        tokenizer, max_new_tokens, temperature, top_p, repetition_penalty, plain_start
                    ),
                    streamer=streamer,
                )
        except BaseException as exc:  # handed to the reader, who would otherwise wait forever
            failure.append(exc)
            streamer.end()

    worker = threading.Thread(target=run, name="hominem-stream", daemon=True)
    worker.start()
    for piece in streamer:
        if piece:
            yield piece
    worker.join()
    if failure:
        raise failure[0]


def generate(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    *,
    max_new_tokens: int,
    seed: int,
    temperature: float | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    plain_start: bool = False,
    strip: bool = True,
) -> list[Generated]:
    """One left-padded batch; greedy when `temperature` is None, else seeded sampling; `plain_start`: see
    `decoding_settings`; `strip` false keeps the space or line break a reply begins with (a continuation's)."""
    import torch

    if tokenizer.padding_side != "left":
        raise ValueError("generation needs a left-padding tokenizer (tokenizer.padding_side = 'left')")
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(
            **enc, **decoding_settings(tokenizer, max_new_tokens, temperature, top_p, repetition_penalty, plain_start)
        )
    new = out[:, enc["input_ids"].shape[1] :].cpu()
    eos = tokenizer.eos_token_id
    results = []
    for row in new:
        ids = row.tolist()
        finished = eos in ids
        if finished:
            ids = ids[: ids.index(eos)]
        ids = [i for i in ids if i != tokenizer.pad_token_id]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        results.append(Generated(text.strip() if strip else text.rstrip(), len(ids), finished))
    return results
