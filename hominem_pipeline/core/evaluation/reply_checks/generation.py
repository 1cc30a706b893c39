"""One model's replies to the reply checks' items: greedy, with the evaluation's repetition penalty and plain start,
each check's token limit, batched as the evaluation batches; those a reply cache already holds are not generated."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.evaluation.reply_checks.sets import ReplyCheckSets, item_keys, model_input

log = logging.getLogger(__name__)

View = Callable[[list[dict[str, str]]], list[dict[str, str]]]


def check_keys(tokenizer: Any, sets: ReplyCheckSets, view: View | None) -> dict[str, list[str]]:
    """Each check's items' keys in a reply cache (see `sets.item_keys`)."""
    from hominem_pipeline.core.lm.generation import messages_text

    return {
        check: item_keys(items, [messages_text(tokenizer, model_input(i, view)) for i in items], sets.max_new_tokens)
        for check, items in sets.items.items()
    }


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
    `known` (cache key -> reply) is read first and the new replies are added to it. Checks with the same token limit
    are decoded in shared batches (a CPU decoding step costs little more for a full batch than for a half one)."""
    from hominem_pipeline.core.lm.generation import generate, messages_text

    texts = {c: [messages_text(tokenizer, model_input(i, view)) for i in items] for c, items in sets.items.items()}
    keys = {c: item_keys(sets.items[c], texts[c], sets.max_new_tokens) for c in sets.items}
    by_limit: dict[int, list[tuple[str, int]]] = {}
    for check in sets.items:
        todo = [(check, n) for n, k in enumerate(keys[check]) if k not in known]
        by_limit.setdefault(sets.max_new_tokens[check], []).extend(todo)
    progress = Progress(what, sum(len(t) for t in by_limit.values()), log, unit="replies")
    for limit, todo in by_limit.items():
        for start in range(0, len(todo), evaluation.batch_size):
            chunk = todo[start : start + evaluation.batch_size]
            out = generate(
                model,
                tokenizer,
                [texts[check][n] for check, n in chunk],
                max_new_tokens=limit,
                seed=seed,
                repetition_penalty=evaluation.repetition_penalty,
                plain_start=evaluation.plain_start,
            )
            known.update({keys[check][n]: g.text for (check, n), g in zip(chunk, out)})
            progress.advance(len(chunk))
    return {c: [known[k] for k in keys[c]] for c in sets.items}
