"""The reply checks' item sets (`evaluation.reply_checks`: config/checks/*.jsonl) and how the student reads each item.

Every item is a conversation the student answers (its last message the person's) and what its reply is scored by:
the answers any of which recall and facts look for, the instructions (IFEval's ids and arguments) a prompt carries,
or nothing (sameness reads the replies together). A bad line is refused with its file, line and the fix.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hominem_pipeline.core.config.evaluation import REPLY_CHECKS

Messages = tuple[dict[str, str], ...]


@dataclass(frozen=True)
class ReplyItem:
    """One item of a check.

    Args:
        check: recall | facts | instructions | sameness.
        id: the item's id in its file.
        messages: the conversation the student answers, the last message the person's.
        answers: recall and facts: the reply counts when it says any of these (a whole word, any case).
        instructions: instructions: (IFEval instruction id, its arguments) for each instruction of the prompt.
        kind: recall: what was stated (name, place, pet, number); else empty.
    """

    check: str
    id: str
    messages: Messages
    answers: tuple[str, ...] = ()
    instructions: tuple[tuple[str, dict[str, Any]], ...] = ()
    kind: str = ""

    @property
    def prompt(self) -> str:
        return self.messages[-1]["content"]


@dataclass(frozen=True)
class ReplyCheckSets:
    """The items of every check that is on, and the tokens of each check's replies."""

    items: dict[str, list[ReplyItem]]
    max_new_tokens: dict[str, int]
    sources: dict[str, str] = field(default_factory=dict)  # check -> its file

    def all(self) -> list[ReplyItem]:
        return [item for check in self.items.values() for item in check]

    def first(self, n: int) -> ReplyCheckSets:
        """The first `n` items of each check (at least two, so each check has a standard error)."""
        return ReplyCheckSets({c: v[: max(n, 2)] for c, v in self.items.items()}, self.max_new_tokens, self.sources)

    def describe(self) -> dict[str, Any]:
        return {c: {"items": len(v), "file": self.sources.get(c)} for c, v in self.items.items()}


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: not a JSON object ({exc.msg}); write one item per line") from exc
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ValueError(f'{path}:{number}: an item needs an "id" string; got {line[:80]!r}')
        rows.append((number, row))
    return rows


def _strings(row: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = row.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f'{where}: "{key}" must be a non-empty list of strings; got {value!r}')
    return tuple(value)


def _messages(row: dict[str, Any], where: str) -> Messages:
    value = row.get("messages")
    ok = (
        isinstance(value, list) and value and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in value)
    )
    if not ok or value[-1]["role"] != "user":
        raise ValueError(f'{where}: "messages" must be role/content objects ending with the user\'s; got {value!r}')
    return tuple({"role": str(m["role"]), "content": str(m["content"])} for m in value)


def _item(check: str, row: dict[str, Any], where: str) -> ReplyItem:
    if check == "recall":
        messages = _messages(row, where)
        return ReplyItem(check, row["id"], messages, _strings(row, "answers", where), kind=str(row.get("kind", "")))
    if check == "facts":
        question = _strings({"q": [row.get("question")]}, "q", where)[0]
        return ReplyItem(check, row["id"], ({"role": "user", "content": question},), _strings(row, "answers", where))
    if check == "instructions":
        from hominem_pipeline.core.evaluation.reply_checks.instructions import INSTRUCTIONS

        ids, kwargs = _strings(row, "instruction_id_list", where), row.get("kwargs")
        if not isinstance(kwargs, list) or len(kwargs) != len(ids) or not all(isinstance(k, dict) for k in kwargs):
            raise ValueError(f'{where}: "kwargs" must hold one object per instruction id; got {kwargs!r}')
        unknown = [i for i in ids if i not in INSTRUCTIONS]
        if unknown:
            raise ValueError(f"{where}: unknown instruction id(s) {unknown}; known: {sorted(INSTRUCTIONS)}")
        prompt = _strings({"p": [row.get("prompt")]}, "p", where)[0]
        return ReplyItem(
            check, row["id"], ({"role": "user", "content": prompt},), instructions=tuple(zip(ids, kwargs))
        )
    message = _strings({"m": [row.get("message")]}, "m", where)[0]
    return ReplyItem(check, row["id"], ({"role": "user", "content": message},))


def read_set(check: str, path: Path, max_items: int | None = None) -> list[ReplyItem]:
    """The items of one check's file (the first `max_items`; None: all)."""
    if check not in REPLY_CHECKS:
        raise ValueError(f"unknown reply check {check!r}; one of {REPLY_CHECKS}")
    if not path.is_file():
        raise FileNotFoundError(f"evaluation.reply_checks.{check}: no file {path}; point it at a set or set it null")
    items = [_item(check, row, f"{path}:{n}") for n, row in _rows(path)]
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise ValueError(f"{path}: the id {item.id!r} is used twice; ids name the items in the gate's record")
        seen.add(item.id)
    return items[:max_items] if max_items is not None else items


def load_reply_checks(cfg: Any) -> ReplyCheckSets | None:
    """The sets `cfg.evaluation.reply_checks` names (None when every check is off)."""
    rc = cfg.evaluation.reply_checks
    files = {c: getattr(rc, c) for c in REPLY_CHECKS if getattr(rc, c)}
    if not files:
        return None
    items = {c: read_set(c, cfg.path(f), rc.max_items) for c, f in files.items()}
    return ReplyCheckSets(items, {c: rc.max_new_tokens[c] for c in files}, dict(files))


def model_input(item: ReplyItem, view: Callable[[list[dict[str, str]]], list[dict[str, str]]] | None) -> list:
    """The conversation as the served student reads it: recall's through `view` (the service's rewriting of the
    input, e.g. `with_stated_facts` when serving.recall_facts is on), the others as written."""
    messages = [dict(m) for m in item.messages]
    return view(messages) if view is not None and item.check == "recall" else messages


def item_keys(items: Sequence[ReplyItem], texts: Sequence[str], max_new_tokens: dict[str, int]) -> list[str]:
    """The reply cache's key of each item: what the student reads and how long it may answer, so a changed item,
    view or token limit is generated again."""

    def digest(text: str, tokens: int) -> str:
        return hashlib.sha256(json.dumps([text, tokens]).encode()).hexdigest()[:16]

    return [f"check:{i.check}:{digest(t, max_new_tokens[i.check])}" for i, t in zip(items, texts)]
