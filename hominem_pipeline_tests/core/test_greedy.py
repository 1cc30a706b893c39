"""Greedy decoding of many prompts on one shared cache (`core/lm/greedy.py`): each reply is the one `generate`
writes for its prompt alone, whatever its limit, its length and the rows it shares steps with."""

from __future__ import annotations

import pytest

from hominem_pipeline.core.lm.generation import chat_text, generate
from hominem_pipeline.core.lm.greedy import greedy
from hominem_pipeline.core.lm.models import load_student

PROMPTS = [
    "hi",
    "tell me a long story about a dragon and a knight who argue about breakfast",
    "why?",
    "list three colours",
    "what is the capital of France, and why is it there?",
    "ok",
    "write a haiku about rain on a tin roof at night",
]
LIMITS = [3, 12, 7, 1, 9, 12, 5]


@pytest.fixture(scope="module")
def student(tiny_student):
    return load_student(tiny_student)


@pytest.mark.parametrize("rows", [2, 3, 96])
def test_each_reply_is_generate_s_for_its_prompt_alone_with_rows_joining_and_leaving(student, rows):
    """Rows of different prompt lengths and token limits, fewer places than prompts (rows join as others end),
    the repetition penalty (1.5, to make it bite) and the plain start on: every reply, its token count and whether
    it ended by itself equal `generate`'s one prompt at a time."""
    model, tokenizer = student
    texts = [chat_text(tokenizer, p) for p in PROMPTS]
    alone = [
        generate(model, tokenizer, [t], max_new_tokens=n, seed=0, repetition_penalty=1.5, plain_start=True)[0]
        for t, n in zip(texts, LIMITS)
    ]
    told = []
    got = greedy(
        model, tokenizer, texts, LIMITS, repetition_penalty=1.5, plain_start=True, rows=rows, done=told.append
    )
    assert got == alone
    assert all(g.new_tokens <= n for g, n in zip(got, LIMITS))
    assert sum(told) == len(PROMPTS)


def test_prompts_that_share_no_first_tokens_and_the_shared_prefix():
    """Chat prompts share their template's system turn (read once); raw prompts share nothing; one prompt keeps its
    last token to read itself."""
    from hominem_pipeline.core.lm.greedy import _shared_prefix

    assert _shared_prefix([[1, 2, 3, 4], [1, 2, 3, 9, 9], [1, 2, 7]]) == 2
    assert _shared_prefix([[5, 6, 7]]) == 2 and _shared_prefix([[5, 6, 7], [5, 6, 7]]) == 2
    assert _shared_prefix([[1, 2], [3, 4]]) == 0 and _shared_prefix([[1], [1, 2]]) == 0


def test_raw_prompts_with_no_shared_start_decode_as_alone(student):
    model, tokenizer = student
    texts = ["hello there", "why is the sky blue at noon", "ok"]
    alone = [generate(model, tokenizer, [t], max_new_tokens=6, seed=0, repetition_penalty=1.5)[0] for t in texts]
    assert greedy(model, tokenizer, texts, 6, repetition_penalty=1.5, rows=2) == alone


def test_one_limit_for_all_and_nothing_to_decode(student):
    model, tokenizer = student
    texts = [chat_text(tokenizer, p) for p in PROMPTS[:3]]
    assert greedy(model, tokenizer, texts, 4) == generate(model, tokenizer, texts, max_new_tokens=4, seed=0)
    assert greedy(model, tokenizer, [], 4) == []


@pytest.mark.parametrize(
    ("limits", "rows", "words"),
    [([4, 4], 8, "2 token limits for 3 prompts"), ([4, 0, 4], 8, "below 1"), (4, 0, "rows 0 is outside 1-1024")],
)
def test_bad_limits_or_rows_are_named(student, limits, rows, words):
    model, tokenizer = student
    texts = [chat_text(tokenizer, p) for p in PROMPTS[:3]]
    with pytest.raises(ValueError, match=words):
        greedy(model, tokenizer, texts, limits, rows=rows)


def test_a_row_that_writes_its_end_token_leaves_early_and_the_others_go_on(student):
    """A copy of the student whose end token outscores a token some of its replies write (and others do not):
    those replies end by themselves, in the middle of others, and still each is `generate`'s alone."""
    import copy

    import torch

    from hominem_pipeline.core.lm.generation import decoding_settings

    model, tokenizer = student
    texts = [chat_text(tokenizer, p) for p in PROMPTS]
    written = []
    for text in texts:
        enc = tokenizer([text], return_tensors="pt", add_special_tokens=False)
        out = model.generate(**enc, **decoding_settings(tokenizer, 12, None, None, 1.5))
        written.append(set(out[0, enc["input_ids"].shape[1] :].tolist()))
    token = min(set.union(*written) - set.intersection(*written))
    ending = copy.deepcopy(model)
    head = ending.get_output_embeddings().weight.detach().clone()  # untied: the prompts read the same embeddings
    head[tokenizer.eos_token_id] = head[token] * 2.0  # the prompt holds the end token: penalised
    ending.get_output_embeddings().weight = torch.nn.Parameter(head)
    alone = [generate(ending, tokenizer, [t], max_new_tokens=12, seed=0, repetition_penalty=1.5)[0] for t in texts]
    assert any(g.finished for g in alone) and not all(g.finished for g in alone)
    assert greedy(ending, tokenizer, texts, 12, repetition_penalty=1.5, rows=3) == alone
