"""Memory extraction (design 001 Phase 5.5.4): facts and corrections a person states in conversation
become memory rows, `{"prompt", "response", "fact"}`, that the memory channel of `dual` trains on and
the memory probe asks (`data/sft/conversations.jsonl`, one of `policy.dual.memory_files`).

Each user message of the interaction log is read sentence by sentence for a statement about the person
("my name is Ana", "I live in Lisbon", "my dog is called Rex", "my favorite color is green") or a
correction of a plain fact ("Actually, the capital of Australia is Canberra, not Sydney"). Each becomes
a question, the answer to learn, and the fact the probe looks for; the fact is always words the person
wrote, never made up. A later statement of the same thing replaces the earlier one (the person
corrected it), so the file holds one row per question, the newest, with the turn it came from.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXTRACTED = "conversations.jsonl"  # in data/sft/: the rows extracted from the log

_VALUE = r"([A-Z0-9][\w'\-]*(?:\s+[A-Z0-9][\w'\-]*){0,3}|[a-z][\w'\-]*(?:\s+[a-z][\w'\-]*){0,2})"  # a name, or up to three plain words
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
    (re.compile(rf"\b[Mm]y (?:favorite|favourite) {_THING} is {_VALUE}{_END}"), "What is my favorite {0}?", "Your favorite {0} is {1}."),
    (re.compile(rf"\b[Mm]y {_THING}(?:'s name| is called| is named) (?:is )?{_NAME}{_END}"), "What is my {0} called?", "Your {0} is called {1}."),
]
# "Actually, the capital of Australia is Canberra, not Sydney." / "No, water boils at 100 degrees" is not
# of this shape and is left alone: only "<the subject> is <value>" after a word that marks a correction.
CORRECTION = re.compile(rf"^(?:actually|no|correction|in fact)[,:]?\s+(the\s+[a-z][\w\s'\-]*?)\s+is\s+{_VALUE}(?:,?\s+not\s+[^.!?]+)?\s*[.!]?$",
                        re.IGNORECASE)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class StatedFact:
    prompt: str  # the question the memory probe asks
    response: str  # the answer the memory channel teaches
    fact: str  # the words of the person's message the answer must contain
    kind: str  # statement (about the person) | correction (of a plain fact)
    message: str  # the sentence it came from
    turn: str  # the turn whose conversation held it
    time: str

    def row(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "response": self.response, "fact": self.fact, "kind": self.kind, "said": self.message,
                "turn": self.turn, "time": self.time}


def facts_in(message: str) -> list[tuple[str, str, str, str]]:
    """(question, answer, fact, kind) for each statement or correction in one user message."""
    found = []
    for sentence in (s.strip() for s in _SENTENCES.split(message) if s.strip()):
        if (m := CORRECTION.match(sentence)) is not None:
            subject, value = m.group(1).strip(), m.group(2).strip()
            found.append((f"What is {subject}?", f"{subject[0].upper()}{subject[1:]} is {value}.", value, "correction"))
            continue
        for pattern, question, answer in STATEMENTS:
            for m in pattern.finditer(sentence):
                groups = [g.strip() for g in m.groups()]
                found.append((question.format(*groups), re.sub(r"\s+", " ", answer.format(*groups)), groups[-1], "statement"))
    return found


def extract_facts(events: Iterable[dict[str, Any]]) -> list[StatedFact]:
    """The facts stated in the user messages of the log's turns, oldest first (a message repeated in
    later turns' histories counts once, at its first turn)."""
    seen: set[str] = set()
    out: list[StatedFact] = []
    for event in sorted((e for e in events if e.get("kind") == "turn"), key=lambda e: e["time"]):
        for message in event.get("messages") or []:
            text = message.get("content", "") if message.get("role") == "user" else ""
            if not text or text in seen:
                continue
            seen.add(text)
            out += [StatedFact(q, a, f, kind, text, event["id"], event["time"]) for q, a, f, kind in facts_in(text)]
    return out


def write_extracted(folder: Path, facts: list[StatedFact]) -> tuple[Path, int]:
    """Merge `facts` into `folder/conversations.jsonl` (one row per question, the newest statement wins)
    and replace the file whole; returns (the file, rows that are new or changed)."""
    path = Path(folder) / EXTRACTED
    rows: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row["prompt"]] = row
    before = {k: json.dumps(v, sort_keys=True) for k, v in rows.items()}
    for fact in facts:
        if fact.prompt not in rows or rows[fact.prompt].get("time", "") <= fact.time:
            rows[fact.prompt] = fact.row()
    changed = sum(before.get(k) != json.dumps(v, sort_keys=True) for k, v in rows.items())
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in sorted(rows.values(), key=lambda r: r["time"])), encoding="utf-8")
        os.replace(tmp, path)
    return path, changed

