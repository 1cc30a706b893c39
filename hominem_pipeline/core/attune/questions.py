"""The question pool: pairs of replies a person may be asked to choose between (`GET /feedback/next`).

Two sources: the teacher's candidates of the newest `teacher_trajectories` day (every two candidates of
one prompt, at most `PER_PROMPT` pairs a prompt), and the question files imported with `hominem data
import-questions` (`<serving.log_dir>/questions/*.jsonl`: one `{"prompt", "a", "b", "source"}` per line;
an imported preference file's labels are dropped and its replies put in an order set by their content).
A question's id is a digest of its prompt and its two replies in either order, so the same pair asked
twice, from either source, is one question. `choose` scores a sample of the unanswered ones by expected
information (`attune.selection`) and picks one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.files import write_text_atomic
from hominem_pipeline.core.online.feedback import transcript
from hominem_pipeline.core.pipeline.artifacts import fingerprint

PER_PROMPT = 3  # candidate pairs per prompt offered from the teacher's day
QUESTIONS = "questions"  # folder under <serving.log_dir> of imported question files
_TURN = re.compile(r"\n\n(Human|Assistant): ")


@dataclass(frozen=True)
class Question:
    id: str
    messages: tuple[tuple[str, str], ...]  # (role, content), the user's last message last
    a: str
    b: str
    source: str

    @property
    def prompt(self) -> str:
        """As a preference pair's prompt reads (`online.feedback.transcript`): the message, or the transcript."""
        return transcript(self.messages)

    def turn_ids(self) -> tuple[str, str]:
        return f"{self.id}-a", f"{self.id}-b"


def question_id(prompt: str, a: str, b: str) -> str:
    return "q" + fingerprint([prompt, sorted([a, b])], 16)


def messages_of(prompt: str) -> tuple[tuple[str, str], ...]:
    """A transcript prompt ("\\n\\nHuman: ...\\n\\nAssistant: ...\\n\\nHuman: ...\\n\\nAssistant:") as messages;
    else one user message."""
    if not prompt.startswith("\n\nHuman: "):
        return (("user", prompt),)
    parts = _TURN.split(prompt.removesuffix("\n\nAssistant:"))[1:]
    messages = tuple(
        ("user" if who == "Human" else "assistant", text.strip()) for who, text in zip(parts[::2], parts[1::2])
    )
    messages = tuple(m for m in messages if m[1] or m[0] == "user")
    if messages and messages[-1][0] == "assistant" and not messages[-1][1]:
        messages = messages[:-1]
    return messages if messages and messages[-1][0] == "user" else (("user", prompt),)


def make(prompt: str, x: str, y: str, source: str) -> Question:
    """A question on replies `x` and `y`, in an order set by their content (not by which was chosen). Its id is
    that of the prompt as its messages read it back (`Question.prompt`), so a question written to a file and read
    again keeps its id."""
    messages = messages_of(prompt)
    canonical = transcript(messages)
    a, b = (x, y) if fingerprint([canonical, x], 8) <= fingerprint([canonical, y], 8) else (y, x)
    return Question(question_id(canonical, a, b), messages, a, b, source)


def from_candidates(frame: pd.DataFrame, source: str) -> list[Question]:
    """Pairs of one prompt's candidates (columns prompt_id, prompt, response), at most PER_PROMPT a prompt."""
    out = []
    for _, group in frame[frame["response"].fillna("").str.strip() != ""].groupby("prompt_id", sort=True):
        replies = list(dict.fromkeys(group["response"]))
        pairs = [(replies[i], replies[j]) for i in range(len(replies)) for j in range(i + 1, len(replies))][
            :PER_PROMPT
        ]
        out += [make(str(group["prompt"].iloc[0]), a, b, source) for a, b in pairs]
    return out


def read_question_file(path: Path) -> list[Question]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out.append(make(row["prompt"], row["a"], row["b"], row.get("source") or f"file:{path.name}"))
    return out


def parse_questions(path: Path) -> tuple[pd.DataFrame, int]:
    """A file of `{"prompt", "a", "b"}` lines as pairs (columns prompt, chosen, rejected: the order means
    nothing here) and the number of unusable lines (not JSON, a field missing or blank, a and b the same)."""
    rows, bad = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if (
            isinstance(row, dict)
            and all(isinstance(row.get(k), str) and row[k].strip() for k in ("prompt", "a", "b"))
            and row["a"] != row["b"]
        ):
            rows.append({"prompt": row["prompt"], "chosen": row["a"], "rejected": row["b"]})
        else:
            bad += 1
    return pd.DataFrame(rows, columns=["prompt", "chosen", "rejected"]), bad


