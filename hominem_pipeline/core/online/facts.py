"""Memory extraction: facts and corrections a person states in conversation
become memory rows, `{"prompt", "response", "fact"}`, that the memory channel of `dual` trains on and
the memory probe asks (`data/sft/conversations.jsonl`, one of `policy.dual.memory_files`).

Each user message of the interaction log is read sentence by sentence for a statement about the person
("my name is Ana", "I live in Lisbon", "my dog is called Rex", "my favorite color is green") or a
correction of a plain fact ("Actually, the capital of Australia is Canberra, not Sydney"). Each becomes
a question, the answer to learn, and the fact the probe looks for; the fact is always words the person
wrote, never made up. A later statement of the same thing replaces the earlier one (the person
corrected it), so the file holds one row per question, the newest, with the turn it came from.

`online.facts_by` chooses who reads the messages: `rules` (the patterns below: offline, instant, only
the shapes they know), `teacher` (the configured teacher, asked for a JSON list of facts per message:
any phrasing, at a call per new message; its answer is checked: the fact must be words of the message
and of the answer, the question a question, or the item is dropped with the reason in the log) or
`both`. The teacher's answers are kept per teacher and message in `<log_dir>/facts/`, so each message
is read once.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hominem_pipeline.core.common.files import write_text_atomic

log = logging.getLogger(__name__)

EXTRACTED = "conversations.jsonl"  # in data/sft/: the rows extracted from the log
LIKED = "liked.jsonl"  # in data/sft/: the replies people thumbed up (`feedback.liked_replies`)

# a name, or up to three plain words
_VALUE = r"([A-Z0-9][\w'\-]*(?:\s+[A-Z0-9][\w'\-]*){0,3}|[a-z][\w'\-]*(?:\s+[a-z][\w'\-]*){0,2})"
_NAME = r"([A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*){0,2})"  # capitalised words
_THING = r"([a-z]+(?:\s+[a-z]+)?)"  # dog, best friend, ...
_END = r"(?=\s*(?:[.!?,;]|$|\s+(?:and|but|because|so)\b))"

# (pattern, question, answer): {0}, {1} are the pattern's groups (the fact is the last group)
STATEMENTS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(rf"\b[Mm]y name is {_NAME}{_END}"), "What is my name?", "Your name is {0}."),
    (re.compile(rf"\b[Cc]all me {_NAME}{_END}"), "What is my name?", "Your name is {0}."),
    (re.compile(rf"\bI live in {_VALUE}{_END}"), "Where do I live?", "You live in {0}."),
    (re.compile(rf"\bI work as (an? |){_VALUE}{_END}"), "What is my job?", "You work as {0} {1}."),
    (re.compile(rf"\bI work (?:at|for) {_VALUE}{_END}"), "Where do I work?", "You work at {0}."),
    (re.compile(rf"\b[Mm]y birthday is (?:on )?{_VALUE}{_END}"), "When is my birthday?", "Your birthday is {0}."),
    (
        re.compile(rf"\b[Mm]y (?:favorite|favourite) {_THING} is {_VALUE}{_END}"),
        "What is my favorite {0}?",
        "Your favorite {0} is {1}.",
    ),
    (
        re.compile(rf"\b[Mm]y {_THING}(?:'s name| is called| is named) (?:is )?{_NAME}{_END}"),
        "What is my {0} called?",
        "Your {0} is called {1}.",
    ),
]
# "Actually, the capital of Australia is Canberra, not Sydney." / "No, water boils at 100 degrees" is not
# of this shape and is left alone: only "<the subject> is <value>" after a word that marks a correction.
CORRECTION = re.compile(
    r"^(?:actually|no|correction|in "
    rf"fact)[,:]?\s+(the\s+[a-z][\w\s'\-]*?)\s+is\s+{_VALUE}(?:,?\s+not\s+[^.!?]+)?\s*[.!]?$",
    re.IGNORECASE,
)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class StatedFact:
    prompt: str  # the question the memory probe asks
    response: str  # the answer the memory channel teaches
    fact: str  # the words of the person's message the answer must contain
    kind: str  # statement (about the person) | correction (of a plain fact): by the patterns; teacher: by the teacher
    message: str  # the sentence it came from
    turn: str  # the turn whose conversation held it
    time: str

    def row(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "response": self.response,
            "fact": self.fact,
            "kind": self.kind,
            "said": self.message,
            "turn": self.turn,
            "time": self.time,
        }


def facts_in(message: str) -> list[tuple[str, str, str, str]]:
    """(question, answer, fact, kind) for each statement or correction in one user message."""
    found = []
    for sentence in (s.strip() for s in _SENTENCES.split(message) if s.strip()):
        if (m := CORRECTION.match(sentence)) is not None:
            subject, value = m.group(1).strip(), m.group(2).strip()
            found.append(
                (f"What is {subject}?", f"{subject[0].upper()}{subject[1:]} is {value}.", value, "correction")
            )
            continue
        for pattern, question, answer in STATEMENTS:
            for m in pattern.finditer(sentence):
                groups = [g.strip() for g in m.groups()]
                found.append(
                    (question.format(*groups), re.sub(r"\s+", " ", answer.format(*groups)), groups[-1], "statement")
                )
    return found


FACTS_SYSTEM = (
    "You read one message a user sent to an assistant and list the facts it states that the assistant "
    "should remember: "
    "facts about the user (name, home, work, family, pets, likes, plans, health) and corrections of "
    "facts the user makes. "
    "Answer with JSON only."
)
FACTS_INSTRUCTION = (
    "Message:\n<<<\n{message}\n>>>\n\n"
    'Reply with a JSON list, one object per fact: {{"question": a question the user could ask later to check that the '
    'assistant remembers, in the user\'s voice ("What is my name?"), "answer": the reply to it, addressed to the user '
    '("Your name is Ana."), "fact": the fewest words copied from the message that the answer must contain ("Ana")}}. '
    "Reply [] if the message states no such fact."
)


def teacher_facts_in(message: str, text: str | None) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """(question, answer, fact, "teacher") for each valid item of the teacher's answer `text` about
    `message`, and why each other item (or the whole answer) was dropped."""
    if text is None:
        return [], ["the teacher's call failed"]
    start, end = text.find("["), text.rfind("]")
    try:
        items = json.loads(text[start : end + 1]) if start >= 0 and end > start else None
    except ValueError:
        items = None
    if not isinstance(items, list):
        return [], [f"the teacher's answer is not a JSON list: {text[:80]!r}"]
    found, dropped = [], []
    flat = " ".join(message.split()).lower()
    for item in items:
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) and item[k].strip() for k in ("question", "answer", "fact")
        ):
            dropped.append(f"not an object with question, answer and fact strings: {str(item)[:80]!r}")
            continue
        question, answer, fact = (" ".join(item[k].split()) for k in ("question", "answer", "fact"))
        if fact.lower() not in flat:
            dropped.append(f"the fact {fact!r} is not words of the message")
        elif fact.lower() not in answer.lower():
            dropped.append(f"the answer {answer!r} does not contain the fact {fact!r}")
        elif not question.endswith("?"):
            dropped.append(f"{question!r} is not a question")
        else:
            found.append((question, answer, fact, "teacher"))
    return found, dropped


RECALL_NOTE = "Facts the user told you earlier in this conversation, in their words (use them exactly): "


def with_stated_facts(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """`messages` (a conversation, the last message the user's) with what the person stated about
    themselves in earlier messages (the patterns' statements: "My name is Ana.", "I live in Lisbon.")
    repeated, in their own sentences, at the start of the last message, so that a small model answering
    many tokens later has the words in front of it and copies them instead of misremembering ("Kanaq").
    The newest statement of each fact wins; a fact stated in the last message itself is not repeated;
    unchanged when there is none. The model's input only: what is logged stays what was said."""
    stated: dict[str, str] = {}  # question -> the sentence that stated it
    for message in messages[:-1]:
        if message.get("role") == "user":
            for sentence in (s.strip() for s in _SENTENCES.split(str(message.get("content", ""))) if s.strip()):
                for question, _, _, kind in facts_in(sentence):
                    if kind == "statement":
                        stated.pop(question, None)
                        stated[question] = sentence
    last = messages[-1] if messages else None
    if not stated or last is None or last.get("role") != "user":
        return messages
    said = str(last.get("content", ""))
    known = {q for q, _, _, _ in facts_in(said)}
    sentences = list(dict.fromkeys(s for q, s in stated.items() if q not in known))
    if not sentences:
        return messages
    return [*messages[:-1], {**last, "content": f"({RECALL_NOTE}{' '.join(sentences)})\n{said}"}]


def user_messages(events: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(message, the turn that first held it) for each distinct user message of the log's turns, oldest first."""
    seen: set[str] = set()
    out = []
    for event in sorted((e for e in events if e.get("kind") == "turn"), key=lambda e: e["time"]):
        for message in event.get("messages") or []:
            text = message.get("content", "") if message.get("role") == "user" else ""
            if text and text not in seen:
                seen.add(text)
                out.append((text, event))
    return out


def ask_teacher(
    teacher: Callable[[], Any], messages: list[str], path: Path
) -> dict[str, list[tuple[str, str, str, str]]]:
    """The teacher's valid facts per message; its answers kept in the JSON file `path` by message, so a
    message is sent once (and once more after a failed call). `teacher` builds the teacher, only when a
    message is not in the file."""
    from hominem_pipeline.core.teacher.base import WriteRequest

    try:
        answers: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        answers = {}
    todo = [m for m in messages if m not in answers]
    if todo:
        reader = teacher()
        try:
            out = reader.write(
                [
                    WriteRequest(
                        key=f"facts-{i}",
                        instruction=FACTS_INSTRUCTION.format(message=m),
                        system=FACTS_SYSTEM,
                        max_new_tokens=200,
                        temperature=0.0,
                    )
                    for i, m in enumerate(todo)
                ]
            )
        finally:
            reader.close()
        answers |= {m: t for m, t in zip(todo, out.items) if t is not None}
        write_text_atomic(path, json.dumps(answers, ensure_ascii=False))
    found = {}
    for m in messages:
        found[m], dropped = teacher_facts_in(m, answers.get(m))
        for why in dropped:
            log.info("memory extraction: an item of the teacher's answer about %r dropped: %s", m[:60], why)
    return found


def extract_facts(
    events: Iterable[dict[str, Any]],
    *,
    rules: bool = True,
    teacher: Callable[[], Any] | None = None,
    answers: Path | None = None,
) -> list[StatedFact]:
    """The facts stated in the user messages of the log's turns, oldest first (a message repeated in
    later turns' histories counts once, at its first turn): by the patterns (`rules`) and, given a
    `teacher` (a function building it), by its reading of each message (its answers kept in `answers`)."""
    messages = user_messages(events)
    by_teacher = ask_teacher(teacher, [m for m, _ in messages], answers) if teacher is not None else {}
    out: list[StatedFact] = []
    for text, event in messages:
        found = (facts_in(text) if rules else []) + by_teacher.get(text, [])
        questions = set()
        for q, a, f, kind in found:
            if q not in questions:  # the patterns' reading first, where both found the same question
                questions.add(q)
                out.append(StatedFact(q, a, f, kind, text, event["id"], event["time"]))
    return out


def write_extracted(folder: Path, facts: list[StatedFact]) -> tuple[Path, int]:
    """Merge `facts` into `folder/conversations.jsonl` (one row per question, the newest statement wins)
    and replace the file whole; returns (the file, rows that are new or changed)."""
    path = Path(folder) / EXTRACTED
    rows = _rows_by(path, "prompt")
    before = {k: json.dumps(v, sort_keys=True) for k, v in rows.items()}
    for fact in facts:
        if fact.prompt not in rows or rows[fact.prompt].get("time", "") <= fact.time:
            rows[fact.prompt] = fact.row()
    changed = sum(before.get(k) != json.dumps(v, sort_keys=True) for k, v in rows.items())
    if changed:
        _replace(path, sorted(rows.values(), key=lambda r: r["time"]))
    return path, changed


def write_liked(folder: Path, liked: list[dict[str, Any]], window: set[str], limit: int) -> tuple[Path, int]:
    """Merge the window's liked replies (`feedback.liked_replies`) into `folder/liked.jsonl`, one row per
    turn: a turn of the window that is no longer liked (thumbed down since) leaves, a turn older than the
    window stays; the newest `limit` are kept. Replaces the file whole; returns (the file, rows added,
    changed or removed)."""
    path = Path(folder) / LIKED
    rows = _rows_by(path, "turn")
    before = {k: json.dumps(v, sort_keys=True) for k, v in rows.items()}
    rows = {k: v for k, v in rows.items() if k not in window} | {r["turn"]: r for r in liked}
    kept = sorted(rows.values(), key=lambda r: r["time"])[-limit:] if limit else []
    after = {r["turn"]: json.dumps(r, sort_keys=True) for r in kept}
    changed = sum(before.get(k) != v for k, v in after.items()) + sum(k not in after for k in before)
    if changed:
        _replace(path, kept)
    return path, changed


def _rows_by(path: Path, key: str) -> dict[str, dict[str, Any]]:
    """The JSONL file's rows by their `key` (the last row of a key wins); none when it does not exist."""
    rows: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row[key]] = row
    return rows


def _replace(path: Path, rows: list[dict[str, Any]]) -> None:
    """`path` rewritten whole with `rows` (a temp file renamed over it)."""
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
