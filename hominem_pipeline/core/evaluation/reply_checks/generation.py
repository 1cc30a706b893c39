"""One model's replies to the reply checks' items: greedy, with the evaluation's repetition penalty and plain start,
each check's token limit, on one shared cache; those a reply cache already holds are not generated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hominem_pipeline.core.evaluation.reply_checks.sets import ReplyCheckSets, item_keys, model_input

View = Callable[[list[dict[str, str]]], list[dict[str, str]]]


def check_keys(tokenizer: Any, sets: ReplyCheckSets, view: View | None) -> dict[str, list[str]]:
    """Each check's items' keys in a reply cache (see `sets.item_keys`)."""
    from hominem_pipeline.core.lm.generation import messages_text

    return {
        check: item_keys(items, [messages_text(tokenizer, model_input(i, view)) for i in items], sets.max_new_tokens)
        for check, items in sets.items.items()
    }


def check_requests(tokenizer: Any, sets: ReplyCheckSets, view: View | None) -> dict[str, tuple[str, int]]:
    """What the student is asked for each item, by its reply cache key: the text it reads and its token limit (an
    item twice in a set is asked once)."""
    from hominem_pipeline.core.lm.generation import messages_text

    asked: dict[str, tuple[str, int]] = {}
    for check, items in sets.items.items():
        texts = [messages_text(tokenizer, model_input(i, view)) for i in items]
        asked |= {
            k: (t, sets.max_new_tokens[check]) for k, t in zip(item_keys(items, texts, sets.max_new_tokens), texts)
        }
    return asked


def check_replies(
    model: Any,
    tokenizer: Any,
    sets: ReplyCheckSets,
    evaluation: Any,
    seed: int,
    known: dict[str, str],
    view: View | None = None,
    what: str = "reply checks",
) -> dict[str, list[str]]:
    """`model`'s replies (as it stands: the caller sets its adapter) to every item, by check in the sets' order.
    `known` (cache key -> reply) is read first and the new replies are added to it. Every check's items are decoded
    together, each to its own token limit (`lm.greedy`), `evaluation.batch_size` rows at a time. Greedy decoding
    draws nothing: `seed` is not read."""
    from hominem_pipeline.core.lm.greedy import decode_as_evaluated

    keys = check_keys(tokenizer, sets, view)
    todo = {k: asked for k, asked in check_requests(tokenizer, sets, view).items() if k not in known}
    texts, limits = [text for text, _ in todo.values()], [limit for _, limit in todo.values()]
    out = decode_as_evaluated(model, tokenizer, texts, limits, evaluation, what)
    known.update({k: g.text for k, g in zip(todo, out)})
    return {c: [known[k] for k in keys[c]] for c in sets.items}