def write_question_file(pairs: pd.DataFrame, folder: Path, source: str) -> tuple[Path, int]:
    """Imported pairs (prompt, chosen, rejected) as a question file, their labels dropped; named by content, so
    importing the same pairs again changes nothing. (path, questions)."""
    questions = [make(str(r.prompt), str(r.chosen), str(r.rejected), source) for r in pairs.itertuples()]
    questions = list({q.id: q for q in questions}.values())
    text = "".join(
        json.dumps({"prompt": q.prompt, "a": q.a, "b": q.b, "source": q.source}, ensure_ascii=False) + "\n"
        for q in questions
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{fingerprint(text, 16)}.jsonl"
    if not path.exists():
        write_text_atomic(path, text)
    return path, len(questions)


def load_pool(cfg: Any) -> list[Question]:
    """The teacher's newest day's candidates (under this config; `attunement.selection.teacher_candidates`) and every
    imported question file, one per id."""
    from hominem_pipeline.core.pipeline.lineage import lineage

    pool: dict[str, Question] = {}
    ref = lineage(cfg).newest("teacher_trajectories")[0] if cfg.attunement.selection.teacher_candidates else None
    if ref is not None:
        frame = pd.read_parquet(ref.file("trajectories.parquet"), columns=["prompt_id", "prompt", "response"])
        pool |= {q.id: q for q in from_candidates(frame, f"teacher:{ref.partition}")}
    folder = cfg.data_dir / cfg.serving.log_dir / QUESTIONS
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        pool |= {q.id: q for q in read_question_file(path)}
    return list(pool.values())


def likeness(prompts: Sequence[str], clusters: Sequence[dict[str, Any]]) -> tuple[np.ndarray, list[str | None]]:
    """Per prompt, the largest share of a growing error cluster's terms it contains, and that cluster's name."""
    best, names = np.zeros(len(prompts)), [None] * len(prompts)
    for c in clusters:
        terms = [t.lower() for t in c["terms"]]
        if not terms:
            continue
        for i, p in enumerate(prompts):
            words = set(re.findall(r"[a-z]+", p.lower()))
            share = sum(t in words for t in terms) / len(terms)
            if share > best[i]:
                best[i], names[i] = share, c["name"]
    return best, names


def novelty_to(prompts: Sequence[str], seen: Sequence[str]) -> np.ndarray:
    """1 - the largest word-count cosine of each prompt to the prompts already answered (1 with none)."""
    from hominem_pipeline.core.online.replay import _word_vector

    if not len(seen):
        return np.ones(len(prompts))
    old = np.stack([_word_vector(p) for p in seen])
    return np.array([1.0 - float(np.clip((old @ _word_vector(p)).max(), 0, 1)) for p in prompts])


def choose(
    pool: Sequence[Question],
    answered: set[str],
    seen_prompts: Sequence[str],
    score: Callable[[list[Question]], dict] | None,
    clusters: Sequence[dict[str, Any]],
    cfg: Any,
    rng: np.random.Generator,
) -> tuple[Question, Any, dict] | None:
    """(question, Pick, its scores) among a uniform sample of `cfg.pool_sample` unanswered questions; None when
    every question is answered. `score(questions)` gives p_a, gap, spread (arrays) and each side's scores (`a`, `b`)
    (None: no reward model, so the pick is at random); `clusters`: the growing error clusters (name, terms)."""
    from hominem_pipeline.core.attune.selection import information, pick

    open_ = [q for q in pool if q.id not in answered]
    if not open_:
        return None
    from hominem_pipeline.core.attune.selection import PARTS, Pick

    if (
        score is None or rng.random() < cfg.random_share
    ):  # the random share is drawn first: only the one picked is scored
        q = open_[int(rng.integers(len(open_)))]
        if score is None:
            return (
                q,
                Pick(
                    0,
                    "random",
                    0.0,
                    {k: 0.0 for k in PARTS},
                    "picked at random: no reward model is served to say what it does not know",
                ),
                {},
            )
        one = score([q])
        parts = information(one["p_a"], one["gap"], one["spread"], cfg.weights)
        return (
            q,
            Pick(
                0,
                "random",
                float(parts.at[0, "value"]),
                {k: float(parts.at[0, k]) for k in PARTS},
                f"picked at random ({cfg.random_share:.0%} of questions are), so what people answer "
                "stays an unbiased sample",
            ),
            {k: (v[0] if isinstance(v, (list, np.ndarray)) else v) for k, v in one.items()},
        )
    sample = [open_[i] for i in sorted(rng.choice(len(open_), size=min(cfg.pool_sample, len(open_)), replace=False))]
    prompts = [q.prompt for q in sample]
    scores = score(sample)
    cluster, names = likeness(prompts, clusters) if clusters else (None, None)
    info = information(
        scores["p_a"], scores["gap"], scores["spread"], cfg.weights, cluster, novelty_to(prompts, seen_prompts)
    )
    chosen = pick(info, 0.0, rng, scores["p_a"], names)
    return (
        sample[chosen.index],
        chosen,
        {k: (v[chosen.index] if isinstance(v, (list, np.ndarray)) else v) for k, v in scores.items()},
    )
