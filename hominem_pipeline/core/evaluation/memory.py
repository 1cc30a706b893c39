"""The memory channel's data: instruction-response rows from JSONL files, and the memory probe that
asks their fact questions of the base and the adapter.

A row is one JSON object per line: `{"prompt": ..., "response": ...}` (`instruction` is accepted for
`prompt`), optionally `"fact"`: a string, or a list of accepted strings, that a reply's first sentence
must contain (whole words, case-insensitive) to count as reproducing the fact."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.pipeline.artifacts import file_sha256, fingerprint

MEMORY_COLUMNS = ["memory_id", "prompt", "response", "facts", "source"]


class MemoryFileError(ValueError):
    """A memory (SFT) file cannot be read or has a bad row."""


def memory_files(paths: Sequence[Path]) -> list[Path]:
    """The JSONL files named by `paths`: files as given, folders' `*.jsonl` in name order; missing paths
    are skipped (data/sft/ exists only once a user adds files)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.glob("*.jsonl") if p.is_file())
        elif path.is_file():
            found.append(path)
    return found


def _text(row: dict[str, Any], keys: tuple[str, ...], where: str) -> str:
    for key in keys:
        value = row.get(key)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise MemoryFileError(f"{where}: {key!r} must be a non-empty string, got {value!r}")
            return value.strip()
    raise MemoryFileError(
        f'{where}: no {" or ".join(repr(k) for k in keys)}; each line needs {{"prompt": ..., "response": ...}}'
    )


def _facts(row: dict[str, Any], where: str) -> list[str]:
    fact = row.get("fact")
    if fact is None:
        return []
    facts = [fact] if isinstance(fact, str) else fact
    if not isinstance(facts, list) or not facts or not all(isinstance(f, str) and f.strip() for f in facts):
        raise MemoryFileError(f"{where}: 'fact' must be a non-empty string or a list of them, got {fact!r}")
    return [f.strip() for f in facts]


def read_memory_rows(paths: Sequence[Path]) -> pd.DataFrame:
    """Every row of the memory files (see the module), in file order; a bad line fails with its file and
    line number. Blank lines are skipped; repeated (prompt, response) rows are kept once."""
    rows: list[dict[str, Any]] = []
    for path in memory_files(paths):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MemoryFileError(
                    f'{where} is not JSON ({exc.msg}); each line holds one object like {{"prompt": ..., '
                    f'"response": ...}}'
                ) from exc
            if not isinstance(row, dict):
                raise MemoryFileError(
                    f'{where} holds a {type(row).__name__}, not an object like {{"prompt": ..., "response": ...}}'
                )
            prompt, response = _text(row, ("prompt", "instruction"), where), _text(row, ("response",), where)
            rows.append(
                {
                    "memory_id": fingerprint([prompt, response], 12),
                    "prompt": prompt,
                    "response": response,
                    "facts": _facts(row, where),
                    "source": where,
                }
            )
    frame = pd.DataFrame(rows, columns=MEMORY_COLUMNS)
    return frame.drop_duplicates("memory_id", keep="first").reset_index(drop=True)


def fact_questions(memory: pd.DataFrame | None) -> pd.DataFrame | None:
    """The memory rows that name a fact: the memory probe's questions (None without memory rows)."""
    return None if memory is None else memory[memory["facts"].map(len) > 0].reset_index(drop=True)


def memory_digest(paths: Sequence[Path]) -> list[list[str]]:
    """(file name, sha256) per memory file: part of a stage's fingerprint, so new rows retrain."""
    return [[f"{p.parent.name}/{p.name}", file_sha256(p)] for p in memory_files(paths)]


# Where a reply's first sentence ends: ., ! or ? before white space (not "3.5"), or a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


def answer_sentence(reply: str) -> str:
    """The reply's first sentence: the answer the probe judges. A small model often writes a wrong answer
    and the right token later ("1 hour = 30 minutes. So, 24 hours is equal to 60 minutes"), or the
    reverse ("is -18 ... may not be exactly 0°C"); judging the whole reply counts those as known. Short-
    answer benchmarks cut generation the same way (lm-evaluation-harness stops TriviaQA at "." or a newline)."""
    return _SENTENCE_END.split(reply.strip(), maxsplit=1)[0]


def reproduces(reply: str, facts: Sequence[str]) -> bool:
    """True when the reply's first sentence (`answer_sentence`) contains any of `facts` as whole words
    (case-insensitive)."""
    answer = answer_sentence(reply)
    return any(re.search(rf"(?<!\w){re.escape(f)}(?!\w)", answer, flags=re.IGNORECASE) for f in facts)


@dataclass(frozen=True)
class MemoryProbe:
    questions: int
    base: int  # facts the base reproduces
    adapter: int  # facts base+adapter reproduces
    kept: int  # reproduced by both
    lost: list[str]  # prompts the base answered with the fact and the adapter no longer does
    gained: list[str]  # prompts only the adapter answers with the fact

    def as_dict(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "base": self.base,
            "adapter": self.adapter,
            "kept": self.kept,
            "lost": len(self.lost),
            "gained": len(self.gained),
            "lost_prompts": self.lost,
            "gained_prompts": self.gained,
        }


def probe(rows: pd.DataFrame, replies: dict[str, list[str]]) -> MemoryProbe:
    """Which facts each side's replies (`base`, `adapter`, in `rows` order) reproduce."""
    hits = {
        side: [reproduces(reply, facts) for reply, facts in zip(replies[side], rows["facts"])]
        for side in ("base", "adapter")
    }
    prompts = list(rows["prompt"])
    return MemoryProbe(
        questions=len(rows),
        base=sum(hits["base"]),
        adapter=sum(hits["adapter"]),
        kept=sum(b and a for b, a in zip(hits["base"], hits["adapter"])),
        lost=[p for p, b, a in zip(prompts, hits["base"], hits["adapter"]) if b and not a],
        gained=[p for p, b, a in zip(prompts, hits["base"], hits["adapter"]) if a and not b],
    )
